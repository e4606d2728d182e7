//! Records dispatches into one command encoder and one compute pass until `flush` submits them,
//! so a whole training step is one submit. Each dispatch's small parameter block goes into a
//! slot of one uniform buffer that is written once per submit; each pass is bracketed by
//! timestamp queries (where the adapter has them) to measure GPU busy time.

use super::kernel_profiler::KernelProfiler;
use crate::error::{Error, Result};

/// Bytes of parameters one dispatch may pass (16 words).
pub const PARAM_BYTES: u64 = 64;
/// Dispatches per submit before the recorder flushes on its own.
const PARAM_SLOTS: u64 = 512;
/// Timestamp queries kept before they must be resolved (two per pass).
const QUERY_CAPACITY: u32 = 1024;

pub struct Timestamps {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    used: u32,
    period_ns: f64,
    /// Busy time collected but not yet taken, in nanoseconds.
    collected_ns: f64,
}

pub struct Recorder {
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    params: Vec<u8>,
    uniform: wgpu::Buffer,
    slot_stride: u64,
    ts: Option<Timestamps>,
    pub dispatches: u64,
    pub submits: u64,
    /// Profiling mode: a timestamped pass per dispatch (see kernel_profiler.rs).
    pub prof: Option<KernelProfiler>,
}

impl Recorder {
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue, timestamps: bool) -> Self {
        let align = device.limits().min_uniform_buffer_offset_alignment as u64;
        let slot_stride = PARAM_BYTES.div_ceil(align) * align;
        let uniform = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpulab params"),
            size: slot_stride * PARAM_SLOTS,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let ts = timestamps.then(|| {
            let bytes = QUERY_CAPACITY as u64 * 8;
            Timestamps {
                set: device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("gpulab timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: QUERY_CAPACITY,
                }),
                resolve: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("timestamp resolve"),
                    size: bytes,
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                }),
                readback: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("timestamp readback"),
                    size: bytes,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
                used: 0,
                period_ns: queue.get_timestamp_period() as f64,
                collected_ns: 0.0,
            }
        });
        Recorder { encoder: None, pass: None, params: Vec::new(), uniform, slot_stride, ts, dispatches: 0, submits: 0, prof: None }
    }

    pub fn has_timestamps(&self) -> bool {
        self.ts.is_some()
    }

    pub fn has_pending(&self) -> bool {
        self.encoder.is_some()
    }

    /// Whether the parameter arena is full, so the caller must flush before the next dispatch.
    pub fn params_full(&self) -> bool {
        self.params.len() as u64 >= self.slot_stride * PARAM_SLOTS
    }

    /// Whether the timestamp query set is full, so the caller must flush and collect.
    pub fn queries_full(&self) -> bool {
        self.pass.is_none() && self.ts.as_ref().is_some_and(|t| t.used + 2 > QUERY_CAPACITY)
    }

    /// Stores a dispatch's parameters and returns the binding of its slot.
    pub fn push_params(&mut self, words: &[u32]) -> wgpu::BufferBinding<'_> {
        debug_assert!(!self.params_full());
        let offset = self.params.len() as u64;
        let mut block = [0u32; (PARAM_BYTES / 4) as usize];
        block[..words.len()].copy_from_slice(words);
        self.params.extend_from_slice(bytemuck::cast_slice(&block));
        self.params.resize((offset + self.slot_stride) as usize, 0);
        wgpu::BufferBinding { buffer: &self.uniform, offset, size: wgpu::BufferSize::new(PARAM_BYTES) }
    }

    /// The open encoder (for copies); closes the compute pass first.
    pub fn encoder(&mut self, device: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        self.close_pass();
        self.encoder.get_or_insert_with(|| device.create_command_encoder(&Default::default()))
    }

    /// Ends the open compute pass (and, when profiling, its query).
    fn close_pass(&mut self) {
        self.pass = None;
        if let (Some(p), Some(e)) = (self.prof.as_mut(), self.encoder.as_mut()) {
            p.end(e);
        }
    }

    /// Profiling mode: opens a pass of its own, timestamped by the profiler, for the next dispatch.
    pub fn profiled_pass(&mut self, device: &wgpu::Device, kernel: String, flops: f64, bytes: f64) {
        self.close_pass();
        let Some(prof) = self.prof.as_mut() else { return };
        let encoder = self.encoder.get_or_insert_with(|| device.create_command_encoder(&Default::default()));
        let writes = prof.begin(encoder, kernel, flops, bytes);
        let pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("gpulab kernel"), timestamp_writes: writes });
        self.pass = Some(pass.forget_lifetime());
    }

    pub fn dispatch(&mut self, device: &wgpu::Device, pipeline: &wgpu::ComputePipeline, bind_group: &wgpu::BindGroup, groups: (u32, u32)) {
        if self.pass.is_none() {
            let writes = self.ts.as_mut().map(|t| {
                let base = t.used;
                t.used += 2;
                wgpu::ComputePassTimestampWrites {
                    query_set: &t.set,
                    beginning_of_pass_write_index: Some(base),
                    end_of_pass_write_index: Some(base + 1),
                }
            });
            let encoder = self.encoder.get_or_insert_with(|| device.create_command_encoder(&Default::default()));
            let pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("gpulab step"), timestamp_writes: writes });
            self.pass = Some(pass.forget_lifetime());
        }
        let pass = self.pass.as_mut().expect("opened above");
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, bind_group, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, 1);
        self.dispatches += 1;
    }

    /// Submits everything recorded (the parameter arena is uploaded first, in queue order).
    pub fn flush(&mut self, queue: &wgpu::Queue) -> Option<wgpu::SubmissionIndex> {
        self.close_pass();
        let mut encoder = self.encoder.take()?;
        if let Some(p) = self.prof.as_mut() {
            p.resolve(&mut encoder);
        }
        if !self.params.is_empty() {
            queue.write_buffer(&self.uniform, 0, &self.params);
            self.params.clear();
        }
        self.submits += 1;
        let submitted = std::time::Instant::now();
        let index = queue.submit([encoder.finish()]);
        if let Some(p) = self.prof.as_mut() {
            // Fails only with queries left open, and `resolve` closed them.
            let _ = p.end_frame(submitted);
        }
        Some(index)
    }

    /// Resolves the timestamps written so far and adds their pass durations to the collected
    /// busy time. Call after `flush`; waits for the GPU.
    pub fn collect_timestamps(&mut self, device: &wgpu::Device, queue: &wgpu::Queue) -> Result<()> {
        let Some(t) = self.ts.as_mut() else { return Ok(()) };
        if t.used == 0 {
            return Ok(());
        }
        let bytes = t.used as u64 * 8;
        let mut enc = device.create_command_encoder(&Default::default());
        enc.resolve_query_set(&t.set, 0..t.used, &t.resolve, 0);
        enc.copy_buffer_to_buffer(&t.resolve, 0, &t.readback, 0, bytes);
        queue.submit([enc.finish()]);
        let ticks: Vec<u64> = super::readback::map_and_read(device, &t.readback, bytes)?;
        let mut ns = 0.0;
        for pair in ticks.chunks_exact(2) {
            // A pass the driver did not time reads as zeros; a reset counter as end < begin.
            if pair[1] > pair[0] {
                ns += (pair[1] - pair[0]) as f64 * t.period_ns;
            }
        }
        t.collected_ns += ns;
        t.used = 0;
        Ok(())
    }

    pub fn take_busy_ns(&mut self) -> Option<f64> {
        let profiled = self.prof.as_mut().map_or(0.0, |p| std::mem::take(&mut p.busy_ns));
        self.ts.as_mut().map(|t| std::mem::take(&mut t.collected_ns) + profiled)
    }
}

pub(crate) fn poll_error(e: wgpu::PollError) -> Error {
    Error::DeviceLost(format!("waiting for the GPU failed: {e}"))
}
