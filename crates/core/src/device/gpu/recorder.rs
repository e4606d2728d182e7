//! Records dispatches into one command encoder and one compute pass until `flush` submits them,
//! so a whole training step is one submit. Each dispatch's small parameter block goes into a
//! slot of one uniform buffer that is written once per submit; each pass is bracketed by
//! timestamp queries (where the adapter has them) to measure GPU busy time.

use super::kernel_profiler::KernelProfiler;
use super::kernels::Compiled;
use crate::error::{Error, Result};
use crate::tensor::{DeviceCounts, DispatchRecord};

/// Dispatches kept by the dispatch log before it drops the oldest half.
const LOG_CAP: usize = 1 << 16;

/// Bytes of parameters one dispatch may pass (64 words: the multi-tensor optimizer's slot table
/// needs 48). One slot is 256 bytes anyway, WebGPU's uniform offset alignment.
pub const PARAM_BYTES: u64 = 256;
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
    /// A readback resolved the queries since busy time was last taken.
    read_collected: bool,
}

pub struct Recorder {
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    params: Vec<u8>,
    uniform: wgpu::Buffer,
    slot_stride: u64,
    ts: Option<Timestamps>,
    /// Every figure of `Telemetry::counts`, counted where it happens (here, the buffer pool's
    /// misses and the readbacks).
    pub counts: DeviceCounts,
    /// Each dispatch's kernel, workgroup size and count, while logging is on.
    pub log: Option<Vec<DispatchRecord>>,
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
                read_collected: false,
            }
        });
        Recorder {
            encoder: None,
            pass: None,
            params: Vec::new(),
            uniform,
            slot_stride,
            ts,
            counts: DeviceCounts::default(),
            log: None,
            prof: None,
        }
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

    /// Stores a dispatch's parameters and returns its slot's offset (the dynamic offset of
    /// binding 0).
    pub fn push_params(&mut self, words: &[u32]) -> u32 {
        debug_assert!(!self.params_full());
        let offset = self.params.len() as u64;
        let mut block = [0u32; (PARAM_BYTES / 4) as usize];
        block[..words.len()].copy_from_slice(words);
        self.params.extend_from_slice(bytemuck::cast_slice(&block));
        self.params.resize((offset + self.slot_stride) as usize, 0);
        offset as u32
    }

    /// Binding 0 of every bind group: one parameter block of the uniform buffer, placed by the
    /// dynamic offset each dispatch passes.
    pub fn params_binding(&self) -> wgpu::BufferBinding<'_> {
        wgpu::BufferBinding { buffer: &self.uniform, offset: 0, size: wgpu::BufferSize::new(PARAM_BYTES) }
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

    pub fn dispatch(&mut self, device: &wgpu::Device, kernel: &Compiled, bind_group: &wgpu::BindGroup, offset: u32, groups: (u32, u32)) {
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
        pass.set_pipeline(&kernel.pipeline);
        pass.set_bind_group(0, bind_group, &[offset]);
        pass.dispatch_workgroups(groups.0, groups.1, 1);
        let c = &mut self.counts;
        c.dispatches += 1;
        let n = groups.0 as u64 * groups.1 as u64;
        c.workgroups += n;
        c.invocations += n * kernel.invocations_per_group() as u64;
        if let Some(log) = self.log.as_mut() {
            if log.len() >= LOG_CAP {
                log.drain(..LOG_CAP / 2);
            }
            let kernel_name = format!("{:?}", kernel.key.kernel);
            log.push(DispatchRecord { kernel: kernel_name, workgroup_size: kernel.workgroup_size, groups: [groups.0, groups.1, 1] });
        }
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
            self.counts.bytes_uploaded += self.params.len() as u64;
            self.params.clear();
        }
        self.counts.submits += 1;
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
        self.counts.submits += 1;
        self.counts.waits += 1;
        self.counts.bytes_read_back += bytes;
        let ticks: Vec<u64> = super::readback::map_and_read(device, &t.readback, bytes)?;
        t.collected_ns += pass_ns(&ticks, t.period_ns);
        t.used = 0;
        Ok(())
    }

    /// Bytes a readback's staging buffer keeps for the timestamps (the whole query set, so its
    /// size, and so the pooled buffer, is the same every window).
    pub fn timestamp_region(&self) -> u64 {
        if self.ts.is_some() { QUERY_CAPACITY as u64 * 8 } else { 0 }
    }

    /// A readback's share of the timestamps: records into the open encoder the resolve of every
    /// query written so far and its copy into `dst` at `at`, so the one map that reads the
    /// tensors reads them too. Returns how many queries it copied.
    pub fn resolve_into(&mut self, device: &wgpu::Device, dst: &wgpu::Buffer, at: u64) -> u32 {
        let used = self.ts.as_ref().map_or(0, |t| t.used);
        if used == 0 {
            return 0;
        }
        self.encoder(device);
        let (Some(enc), Some(t)) = (self.encoder.as_mut(), self.ts.as_ref()) else { return 0 };
        enc.resolve_query_set(&t.set, 0..used, &t.resolve, 0);
        enc.copy_buffer_to_buffer(&t.resolve, 0, dst, at, used as u64 * 8);
        used
    }

    /// After the readback's map: the ticks `resolve_into` copied (as 32-bit words) become busy
    /// time, and `take_read_collected` says a read has collected them.
    pub fn absorb_ticks(&mut self, words: &[u32]) {
        let Some(t) = self.ts.as_mut() else { return };
        t.read_collected = true;
        if words.is_empty() {
            return;
        }
        let ticks: Vec<u64> = words.chunks_exact(2).map(|w| w[0] as u64 | (w[1] as u64) << 32).collect();
        t.collected_ns += pass_ns(&ticks, t.period_ns);
        t.used = 0;
    }

    /// Whether a readback collected the timestamps since the last call (then the busy time
    /// needs no wait of its own).
    pub fn take_read_collected(&mut self) -> bool {
        self.ts.as_mut().is_some_and(|t| std::mem::take(&mut t.read_collected))
    }

    pub fn take_busy_ns(&mut self) -> Option<f64> {
        let profiled = self.prof.as_mut().map_or(0.0, |p| std::mem::take(&mut p.busy_ns));
        self.ts.as_mut().map(|t| std::mem::take(&mut t.collected_ns) + profiled)
    }
}

/// Nanoseconds inside the passes whose (begin, end) ticks these are.
fn pass_ns(ticks: &[u64], period_ns: f64) -> f64 {
    let mut ns = 0.0;
    for pair in ticks.chunks_exact(2) {
        // A pass the driver did not time reads as zeros; a reset counter as end < begin.
        if pair[1] > pair[0] {
            ns += (pair[1] - pair[0]) as f64 * period_ns;
        }
    }
    ns
}

pub(crate) fn poll_error(e: wgpu::PollError) -> Error {
    Error::DeviceLost(format!("waiting for the GPU failed: {e}"))
}
