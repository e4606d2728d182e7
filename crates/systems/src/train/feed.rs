//! How the training loop gets its batches and tells an observer where the time went. The
//! default gathers rows on the training thread and writes them into the persistent input
//! tensors (what exercises 1 and 2 do); the input-pipeline and profiling labs plug in a
//! multi-threaded loader, a span recorder and a per-step wait instead.

use std::time::Instant;

use crate::data::{Dataset, batcher};
use gpulab_core::error::Result;
use gpulab_core::tensor::Backend;

pub trait Feed<B: Backend> {
    /// Fills `xb`/`yb` with the batch of `epoch` whose sample indices are `idx`.
    fn batch(&mut self, data: &Dataset, epoch: usize, idx: &[u32], xb: &mut Vec<f32>, yb: &mut Vec<u32>) -> Result<()>;

    /// Moves the batch into the workspace's input tensors.
    fn upload(&mut self, b: &mut B, x: &mut B::Tensor, y: &mut B::Tensor, xb: &[f32], yb: &[u32]) -> Result<()> {
        b.write_f32(x, xb)?;
        b.write_u32(y, yb)
    }

    /// A stage of a step took from `start` to `end` (stage names in `profile::spans::stage`).
    fn span(&mut self, _stage: &'static str, _start: Instant, _end: Instant) {}

    /// Wait for the device after every step, so a step's compute shows as its own span.
    fn sync_each_step(&self) -> bool {
        false
    }
}

/// Gathers batches on the training thread from the in-memory split.
pub struct Inline;

impl<B: Backend> Feed<B> for Inline {
    fn batch(&mut self, data: &Dataset, _epoch: usize, idx: &[u32], xb: &mut Vec<f32>, yb: &mut Vec<u32>) -> Result<()> {
        batcher::gather(&data.train_x, &data.train_y, data.features, idx, xb, yb);
        Ok(())
    }
}
