//! Validation, once for both precisions: the forward phase plus loss and correct count.

use super::step::{Phases, StepBuffers};
use crate::data::{Dataset, batcher};
use crate::nn::{Mlp, MlpConfig, Totals, take_totals};
use gpulab_core::error::Result;
use gpulab_core::tensor::Backend;

/// Mean loss and accuracy over the whole validation split, in `phases`' precision. A
/// workspace serves every chunk of its size; a short last chunk gets its own (the previous
/// one's totals are read and it is dropped first, so memory peaks as one workspace).
pub fn evaluate<B: Backend, P: Phases<B>>(phases: &mut P, b: &mut B, model: &Mlp<B>, data: &Dataset, batch: usize) -> Result<(f64, f64)> {
    evaluate_with(phases, b, model, data, batch, |p, b, cfg, rows| p.buffers(b, cfg, rows, false))
}

/// `evaluate` on workspaces `make` builds (activation recomputation's hold the logits alone).
pub fn evaluate_with<B: Backend, P: Phases<B>>(
    phases: &mut P,
    b: &mut B,
    model: &Mlp<B>,
    data: &Dataset,
    batch: usize,
    make: impl Fn(&P, &mut B, &MlpConfig, usize) -> Result<P::Buffers>,
) -> Result<(f64, f64)> {
    phases.refresh_weights(b, model)?;
    let n = data.val_len();
    let idx: Vec<u32> = (0..n as u32).collect();
    let (mut xb, mut yb) = (Vec::new(), Vec::new());
    let mut ws: Option<P::Buffers> = None;
    let mut totals = Totals::default();
    let mut add = |b: &mut B, w: &mut P::Buffers| -> Result<()> {
        let t = take_totals(b, &mut [w.accumulators()])?;
        (totals.loss, totals.correct) = (totals.loss + t.loss, totals.correct + t.correct);
        Ok(())
    };
    for chunk in idx.chunks(batch) {
        if ws.as_ref().is_none_or(|w| w.rows() != chunk.len()) {
            if let Some(mut w) = ws.take() {
                add(b, &mut w)?;
            }
            ws = Some(make(phases, b, &model.cfg, chunk.len())?);
        }
        let w = ws.as_mut().expect("created above");
        batcher::gather(&data.val_x, &data.val_y, data.features, chunk, &mut xb, &mut yb);
        let (x, y) = w.inputs();
        b.write_f32(x, &xb)?;
        b.write_u32(y, &yb)?;
        phases.forward(b, model, w)?;
        w.score(b)?;
        b.flush()?;
    }
    if let Some(mut w) = ws {
        add(b, &mut w)?;
    }
    Ok((totals.loss / n as f64, totals.correct as f64 / n as f64))
}
