//! The wgpu backend: WGSL kernels from `shaders/`, recorded into one encoder per step.

pub mod adapters;
mod amp;
mod buffer_pool;
mod conv;
mod core;
pub mod driver_help;
mod kernel_profiler;
mod kernels;
pub mod limits;
#[cfg(test)]
mod matmul_gen;
mod multi_optim;
mod quant;
mod readback;
mod recorder;
mod shape_class;
pub mod support;
pub mod targets;
pub mod tuning;
pub mod wait;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use adapters::{AdapterSummary, GpuSelector};
pub use amp::fp16_refusal;
pub use buffer_pool::GpuTensor;
pub use kernel_profiler::KernelTime;
pub use kernels::{matmul16_coop_source, render as render_template};
pub use tuning::{ByClass, Matmul16Variant, MatmulVariant, ShapeClass};

use crate::error::{Error, Result};
use crate::tensor::{
    AmpOps, BackendBase, BackendInfo, BackendKind, CoreOps, DType, DeviceCounts, DispatchRecord, Epilogue, Ledger, MemCategory,
    MemoryReport, ParamRefs, Shape, Telemetry, memory_lock,
};
use buffer_pool::{Shared, buffer_size};
use kernels::{Kernel, PipelineCache, PipelineKey};
use recorder::Recorder;

const STORAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);
const STAGING: wgpu::BufferUsages = wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);

/// Up to this many classes, softmax-cross-entropy runs one thread per row.
const ROWWISE_MAX_COLS: usize = 64;

/// Bind groups kept before the cache is emptied (a bound on what it keeps alive).
const BIND_GROUP_CAP: usize = 4096;

/// A bind group is reused for the same pipeline and the same buffers at the same bindings:
/// the parameter block is bound with a dynamic offset, so it is not part of the key.
type BindKey = (PipelineKey, Vec<(u32, wgpu::Buffer)>);

/// The roles of the unused bindings (`GpuBackend::spare`).
#[derive(Clone, Copy)]
enum Spare {
    /// Read-only inputs (several may share it).
    Input = 0,
    /// An output this call does not write.
    Output = 1,
    /// Underflow statistics nobody asked for.
    Stats = 2,
}

/// Errors wgpu reports outside an error scope, kept until the next check.
#[derive(Default)]
struct ErrorSink {
    errors: Vec<wgpu::Error>,
    lost: Option<String>,
}

pub struct GpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    summary: AdapterSummary,
    timestamps: bool,
    pipelines: PipelineCache,
    bind_groups: HashMap<BindKey, wgpu::BindGroup>,
    shared: Arc<Shared>,
    rec: Recorder,
    dummy: wgpu::Buffer,
    /// Bindings a kernel declares but this call does not use (`Spare`): made once, so a call
    /// allocates nothing and its bind group stays the same from step to step.
    spares: [wgpu::Buffer; 3],
    sink: Arc<Mutex<ErrorSink>>,
    /// The f32 GEMM per shape class, measured at open (tuning.rs).
    matmul: ByClass<MatmulVariant>,
    /// The 16-bit GEMM per type ([f16, bf16]) and shape class, measured at its first use.
    matmul16: [Option<ByClass<Matmul16Variant>>; 2],
    /// Opened with EXPERIMENTAL_COOPERATIVE_MATRIX and a 16×16×16 f16/f32 configuration: the
    /// cooperative-matrix f16 GEMM (`Matmul16Variant::Coop`) can run.
    coop16: bool,
    /// Issue 43's GPU-shaped dispatches: several parameters per optimizer dispatch
    /// (multi_optim.rs), and long sums and counts split over workgroups (core.rs). Off on a CPU
    /// adapter, where both measured slower (`cargo bench -- optim` on llvmpipe: the multi-tensor
    /// step 2.5–6.9× the per-parameter loop, the split reductions 1.4–48× one workgroup); a CPU
    /// runs a dispatch's workgroups on a few threads, so more of them buy nothing there.
    multi_tensor: bool,
    split_reductions: bool,
}

impl GpuBackend {
    /// Opens the adapter the selector names, with its real limits and the optional features we
    /// use, and picks the matmul variant for it (measured once, then cached on disk).
    pub fn open(sel: &GpuSelector, budget: Option<u64>) -> Result<Self> {
        Self::open_withholding(sel, budget, wgpu::Features::empty())
    }

    /// `open`, without some optional features even where the adapter has them: shows (and
    /// tests) what gpulab does on adapters that lack them, e.g. FP16 without SHADER_F16.
    pub fn open_withholding(sel: &GpuSelector, budget: Option<u64>, withheld: wgpu::Features) -> Result<Self> {
        let instance = adapters::instance();
        let (index, adapter) = adapters::select(adapters::enumerate(&instance), sel)?;
        let mut gpu = Self::from_adapter_withholding(index, &adapter, budget, withheld)?;
        gpu.matmul = tuning::choose(&mut gpu)?;
        gpu.reset_memory_peaks(); // the measurement's matrices are not the user's memory
        Ok(gpu)
    }

    pub fn from_adapter(index: usize, adapter: &wgpu::Adapter, budget: Option<u64>) -> Result<Self> {
        Self::from_adapter_withholding(index, adapter, budget, wgpu::Features::empty())
    }

    fn from_adapter_withholding(index: usize, adapter: &wgpu::Adapter, budget: Option<u64>, withheld: wgpu::Features) -> Result<Self> {
        let mut summary = adapters::summarize(index, adapter);
        let mut features = adapter.features() & adapters::wanted_features() & !withheld;
        if targets::f16_refusal(adapter.get_info().backend).is_some() {
            features.remove(wgpu::Features::SHADER_F16);
        }
        // The cooperative-matrix f16 GEMM: an experimental feature, so requested only where the
        // adapter lists the configuration the kernel uses, with SHADER_F16 (tuning.rs then
        // times it beside the others; nowhere else is it ever chosen).
        let coop = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        let coop16 = adapters::has_coop_f16(adapter)
            && features.contains(wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP)
            && !withheld.contains(coop)
            && targets::coop_refusal(adapter.get_info().backend).is_none();
        if coop16 {
            features |= coop;
        }
        // The summary lists what this device was opened with, not all the adapter could do.
        summary.features.retain(|name| {
            adapters::WANTED_FEATURES.iter().any(|(f, n)| n == name && features.contains(*f))
                || (name == adapters::COOP_MATRIX_F16 && coop16)
        });
        let experimental_features = if coop16 {
            // SAFETY: wgpu asks its user to accept that experimental features may still have
            // bugs; the only one requested is EXPERIMENTAL_COOPERATIVE_MATRIX, used by one kernel
            // (shaders/matmul16_coop.wgsl) that is checked against the CPU where it runs.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("gpulab"),
            required_features: features,
            // WebGPU's defaults, raised only where gpulab needs more (limits.rs).
            required_limits: limits::requested(&adapter.limits()),
            experimental_features,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| Error::Gpu(format!("could not open {}: {e}", summary.name)))?;

        // What this device was opened with (limits.rs), which every check below goes by.
        summary.limits = adapters::AdapterLimits::from(&device.limits());
        let sink = Arc::new(Mutex::new(ErrorSink::default()));
        let s = sink.clone();
        device.on_uncaptured_error(Arc::new(move |e| s.lock().unwrap_or_else(|p| p.into_inner()).errors.push(e)));
        let s = sink.clone();
        device.set_device_lost_callback(move |reason, msg| {
            s.lock().unwrap_or_else(|p| p.into_inner()).lost = Some(format!("{reason:?}: {msg}"));
        });

        let timestamps = features.contains(wgpu::Features::TIMESTAMP_QUERY);
        let rec = Recorder::new(&device, &queue, timestamps);
        let unused = || {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("unused binding"),
                size: 256,
                usage: STORAGE,
                mapped_at_creation: false,
            })
        };
        let (dummy, spares) = (unused(), [unused(), unused(), unused()]);
        let pipelines = PipelineCache::new(limits::workgroup_size(&device.limits()));
        let gpu_shaped = !tuning::AdapterTraits::of(&summary, coop16).is_cpu();
        let shared = Arc::new(Shared { pool: Default::default(), ledger: Arc::new(Mutex::new(Ledger::with_budget(budget))) });
        Ok(GpuBackend {
            device,
            queue,
            summary,
            timestamps,
            pipelines,
            bind_groups: HashMap::new(),
            shared,
            rec,
            dummy,
            spares,
            sink,
            matmul: ByClass::uniform(MatmulVariant::RegBlock),
            matmul16: [None; 2],
            coop16,
            multi_tensor: gpu_shaped,
            split_reductions: gpu_shaped,
        })
    }

    pub fn summary(&self) -> &AdapterSummary {
        &self.summary
    }

    /// Whether this device runs the cooperative-matrix f16 GEMM (tensor cores): the adapter has
    /// EXPERIMENTAL_COOPERATIVE_MATRIX with a 16×16×16 f16 × f16 + f32 configuration, and
    /// SHADER_F16.
    pub fn has_coop16(&self) -> bool {
        self.coop16
    }

    /// The 16-bit GEMM variants this device can run for `dt`: plain and register-blocked
    /// everywhere, the cooperative-matrix one for f16 where `has_coop16`.
    pub fn matmul16_variants(&self, dt: DType) -> Vec<Matmul16Variant> {
        Matmul16Variant::ALL.into_iter().filter(|&v| v != Matmul16Variant::Coop || (dt == DType::F16 && self.coop16)).collect()
    }

    /// Bytes held in the buffer pool for reuse (not counted in the ledger's categories).
    pub fn pooled_bytes(&self) -> u64 {
        self.shared.pool().free_bytes()
    }

    fn check(&self) -> Result<()> {
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lost) = sink.lost.take() {
            return Err(Error::DeviceLost(lost));
        }
        if sink.errors.is_empty() {
            return Ok(());
        }
        let errors = std::mem::take(&mut sink.errors);
        if let Some(wgpu::Error::OutOfMemory { source }) = errors.iter().find(|e| matches!(e, wgpu::Error::OutOfMemory { .. })) {
            return Err(Error::DeviceOutOfMemory { category: "a GPU operation".into(), bytes: 0, detail: source.to_string() });
        }
        Err(Error::Gpu(errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")))
    }

    fn alloc(&mut self, shape: Shape, dtype: DType, cat: MemCategory) -> Result<GpuTensor> {
        crate::tensor::checks::bytes("alloc", shape, dtype)?;
        let size = buffer_size(shape[0] * shape[1], dtype);
        let max = self.summary.limits.max_storage_buffer_binding_size;
        if size > max {
            return Err(Error::DeviceOutOfMemory {
                category: cat.name().into(),
                bytes: size,
                detail: format!("one tensor of shape {shape:?} exceeds this adapter's largest storage binding, {max} bytes"),
            });
        }
        memory_lock(&self.shared.ledger).reserve(cat, size)?;
        let pooled = self.shared.pool().take(size, STORAGE);
        let buf = match pooled {
            Some(b) => Ok(b),
            None => self.create_buffer(size, STORAGE, cat),
        };
        match buf {
            Ok(buf) => Ok(GpuTensor { buf: Some(buf), shape, dtype, cat, shared: self.shared.clone() }),
            Err(e) => {
                memory_lock(&self.shared.ledger).release(cat, size);
                Err(e)
            }
        }
    }

    /// Creates a buffer, turning a real out-of-memory into an error that names the category.
    fn create_buffer(&mut self, size: u64, usage: wgpu::BufferUsages, cat: MemCategory) -> Result<wgpu::Buffer> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor { label: Some(cat.name()), size, usage, mapped_at_creation: false });
        self.rec.counts.buffers_created += 1;
        match pollster::block_on(scope.pop()) {
            None => Ok(buf),
            Some(e) => Err(Error::DeviceOutOfMemory { category: cat.name().into(), bytes: size, detail: e.to_string() }),
        }
    }

    /// Host writes must land after the work already recorded, so that work is submitted first.
    fn write_bytes(&mut self, t: &GpuTensor, bytes: &[u8]) -> Result<()> {
        if self.rec.has_pending() {
            self.flush()?;
        }
        if !bytes.is_empty() {
            self.queue.write_buffer(t.buffer(), 0, bytes);
            self.rec.counts.bytes_uploaded += bytes.len() as u64;
        }
        Ok(())
    }

    fn read_bytes<T: bytemuck::Pod>(&mut self, t: &GpuTensor) -> Result<Vec<T>> {
        let (words, _) = self.read_words(&[t])?;
        Ok(bytemuck::cast_slice(&words[..t.words().min(words.len())]).to_vec())
    }

    /// Records one dispatch of `kernel` with its parameter words and storage bindings.
    fn run(&mut self, kernel: Kernel, variant: u32, params: &[u32], bindings: &[(u32, &wgpu::Buffer)], groups: (u32, u32)) -> Result<()> {
        self.run_as(DType::F32, kernel, variant, params, bindings, groups)
    }

    /// `run` for a kernel instantiated for `dtype` (the 16-bit kernels).
    fn run_as(
        &mut self,
        dtype: DType,
        kernel: Kernel,
        variant: u32,
        params: &[u32],
        bindings: &[(u32, &wgpu::Buffer)],
        groups: (u32, u32),
    ) -> Result<()> {
        if groups.0 == 0 || groups.1 == 0 {
            return Ok(());
        }
        if self.rec.params_full() || self.rec.queries_full() {
            self.flush()?;
            self.rec.collect_timestamps(&self.device, &self.queue)?;
        }
        if self.rec.prof.is_some() {
            let (flops, bytes) = kernel_profiler::work_estimate(kernel, params, bindings);
            self.rec.profiled_pass(&self.device, format!("{kernel:?}"), flops, bytes);
        }
        let compiled = self.pipelines.get(&self.device, PipelineKey { kernel, dtype, variant })?;
        let bind_group = self.bind_group(&compiled, bindings);
        let offset = self.rec.push_params(params);
        self.rec.dispatch(&self.device, &compiled, &bind_group, offset, groups);
        Ok(())
    }

    /// The bind group of `kernel` with these buffers: made once, then reused every step.
    fn bind_group(&mut self, kernel: &kernels::Compiled, bindings: &[(u32, &wgpu::Buffer)]) -> wgpu::BindGroup {
        let key: BindKey = (kernel.key, bindings.iter().map(|&(i, b)| (i, b.clone())).collect());
        if let Some(bg) = self.bind_groups.get(&key) {
            return bg.clone();
        }
        if self.bind_groups.len() >= BIND_GROUP_CAP {
            self.bind_groups.clear();
        }
        let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::Buffer(self.rec.params_binding()) }];
        entries.extend(bindings.iter().map(|(i, b)| wgpu::BindGroupEntry { binding: *i, resource: b.as_entire_binding() }));
        let bg = self.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &kernel.layout, entries: &entries });
        self.rec.counts.bind_groups_created += 1;
        self.bind_groups.insert(key, bg.clone());
        bg
    }

    /// The buffer bound where a kernel's binding goes unused in this call; distinct ones for
    /// distinct roles, since one buffer may not be written through two bindings of a dispatch.
    fn spare(&self, role: Spare) -> wgpu::Buffer {
        self.spares[role as usize].clone()
    }

    /// Workgroups for `n` invocations of a 1-D kernel, spilling into y past the per-dimension cap.
    fn grid(&self, n: usize) -> (u32, u32) {
        let groups = n.div_ceil(self.pipelines.wg() as usize) as u64;
        let max = self.summary.limits.max_compute_workgroups_per_dimension.max(1) as u64;
        if groups <= max { (groups as u32, 1) } else { (max as u32, groups.div_ceil(max) as u32) }
    }

    /// Workgroups for one workgroup per row.
    fn rows_grid(&self, rows: usize) -> (u32, u32) {
        let max = self.summary.limits.max_compute_workgroups_per_dimension.max(1) as u64;
        let rows = rows as u64;
        if rows <= max { (rows as u32, 1) } else { (max as u32, rows.div_ceil(max) as u32) }
    }

    /// dst[c, r] = src[r, c]
    fn transpose(&mut self, src: &GpuTensor, dst: &mut GpuTensor) -> Result<()> {
        let [r, c] = src.shape;
        if dst.shape != [c, r] {
            return Err(Error::Internal(format!("transpose of {:?} into {:?}", src.shape, dst.shape)));
        }
        let g = self.grid(r * c);
        self.run(
            Kernel::Transpose,
            0,
            &[u32_len(r, "transpose")?, u32_len(c, "transpose")?, 0, 0],
            &[(1, src.buffer()), (2, dst.buffer())],
            g,
        )
    }

    /// The refusal of work beyond this adapter's limits.
    fn beyond_limits(&self, op: &'static str, why: String) -> Error {
        Error::UnsupportedOp { op, backend: format!("the GPU adapter {}", self.summary.name), why }
    }

    fn elementwise(&mut self, kernel: Kernel, n: usize, params: [u32; 4], bindings: &[(u32, &wgpu::Buffer)]) -> Result<()> {
        let g = self.grid(n);
        self.run(kernel, 0, &params, bindings, g)
    }
}

fn u32_len(n: usize, what: &'static str) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::UnsupportedOp {
        op: what,
        backend: "the gpu backend".into(),
        why: format!("{n} elements exceed the 2^32 a GPU kernel can index"),
    })
}

impl BackendBase for GpuBackend {
    type Tensor = GpuTensor;

    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: BackendKind::Gpu,
            name: self.summary.name.clone(),
            api: self.summary.backend.clone(),
            driver: format!("{} {}", self.summary.driver, self.summary.driver_info).trim().to_string(),
            device_type: self.summary.device_type.clone(),
            software: self.summary.software,
            timestamps: self.timestamps,
        }
    }
}

use crate::tensor::scaler::{AmpOptimizer, ScalerRule};

impl AmpOps for GpuBackend {
    fn amp_unavailable(&self, dtype: DType) -> Option<String> {
        amp::unavailable(self, dtype)
    }

    fn cast(&mut self, x: &GpuTensor, out: &mut GpuTensor, stats: Option<&mut GpuTensor>) -> Result<()> {
        amp::cast(self, x, out, stats)
    }

    fn matmul16(
        &mut self,
        a: &GpuTensor,
        b: &GpuTensor,
        c: &mut GpuTensor,
        ta: bool,
        tb: bool,
        epi: Epilogue<'_, GpuTensor>,
        stats: Option<&mut GpuTensor>,
    ) -> Result<()> {
        amp::matmul16(self, a, b, c, ta, tb, epi, stats)
    }

    fn scale_by_loss_scale(&mut self, g: &mut GpuTensor, state: &GpuTensor) -> Result<()> {
        amp::scale_by_loss_scale(self, g, state)
    }

    fn unscale_check(&mut self, g: &mut GpuTensor, state: &mut GpuTensor) -> Result<()> {
        amp::unscale_check(self, g, state)
    }

    fn amp_update(
        &mut self,
        p: &mut GpuTensor,
        g: &GpuTensor,
        slots: &mut [GpuTensor],
        opt: AmpOptimizer<'_, GpuTensor>,
        state: &GpuTensor,
        w16: Option<&mut GpuTensor>,
    ) -> Result<()> {
        amp::amp_update(self, p, g, slots, opt, state, w16)
    }

    fn unscale_checks(&mut self, grads: &mut [&mut GpuTensor], state: &mut GpuTensor) -> Result<()> {
        multi_optim::unscale_checks(self, grads, state)
    }

    fn amp_updates(&mut self, params: &mut [ParamRefs<'_, GpuTensor>], opt: AmpOptimizer<'_, GpuTensor>, state: &GpuTensor) -> Result<()> {
        multi_optim::amp_updates(self, params, opt, state)
    }

    fn scaler_update(&mut self, state: &mut GpuTensor, rule: ScalerRule, log: &mut GpuTensor, slot: usize) -> Result<()> {
        amp::scaler_update(self, state, rule, log, slot)
    }
}

impl Telemetry for GpuBackend {
    fn take_busy_seconds(&mut self) -> Result<Option<f64>> {
        if !self.rec.has_timestamps() {
            return Ok(None);
        }
        // A readback since the last call (a log window's totals) carried the timestamps in its
        // copy: no second wait. Passes recorded after it count in the next call.
        if !self.rec.take_read_collected() {
            self.flush()?;
            self.rec.collect_timestamps(&self.device, &self.queue)?;
        }
        self.drain_kernel_profiler()?;
        self.check()?;
        Ok(self.rec.take_busy_ns().map(|ns| ns * 1e-9))
    }

    fn take_collected_busy_seconds(&mut self) -> Result<Option<f64>> {
        self.rec.take_read_collected();
        self.check()?;
        Ok(self.rec.take_busy_ns().map(|ns| ns * 1e-9))
    }

    fn reset_busy_clock(&mut self) -> Result<()> {
        if self.rec.has_timestamps() {
            self.rec.take_read_collected();
            self.flush()?;
            self.rec.collect_timestamps(&self.device, &self.queue)?;
            self.drain_kernel_profiler()?;
            self.check()?;
            self.rec.take_busy_ns();
        }
        Ok(())
    }

    fn memory(&self) -> MemoryReport {
        memory_lock(&self.shared.ledger).report()
    }

    fn reset_memory_peaks(&mut self) {
        memory_lock(&self.shared.ledger).reset_peaks();
    }

    fn counts(&self) -> Option<DeviceCounts> {
        Some(self.rec.counts)
    }

    fn log_dispatches(&mut self, on: bool) {
        self.rec.log = on.then(|| self.rec.log.take().unwrap_or_default());
    }

    fn take_dispatches(&mut self) -> Vec<DispatchRecord> {
        self.rec.log.as_mut().map(std::mem::take).unwrap_or_default()
    }
}
