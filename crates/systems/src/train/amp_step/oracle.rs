//! The model-level pass as it was written before it became one (`nn::pass`): the f32 forward
//! and its two backward loops (`Mlp`), and autocast's forward and two backward loops (`Amp`),
//! kept verbatim as the oracle. The test runs today's phases and these copies on the same
//! model and inputs: loss, logits, every gradient, the 16-bit underflow counts and the order
//! the layers are reported ready in must be the same bits, for an MLP and a CNN, in f32, FP16
//! and BF16, with activations stored or recomputed, and for a pipeline stage's accumulating
//! backward.

use super::*;
use crate::nn::dense::{self, Dense, LayerKind};
use crate::nn::{ConvConfig, GradWrite, OptimizerKind, Precision, Workspace, take_totals};
use crate::train::{F32Phases, StepBuffers};
use gpulab_core::device::CpuBackend;
use gpulab_core::tensor::Epilogue;
use gpulab_core::tensor::prelude::*;

fn no_stem_buffers() -> Error {
    Error::Internal("a CNN's autocast step on a workspace without convolution buffers".into())
}

type Ready<'r, B> = dyn FnMut(&mut B, &Mlp<B>, usize) -> Result<()> + 'r;

fn f32_forward<B: Backend>(model: &Mlp<B>, b: &mut B, ws: &mut Workspace<B>) -> Result<()> {
    if let Some(stem) = &model.stem {
        let sw = ws.stem.as_mut().ok_or_else(|| Error::Internal("no stem buffers".into()))?;
        stem.forward(b, &ws.x, sw, None)?;
    }
    let input = ws.stem.as_ref().map_or(&ws.x, |s| s.output());
    if !ws.recompute {
        return dense::forward(b, model.dense_layers(), input, &mut ws.acts);
    }
    let last = model.weights.len() - 1;
    let hidden = dense::recompute(b, model.dense_layers(), input, last)?;
    let head = model.dense_layers().nth(last).ok_or_else(|| Error::Internal("a model without layers".into()))?;
    head.forward(b, hidden.as_ref().unwrap_or(input), &mut ws.acts[0], false)
}

fn f32_backward_mean<B: Backend>(
    model: &mut Mlp<B>,
    b: &mut B,
    ws: &mut Workspace<B>,
    mean_over: usize,
    ready: &mut Ready<'_, B>,
) -> Result<()> {
    let scale = 1.0 / mean_over as f32;
    if ws.recompute {
        ws.acc.record(b, &ws.acts[0], &ws.y, Some(&mut ws.grads[0]), scale)?;
        return f32_backward_recomputing(model, b, ws, ready);
    }
    let last = model.weights.len() - 1;
    ws.acc.record(b, &ws.acts[last], &ws.y, Some(&mut ws.grads[last]), scale)?;
    f32_backward_layers(model, b, ws, GradWrite::Replace, None, ready)
}

fn f32_backward_recomputing<B: Backend>(model: &mut Mlp<B>, b: &mut B, ws: &mut Workspace<B>, ready: &mut Ready<'_, B>) -> Result<()> {
    let first = ws.stem.as_ref().map_or(&ws.x, |s| s.output());
    let rows = ws.batch;
    let mut flowing: Option<B::Tensor> = None;
    for i in (0..model.weights.len()).rev() {
        let recomputed = dense::recompute(b, model.dense_layers(), first, i)?;
        let input = recomputed.as_ref().unwrap_or(first);
        let grad = flowing.as_ref().unwrap_or(&ws.grads[0]);
        b.matmul(input, grad, &mut model.weights[i].grad, true, false, false)?;
        b.sum_cols(grad, &mut model.biases[i].grad)?;
        ready(b, model, i)?;
        if i > 0 {
            let mut before = b.zeros([rows, model.cfg.widths()[i]], DType::F32, MemCategory::Activations)?;
            b.matmul(grad, &model.weights[i].value, &mut before, false, true, false)?;
            b.relu_backward(&mut before, input)?;
            flowing = Some(before);
        }
    }
    if let (Some(stem), Some(sw)) = (model.stem.as_mut(), ws.stem.as_mut()) {
        let grad = flowing.as_ref().unwrap_or(&ws.grads[0]);
        let out = sw.output_grad().ok_or_else(|| Error::Internal("CNN backward on a forward-only workspace".into()))?;
        b.matmul(grad, &model.weights[0].value, out, false, true, false)?;
        stem.backward(b, &ws.x, sw, None)?;
    }
    Ok(())
}

fn f32_backward_layers<B: Backend>(
    model: &mut Mlp<B>,
    b: &mut B,
    ws: &mut Workspace<B>,
    write: GradWrite<'_, B>,
    mut input_grad: Option<&mut B::Tensor>,
    ready: &mut Ready<'_, B>,
) -> Result<()> {
    let last = model.weights.len() - 1;
    let add = matches!(write, GradWrite::Add { .. });
    for i in (0..=last).rev() {
        let input = if i == 0 { &ws.x } else { &ws.acts[i - 1] };
        let input = match (i, ws.stem.as_ref()) {
            (0, Some(sw)) => sw.output(),
            _ => input,
        };
        b.matmul(input, &ws.grads[i], &mut model.weights[i].grad, true, false, add)?;
        match &write {
            GradWrite::Replace => b.sum_cols(&ws.grads[i], &mut model.biases[i].grad)?,
            GradWrite::Add { ones } => b.matmul(ones, &ws.grads[i], &mut model.biases[i].grad, false, false, true)?,
        }
        ready(b, model, i)?;
        if let (0, Some(stem), Some(sw)) = (i, model.stem.as_mut(), ws.stem.as_mut()) {
            let out = sw.output_grad().ok_or_else(|| Error::Internal("CNN backward on a forward-only workspace".into()))?;
            b.matmul(&ws.grads[0], &model.weights[0].value, out, false, true, false)?;
            stem.backward(b, &ws.x, sw, None)?;
        }
        if i > 0 {
            let (before, after) = ws.grads.split_at_mut(i);
            b.matmul(&after[0], &model.weights[i].value, &mut before[i - 1], false, true, false)?;
            b.relu_backward(&mut before[i - 1], &ws.acts[i - 1])?;
        } else if let Some(g) = input_grad.as_deref_mut() {
            b.matmul(&ws.grads[0], &model.weights[0].value, g, false, true, false)?;
        }
    }
    Ok(())
}

fn half<'m, B: Backend>(amp: &'m Amp<B>, model: &'m Mlp<B>) -> impl ExactSizeIterator<Item = Dense<&'m B::Tensor>> {
    amp.w16.iter().zip(&model.biases).map(|(w, bi)| Dense { kind: LayerKind::Half(w), bias: &bi.value })
}

fn amp_forward<B: Backend>(amp: &Amp<B>, b: &mut B, model: &Mlp<B>, ws: &mut AmpWorkspace<B>) -> Result<()> {
    if let Some(stem) = &model.stem {
        let (sw, head_x) = ws.stem.as_mut().ok_or_else(no_stem_buffers)?;
        stem.forward(b, &ws.x, sw, Some(&amp.stem_w16))?;
        b.cast(sw.output(), head_x, None)?;
    }
    let first = ws.stem.as_ref().map_or(&ws.x, |(_, head_x)| head_x);
    if !ws.recompute {
        return dense::forward(b, half(amp, model), first, &mut ws.acts);
    }
    let last = amp.w16.len() - 1;
    let hidden = dense::recompute(b, half(amp, model), first, last)?;
    let head = half(amp, model).nth(last).ok_or_else(|| Error::Internal("a model without layers".into()))?;
    head.forward(b, hidden.as_ref().unwrap_or(first), &mut ws.acts[0], false)
}

fn amp_backward<B: Backend>(
    amp: &Amp<B>,
    b: &mut B,
    model: &mut Mlp<B>,
    ws: &mut AmpWorkspace<B>,
    mean_over: usize,
    ready: &mut Ready<'_, B>,
) -> Result<()> {
    let last = amp.w16.len() - 1;
    let grad_scale = amp.cfg.loss_weight / mean_over as f32;
    let grad_logits = ws.grad_logits.as_mut().ok_or_else(|| Error::Internal("AMP backward on a forward-only workspace".into()))?;
    let head = if ws.recompute { 0 } else { last };
    ws.acc.record(b, &ws.acts[head], &ws.y, Some(&mut *grad_logits), grad_scale)?;
    if amp.rule.scaling {
        b.scale_by_loss_scale(grad_logits, &amp.state)?;
    }
    b.cast(grad_logits, &mut ws.grads[head], ws.acc.grad16.as_mut())?;
    if ws.recompute {
        return amp_backward_recomputing(amp, b, model, ws, ready);
    }
    for i in (0..=last).rev() {
        let first = ws.stem.as_ref().map_or(&ws.x, |(_, head_x)| head_x);
        let input = if i == 0 { first } else { &ws.acts[i - 1] };
        b.matmul16(input, &ws.grads[i], &mut model.weights[i].grad, true, false, Epilogue::None, None)?;
        b.sum_cols(&ws.grads[i], &mut model.biases[i].grad)?;
        ready(b, model, i)?;
        if i > 0 {
            let (before, after) = ws.grads.split_at_mut(i);
            b.matmul16(
                &after[0],
                &amp.w16[i],
                &mut before[i - 1],
                false,
                true,
                Epilogue::ReluMask(&ws.acts[i - 1]),
                ws.acc.grad16.as_mut(),
            )?;
        }
    }
    if let Some(stem) = model.stem.as_mut() {
        let (sw, _) = ws.stem.as_mut().ok_or_else(no_stem_buffers)?;
        let pooled_grad = sw.output_grad().ok_or_else(|| Error::Internal("AMP backward on a forward-only CNN workspace".into()))?;
        b.matmul16(&ws.grads[0], &amp.w16[0], pooled_grad, false, true, Epilogue::None, None)?;
        stem.backward(b, &ws.x, sw, Some((&amp.stem_w16, ws.acc.grad16.as_mut())))?;
    }
    Ok(())
}

fn amp_backward_recomputing<B: Backend>(
    amp: &Amp<B>,
    b: &mut B,
    model: &mut Mlp<B>,
    ws: &mut AmpWorkspace<B>,
    ready: &mut Ready<'_, B>,
) -> Result<()> {
    let first = ws.stem.as_ref().map_or(&ws.x, |(_, head_x)| head_x);
    let rows = ws.batch;
    let widths = model.cfg.widths();
    let mut flowing: Option<B::Tensor> = None;
    for i in (0..amp.w16.len()).rev() {
        let recomputed = dense::recompute(b, half(amp, model), first, i)?;
        let input = recomputed.as_ref().unwrap_or(first);
        let grad = flowing.as_ref().unwrap_or(&ws.grads[0]);
        b.matmul16(input, grad, &mut model.weights[i].grad, true, false, Epilogue::None, None)?;
        b.sum_cols(grad, &mut model.biases[i].grad)?;
        ready(b, model, i)?;
        if i > 0 {
            let mut before = b.zeros([rows, widths[i]], amp.dt, MemCategory::Activations)?;
            b.matmul16(grad, &amp.w16[i], &mut before, false, true, Epilogue::ReluMask(input), ws.acc.grad16.as_mut())?;
            flowing = Some(before);
        }
    }
    if let Some(stem) = model.stem.as_mut() {
        let grad = flowing.as_ref().unwrap_or(&ws.grads[0]);
        let (sw, _) = ws.stem.as_mut().ok_or_else(no_stem_buffers)?;
        let pooled_grad = sw.output_grad().ok_or_else(|| Error::Internal("AMP backward on a forward-only CNN workspace".into()))?;
        b.matmul16(grad, &amp.w16[0], pooled_grad, false, true, Epilogue::None, None)?;
        stem.backward(b, &ws.x, sw, Some((&amp.stem_w16, ws.acc.grad16.as_mut())))?;
    }
    Ok(())
}

/// What a forward and backward pass produced, as bits: loss total, logits, every gradient, the
/// 16-bit gradient counts, and the order `ready` saw the layers in.
#[derive(Debug, PartialEq)]
struct Outcome {
    loss: u64,
    grad16: [u64; 2],
    logits: Vec<u32>,
    grads: Vec<Vec<u32>>,
    ready: Vec<usize>,
}

const ROWS: usize = 13;
/// A micro-batch's share of a larger batch: the loss gradient is scaled by 1/MEAN_OVER.
const MEAN_OVER: usize = 29;

fn configs() -> [MlpConfig; 2] {
    [
        MlpConfig { input: 21, hidden: vec![30, 17, 26, 9], classes: 6, conv: None },
        MlpConfig { input: 64, hidden: vec![20, 11], classes: 4, conv: Some(ConvConfig { image: [1, 8, 8], channels: vec![4, 6] }) },
    ]
}

fn bits(v: Vec<f32>) -> Vec<u32> {
    v.into_iter().map(f32::to_bits).collect()
}

fn model(b: &mut CpuBackend, cfg: &MlpConfig) -> Mlp<CpuBackend> {
    Mlp::new(b, cfg.clone(), Optimizer::new(OptimizerKind::Sgd, 0.1, 0.9, 0.0), 3).unwrap()
}

fn inputs(cfg: &MlpConfig) -> (Vec<f32>, Vec<u32>) {
    let x = (0..ROWS * cfg.input).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 1.3).collect();
    let y = (0..ROWS as u32).map(|i| (i * 5) % cfg.classes as u32).collect();
    (x, y)
}

fn outcome<W: StepBuffers<CpuBackend>>(b: &mut CpuBackend, model: &mut Mlp<CpuBackend>, ws: &mut W, ready: Vec<usize>) -> Outcome {
    let logits = bits(b.read_f32(ws.logits()).unwrap());
    let grads = model.params_mut().map(|p| bits(b.read_f32(&p.grad).unwrap())).collect();
    let totals = take_totals(b, &mut [ws.accumulators()]).unwrap();
    Outcome { loss: totals.loss.to_bits(), grad16: totals.grad16, logits, grads, ready }
}

fn f32_pass(cfg: &MlpConfig, recompute: bool, oracle: bool) -> Outcome {
    let b = &mut CpuBackend::new();
    let mut model = model(b, cfg);
    let mut ws = if recompute { Workspace::recomputing(b, cfg, ROWS).unwrap() } else { Workspace::new(b, cfg, ROWS, true).unwrap() };
    let (x, y) = inputs(cfg);
    b.write_f32(&mut ws.x, &x).unwrap();
    b.write_u32(&mut ws.y, &y).unwrap();
    let mut seen = Vec::new();
    let mut ready = |_: &mut CpuBackend, _: &Mlp<CpuBackend>, i: usize| -> Result<()> {
        seen.push(i);
        Ok(())
    };
    if oracle {
        f32_forward(&model, b, &mut ws).unwrap();
        f32_backward_mean(&mut model, b, &mut ws, MEAN_OVER, &mut ready).unwrap();
    } else {
        F32Phases.forward(b, &model, &mut ws).unwrap();
        F32Phases.backward(b, &mut model, &mut ws, MEAN_OVER, &mut ready).unwrap();
    }
    outcome(b, &mut model, &mut ws, seen)
}

fn amp_pass(cfg: &MlpConfig, precision: Precision, recompute: bool, oracle: bool) -> Outcome {
    let b = &mut CpuBackend::new();
    let mut model = model(b, cfg);
    let mut amp = Amp::new(b, &model, AmpConfig::new(precision)).unwrap().unwrap();
    amp.refresh_weights(b, &model).unwrap();
    let mut ws = if recompute { amp.recomputing_buffers(b, cfg, ROWS).unwrap() } else { amp.buffers(b, cfg, ROWS, true).unwrap() };
    let (x, y) = inputs(cfg);
    let (xt, yt) = ws.inputs();
    b.write_f32(xt, &x).unwrap();
    b.write_u32(yt, &y).unwrap();
    let mut seen = Vec::new();
    let mut ready = |_: &mut CpuBackend, _: &Mlp<CpuBackend>, i: usize| -> Result<()> {
        seen.push(i);
        Ok(())
    };
    if oracle {
        amp_forward(&amp, b, &model, &mut ws).unwrap();
        amp_backward(&amp, b, &mut model, &mut ws, MEAN_OVER, &mut ready).unwrap();
    } else {
        amp.forward(b, &model, &mut ws).unwrap();
        amp.backward(b, &mut model, &mut ws, MEAN_OVER, &mut ready).unwrap();
    }
    outcome(b, &mut model, &mut ws, seen)
}

#[test]
fn the_model_level_pass_gives_the_gradients_of_the_four_loops_it_replaced() {
    for cfg in configs() {
        for recompute in [false, true] {
            let label = format!("{} recompute={recompute}", cfg.label());
            let want = f32_pass(&cfg, recompute, true);
            assert!(want.grads.iter().flatten().any(|&g| g != 0) && want.ready.len() == cfg.hidden.len() + 1, "{label}: a real pass");
            assert_eq!(f32_pass(&cfg, recompute, false), want, "{label} f32");
            for precision in [Precision::F16, Precision::BF16] {
                let want = amp_pass(&cfg, precision, recompute, true);
                assert!(want.grad16[0] > 0, "{label} {precision:?}: the 16-bit gradients were counted");
                assert_eq!(amp_pass(&cfg, precision, recompute, false), want, "{label} {precision:?}");
            }
        }
    }
}

/// A pipeline stage's backward: from an output gradient it was sent, adding into the
/// gradients (micro-batches after the first) and writing its input's gradient.
#[test]
fn a_pipeline_stages_accumulating_backward_is_unchanged() {
    let cfg = &configs()[0];
    let run = |oracle: bool| -> (Vec<Vec<u32>>, Vec<u32>) {
        let b = &mut CpuBackend::new();
        let mut model = model(b, cfg);
        let mut ws = Workspace::new(b, cfg, ROWS, true).unwrap();
        let (x, y) = inputs(cfg);
        b.write_f32(&mut ws.x, &x).unwrap();
        b.write_u32(&mut ws.y, &y).unwrap();
        let ones = b.upload_f32(&[1.0; ROWS], [1, ROWS], MemCategory::Activations).unwrap();
        let mut input_grad = b.zeros([ROWS, cfg.input], DType::F32, MemCategory::Activations).unwrap();
        let last = cfg.hidden.len();
        let mut none = |_: &mut CpuBackend, _: &Mlp<CpuBackend>, _: usize| -> Result<()> { Ok(()) };
        for write in [GradWrite::Replace, GradWrite::Add { ones: &ones }] {
            model.forward(b, &mut ws).unwrap();
            ws.acc.record(b, &ws.acts[last], &ws.y, Some(&mut ws.grads[last]), 0.25).unwrap();
            if oracle {
                f32_backward_layers(&mut model, b, &mut ws, write, Some(&mut input_grad), &mut none).unwrap();
            } else {
                model.backward_layers(b, &mut ws, write, Some(&mut input_grad), &mut none).unwrap();
            }
        }
        let grads = model.params_mut().map(|p| bits(b.read_f32(&p.grad).unwrap())).collect();
        (grads, bits(b.read_f32(&input_grad).unwrap()))
    };
    assert_eq!(run(false), run(true));
}
