//! Switching the GPU backend's profiling mode on and off, and what each dispatch is estimated to
//! do (FLOPs from its shapes, bytes from its bound buffers) for the kernel table and roofline.

use eframe::wgpu;

use super::GpuBackend;
use super::kernel_profiler::{KernelProfiler, KernelTime};
use super::kernels::Kernel;
use super::recorder::poll_error;
use crate::error::Result;

impl GpuBackend {
    /// Starts timing every kernel on its own; false where the adapter has no timestamp queries.
    pub fn start_kernel_profiling(&mut self) -> Result<bool> {
        if !self.timestamps {
            return Ok(false);
        }
        self.flush_pending()?;
        self.rec.prof = Some(KernelProfiler::new(&self.device)?);
        Ok(true)
    }

    /// Stops profiling and returns the kernel times collected (waits for the GPU).
    pub fn stop_kernel_profiling(&mut self) -> Result<Vec<KernelTime>> {
        let out = self.take_kernel_times()?;
        self.rec.prof = None;
        Ok(out)
    }

    /// The kernel times collected so far (waits for the GPU).
    pub fn take_kernel_times(&mut self) -> Result<Vec<KernelTime>> {
        self.drain_kernel_profiler()?;
        Ok(self.rec.prof.as_mut().map(|p| std::mem::take(&mut p.results)).unwrap_or_default())
    }

    /// Waits for submitted work and collects its kernel times (a no-op when not profiling).
    pub(super) fn drain_kernel_profiler(&mut self) -> Result<()> {
        if self.rec.prof.is_none() {
            return Ok(());
        }
        self.flush_pending()?;
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(poll_error)?;
        let period = self.queue.get_timestamp_period();
        if let Some(p) = self.rec.prof.as_mut() {
            p.drain(period);
        }
        Ok(())
    }

    fn flush_pending(&mut self) -> Result<()> {
        crate::tensor::Backend::flush(self)
    }
}

/// (FLOPs, bytes) one dispatch is estimated to do: matmuls from m, n, k; other kernels one to a
/// dozen operations per element; bytes as the sizes of the buffers it binds (an upper bound).
pub(super) fn work_estimate(kernel: Kernel, params: &[u32], bindings: &[(u32, &wgpu::Buffer)]) -> (f64, f64) {
    let p = |i: usize| params.get(i).copied().unwrap_or(0) as f64;
    match kernel {
        Kernel::MatmulRegBlock | Kernel::MatmulTiled => {
            let (m, n, k, acc) = (p(0), p(1), p(2), p(3));
            (2.0 * m * n * k, 4.0 * (m * k + k * n + m * n * (1.0 + acc)))
        }
        // 16-bit operands (f16, or bf16 packed two per word); the output is 16-bit or f32.
        Kernel::MatmulLowOut | Kernel::MatmulLowF32 => {
            let (m, n, k) = (p(0), p(1), p(2));
            let out = if kernel == Kernel::MatmulLowOut { 2.0 } else { 4.0 };
            (2.0 * m * n * k, 2.0 * (m * k + k * n) + out * m * n)
        }
        _ => {
            let bytes: f64 = bindings.iter().map(|(_, b)| b.size() as f64).sum();
            let elements = match kernel {
                Kernel::SumCols | Kernel::SumRows | Kernel::ArgmaxRows | Kernel::AccumulateSum | Kernel::CountCorrect | Kernel::SoftmaxXent | Kernel::SoftmaxXentRowwise | Kernel::Transpose => p(0) * p(1),
                _ => p(0),
            };
            let per = match kernel {
                Kernel::AdamW => 12.0,
                Kernel::Sgd => 5.0,
                Kernel::SoftmaxXent | Kernel::SoftmaxXentRowwise => 6.0,
                _ => 1.0,
            };
            (elements * per, bytes)
        }
    }
}
