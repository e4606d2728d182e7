//! The recorder's profiling mode: every dispatch gets its own compute pass with timestamp
//! writes from wgpu-profiler, labelled with its kernel and an estimate of its work. Slower than
//! the normal one-pass step (each pass costs a little), which is the profiler's observer effect.

use std::time::Instant;

use eframe::wgpu;
use wgpu_profiler::{GpuProfiler, GpuProfilerQuery, GpuProfilerSettings};

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
    pub fn begin(&mut self, encoder: &mut wgpu::CommandEncoder, kernel: String, flops: f64, bytes: f64) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
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
                self.results.push(KernelTime { name: name.clone(), start_s: t.start, end_s: t.end, flops: *flops, bytes: *bytes, submitted });
            }
        }
    }
}
