//! The running figures a training or validation pass accumulates on the device (loss sum,
//! correct count and, for mixed precision, the 16-bit gradient statistics) and the one
//! batched read-back that brings them to the host every log window.

use gpulab_core::error::Result;
use gpulab_core::tensor::{Backend, DType, HostData, MemCategory};

/// Totals since the last read. Loss and accuracy are measured on the batches that ran;
/// `grad16` is [#nonzero, #flushed to zero] over the 16-bit activation gradients (zero in f32).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    pub loss: f64,
    pub correct: u64,
    pub grad16: [u64; 2],
}

/// The device side of `Totals`, one set per workspace (per batch size).
pub struct Accumulators<B: Backend> {
    /// Scratch: each row's loss of the latest batch.
    pub loss_rows: B::Tensor,
    pub loss_sum: B::Tensor,
    pub correct: B::Tensor,
    /// [#nonzero, #flushed] ([1, 2] u32) when the pass rounds gradients to 16 bits.
    pub grad16: Option<B::Tensor>,
}

impl<B: Backend> Accumulators<B> {
    pub fn new(b: &mut B, rows: usize, grad16: bool) -> Result<Self> {
        Ok(Accumulators {
            loss_rows: b.zeros([1, rows], DType::F32, MemCategory::Activations)?,
            loss_sum: b.zeros([1, 1], DType::F32, MemCategory::Other)?,
            correct: b.zeros([1, 1], DType::U32, MemCategory::Other)?,
            grad16: if grad16 { Some(b.zeros([1, 2], DType::U32, MemCategory::Other)?) } else { None },
        })
    }

    /// Softmax cross-entropy of `logits` against `labels`: adds the batch's loss and correct
    /// count and, when `grad` is given, writes the loss gradient times `grad_scale`.
    pub fn record(
        &mut self,
        b: &mut B,
        logits: &B::Tensor,
        labels: &B::Tensor,
        grad: Option<&mut B::Tensor>,
        grad_scale: f32,
    ) -> Result<()> {
        b.loss_step(logits, labels, &mut self.loss_rows, grad, grad_scale, &mut self.loss_sum, &mut self.correct)
    }

    fn tensors(&self) -> impl Iterator<Item = &B::Tensor> {
        [&self.loss_sum, &self.correct].into_iter().chain(self.grad16.as_ref())
    }

    fn reset(&mut self, b: &mut B) -> Result<()> {
        b.fill(&mut self.loss_sum, 0.0)?;
        b.fill(&mut self.correct, 0.0)?;
        match self.grad16.as_mut() {
            Some(s) => b.fill(s, 0.0),
            None => Ok(()),
        }
    }
}

/// Reads every accumulator in `accs` with ONE batched read-back, sums them in order, and
/// resets them to zero.
pub fn take_totals<B: Backend>(b: &mut B, accs: &mut [&mut Accumulators<B>]) -> Result<Totals> {
    Ok(take_totals_with(b, accs, &[])?.0)
}

/// `take_totals`, reading `extra` tensors in the same read-back (the loss scaler's state rides
/// along: no second sync) and returning them after the totals.
pub fn take_totals_with<B: Backend>(b: &mut B, accs: &mut [&mut Accumulators<B>], extra: &[&B::Tensor]) -> Result<(Totals, Vec<HostData>)> {
    let mut data = {
        let ts: Vec<&B::Tensor> = accs.iter().flat_map(|a| a.tensors()).chain(extra.iter().copied()).collect();
        b.read_many(&ts)?
    };
    let rest = data.split_off(
        data.len()
            .checked_sub(extra.len())
            .ok_or_else(|| gpulab_core::error::Error::Internal("read_many returned fewer tensors than asked".into()))?,
    );
    let mut it = data.iter();
    let mut next = || it.next().ok_or_else(|| gpulab_core::error::Error::Internal("read_many returned fewer tensors than asked".into()));
    let mut t = Totals::default();
    for a in accs.iter_mut() {
        t.loss += first_f32(next()?)? as f64;
        t.correct += first_u32(next()?)? as u64;
        if a.grad16.is_some() {
            let s = next()?.u32()?;
            t.grad16[0] += s.first().copied().unwrap_or(0) as u64;
            t.grad16[1] += s.get(1).copied().unwrap_or(0) as u64;
        }
        a.reset(b)?;
    }
    Ok((t, rest))
}

fn first_f32(d: &HostData) -> Result<f32> {
    Ok(d.f32()?.first().copied().unwrap_or(0.0))
}

fn first_u32(d: &HostData) -> Result<u32> {
    Ok(d.u32()?.first().copied().unwrap_or(0))
}
