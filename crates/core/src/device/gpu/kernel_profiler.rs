//! Kernel profiling: the GPU backend's profiling mode, switched on and off here. Every dispatch
//! gets its own compute pass with timestamp writes from wgpu-profiler, labelled with its kernel
//! and an estimate of its work (FLOPs from its shapes, bytes from its bound buffers) for the
//! kernel table and roofline. Slower than the normal one-pass step (each pass costs a little),
//! which is the profiler's observer effect.

use std::time::Instant;

use wgpu_profiler::{GpuProfiler, GpuProfilerQuery, GpuProfilerSettings};

use super::GpuBackend;
use super::kernels::Kernel;
use crate::error::{Error, Result};

/// One kernel's GPU time. `start_s`/`end_s` are on the GPU's clock (origin undefined);
/// `submitted` is when the CPU submitted the command buffer that held it.
#[derive(Clone, Debug)]
pub struct KernelTime {
    pub name: String,
    pub start_s: f64,
    pub end_s: f64,
    pub flops: f64,
    pub bytes: f64,
    pub submitted: Instant,
}

pub struct KernelProfiler {
    profiler: GpuProfiler,
    open: Option<GpuProfilerQuery>,
    /// (kernel, flops, bytes) by label number; the label of a query is its index here.
    costs: Vec<(String, f64, f64)>,
    /// Submit time of each frame not yet processed, oldest first.
    frames: Vec<Instant>,
    pub results: Vec<KernelTime>,
    /// Kernel time drained but not yet taken as busy time, nanoseconds.
    pub busy_ns: f64,
}

impl KernelProfiler {
    pub fn new(device: &wgpu::Device) -> Result<Self> {
        let settings = GpuProfilerSettings { enable_timer_queries: true, enable_debug_groups: false, max_num_pending_frames: 4096 };
        let profiler = GpuProfiler::new(device, settings).map_err(|e| Error::Gpu(format!("could not start the GPU profiler: {e}")))?;
        Ok(KernelProfiler { profiler, open: None, costs: Vec::new(), frames: Vec::new(), results: Vec::new(), busy_ns: 0.0 })
    }

    /// Opens a query for the next pass; its timestamp writes go into the pass descriptor.
    pub fn begin(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        kernel: String,
        flops: f64,
        bytes: f64,
    ) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        self.costs.push((kernel, flops, bytes));
        let q = self.profiler.begin_pass_query((self.costs.len() - 1).to_string(), encoder);
        self.open = Some(q);
        self.open.as_ref().and_then(|q| q.compute_pass_timestamp_writes())
    }

    /// Closes the open query, after its pass has ended.
    pub fn end(&mut self, encoder: &mut wgpu::CommandEncoder) {
        if let Some(q) = self.open.take() {
            self.profiler.end_query(encoder, q);
        }
    }

    /// Before `finish`: resolve this frame's queries into the encoder.
    pub fn resolve(&mut self, encoder: &mut wgpu::CommandEncoder) {
        self.end(encoder);
        self.profiler.resolve_queries(encoder);
    }

    /// After `submit`.
    pub fn end_frame(&mut self, submitted: Instant) -> Result<()> {
        self.profiler.end_frame().map_err(|e| Error::Gpu(format!("GPU profiler: {e}")))?;
        self.frames.push(submitted);
        Ok(())
    }

    /// Collects every frame whose results have arrived (poll the device first to wait for all).
    pub fn drain(&mut self, period: f32) {
        while let Some(frame) = self.profiler.process_finished_frame(period) {
            let submitted = if self.frames.is_empty() { Instant::now() } else { self.frames.remove(0) };
            for q in frame {
                let Some(t) = q.time else { continue };
                let Some((name, flops, bytes)) = q.label.parse::<usize>().ok().and_then(|i| self.costs.get(i)) else { continue };
                self.busy_ns += (t.end - t.start).max(0.0) * 1e9;
                self.results.push(KernelTime {
                    name: name.clone(),
                    start_s: t.start,
                    end_s: t.end,
                    flops: *flops,
                    bytes: *bytes,
                    submitted,
                });
            }
        }
    }
}

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
        super::wait::wait(&self.device, "the profiled kernels")?;
        let period = self.queue.get_timestamp_period();
        if let Some(p) = self.rec.prof.as_mut() {
            p.drain(period);
        }
        Ok(())
    }

    fn flush_pending(&mut self) -> Result<()> {
        crate::tensor::CoreOps::flush(self)
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
        Kernel::Matmul16Out | Kernel::Matmul16F32 | Kernel::Matmul16Reg | Kernel::Matmul16Tiled | Kernel::Matmul16Coop => {
            let (m, n, k) = (p(0), p(1), p(2));
            let out16 = kernel == Kernel::Matmul16Out
                || (matches!(kernel, Kernel::Matmul16Reg | Kernel::Matmul16Tiled | Kernel::Matmul16Coop) && p(5) != 0.0);
            let out = if out16 { 2.0 } else { 4.0 };
            (2.0 * m * n * k, 2.0 * (m * k + k * n) + out * m * n)
        }
        // i8 operands; i32 sums or (the fused epilogue) f32 outputs, 4 bytes each.
        Kernel::MatmulI8 | Kernel::MatmulI8Dequant => {
            let (m, n, k) = (p(0), p(1), p(2));
            (2.0 * m * n * k, m * k + k * n + 4.0 * m * n)
        }
        _ => {
            let bytes: f64 = bindings.iter().map(|(_, b)| b.size() as f64).sum();
            let elements = match kernel {
                Kernel::SumCols
                | Kernel::SumRows
                | Kernel::ArgmaxRows
                | Kernel::AccumulateSum
                | Kernel::CountCorrect
                | Kernel::SoftmaxXent
                | Kernel::SoftmaxXentRowwise
                | Kernel::Transpose
                | Kernel::SumRowsPart
                | Kernel::AccumulatePart
                | Kernel::CountPart => p(0) * p(1),
                // The multi-tensor steps: the slots' element counts (multi_optim.rs's table).
                Kernel::MultiSgd | Kernel::MultiAdamW | Kernel::MultiUnscale | Kernel::MultiAmpSgd | Kernel::MultiAmpAdamW => {
                    (32..48).map(p).sum()
                }
                _ => p(0),
            };
            let per = match kernel {
                Kernel::AdamW | Kernel::MultiAdamW | Kernel::MultiAmpAdamW => 12.0,
                Kernel::Sgd | Kernel::MultiSgd | Kernel::MultiAmpSgd => 5.0,
                Kernel::SoftmaxXent | Kernel::SoftmaxXentRowwise => 6.0,
                // im2col only moves data; col2im adds up to 9 taps; the pool compares 4 values.
                Kernel::Im2col | Kernel::Im2col16 => 0.0,
                Kernel::Col2im => 9.0,
                Kernel::MaxPool => 3.0,
                _ => 1.0,
            };
            (elements * per, bytes)
        }
    }
}
