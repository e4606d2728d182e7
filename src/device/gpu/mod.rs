//! The wgpu backend: WGSL kernels from `shaders/`, recorded into one encoder per step.

pub mod adapters;
mod amp;
mod kernel_profiler;
mod kernels;
#[cfg(test)]
mod matmul_gen;
mod pool;
mod readback;
mod recorder;
pub mod tuning;

use std::sync::{Arc, Mutex};


pub use adapters::{AdapterSummary, GpuSelector};
pub use kernel_profiler::KernelTime;
pub use kernels::render as render_template;
pub use pool::GpuTensor;
pub use tuning::MatmulVariant;

use crate::error::{Error, Result, ensure_shape};
use crate::tensor::{AdamW, Backend, BackendInfo, DType, Epilogue, Ledger, MemCategory, MemoryReport, Sgd, Shape, TensorMeta, checks, memory_lock};
use kernels::{Kernel, PipelineCache, PipelineKey, WG};
use pool::{Shared, buffer_size};
use recorder::Recorder;

const STORAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);
const STAGING: wgpu::BufferUsages = wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);

/// Up to this many classes, softmax-cross-entropy runs one thread per row.
const ROWWISE_MAX_COLS: usize = 64;

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
    shared: Arc<Shared>,
    rec: Recorder,
    dummy: wgpu::Buffer,
    sink: Arc<Mutex<ErrorSink>>,
    matmul: MatmulVariant,
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
        let features = adapter.features() & adapters::wanted_features() & !withheld;
        // The summary lists what this device was opened with, not all the adapter could do.
        summary.features.retain(|name| adapters::WANTED_FEATURES.iter().any(|(f, n)| n == name && features.contains(*f)));
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("gpulab"),
            required_features: features,
            // The adapter's real limits: wgpu's defaults cap storage bindings at 128 MiB.
            required_limits: adapter.limits(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| Error::Gpu(format!("could not open {}: {e}", summary.name)))?;

        let sink = Arc::new(Mutex::new(ErrorSink::default()));
        let s = sink.clone();
        device.on_uncaptured_error(Arc::new(move |e| s.lock().unwrap_or_else(|p| p.into_inner()).errors.push(e)));
        let s = sink.clone();
        device.set_device_lost_callback(move |reason, msg| {
            s.lock().unwrap_or_else(|p| p.into_inner()).lost = Some(format!("{reason:?}: {msg}"));
        });

        let timestamps = features.contains(wgpu::Features::TIMESTAMP_QUERY);
        let rec = Recorder::new(&device, &queue, timestamps);
        let dummy = device.create_buffer(&wgpu::BufferDescriptor { label: Some("unused binding"), size: 256, usage: STORAGE, mapped_at_creation: false });
        let shared = Arc::new(Shared { pool: Default::default(), ledger: Arc::new(Mutex::new(Ledger::with_budget(budget))) });
        Ok(GpuBackend {
            device,
            queue,
            summary,
            timestamps,
            pipelines: PipelineCache::default(),
            shared,
            rec,
            dummy,
            sink,
            matmul: MatmulVariant::RegBlock,
        })
    }

    pub fn summary(&self) -> &AdapterSummary {
        &self.summary
    }

    pub fn matmul_variant(&self) -> MatmulVariant {
        self.matmul
    }

    pub fn set_matmul_variant(&mut self, v: MatmulVariant) {
        self.matmul = v;
    }

    /// Dispatches and submits so far (per-dispatch overhead is what small models pay for).
    pub fn counters(&self) -> (u64, u64) {
        (self.rec.dispatches, self.rec.submits)
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
        let buf = match self.shared.pool().take(size, STORAGE) {
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
    fn create_buffer(&self, size: u64, usage: wgpu::BufferUsages, cat: MemCategory) -> Result<wgpu::Buffer> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor { label: Some(cat.name()), size, usage, mapped_at_creation: false });
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
        }
        Ok(())
    }

    fn read_bytes<T: bytemuck::Pod>(&mut self, t: &GpuTensor) -> Result<Vec<T>> {
        let bytes = t.data_bytes();
        if bytes == 0 {
            return Ok(Vec::new());
        }
        let size = bytes.div_ceil(256) * 256;
        memory_lock(&self.shared.ledger).reserve(MemCategory::Staging, size)?;
        let staging = match self.shared.pool().take(size, STAGING) {
            Some(b) => b,
            None => self.create_buffer(size, STAGING, MemCategory::Staging).inspect_err(|_| {
                memory_lock(&self.shared.ledger).release(MemCategory::Staging, size);
            })?,
        };
        self.rec.encoder(&self.device).copy_buffer_to_buffer(t.buffer(), 0, &staging, 0, bytes);
        self.flush()?;
        let out = readback::map_and_read(&self.device, &staging, bytes);
        memory_lock(&self.shared.ledger).release(MemCategory::Staging, size);
        self.shared.pool().put(staging);
        self.check()?;
        out
    }

    /// Records one dispatch of `kernel` with its parameter words and storage bindings.
    fn run(&mut self, kernel: Kernel, variant: u32, params: &[u32], bindings: &[(u32, &wgpu::Buffer)], groups: (u32, u32)) -> Result<()> {
        self.run_as(DType::F32, kernel, variant, params, bindings, groups)
    }

    /// `run` for a kernel instantiated for `dtype` (the 16-bit kernels).
    fn run_as(&mut self, dtype: DType, kernel: Kernel, variant: u32, params: &[u32], bindings: &[(u32, &wgpu::Buffer)], groups: (u32, u32)) -> Result<()> {
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
        let pipeline = self.pipelines.get(&self.device, PipelineKey { kernel, dtype, variant })?;
        let uniform = self.rec.push_params(params);
        let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::Buffer(uniform) }];
        entries.extend(bindings.iter().map(|(i, b)| wgpu::BindGroupEntry { binding: *i, resource: b.as_entire_binding() }));
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        self.rec.dispatch(&self.device, &pipeline, &bind_group, groups);
        Ok(())
    }

    /// Workgroups for `n` invocations of a 1-D kernel, spilling into y past the per-dimension cap.
    fn grid(&self, n: usize) -> (u32, u32) {
        let groups = n.div_ceil(WG as usize) as u64;
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
        ensure_shape(dst.shape == [c, r], "transpose", || format!("{:?} into {:?}", src.shape, dst.shape))?;
        let g = self.grid(r * c);
        self.run(Kernel::Transpose, 0, &[u32_len(r, "transpose")?, u32_len(c, "transpose")?, 0, 0], &[(1, src.buffer()), (2, dst.buffer())], g)
    }

    fn elementwise(&mut self, kernel: Kernel, n: usize, params: [u32; 4], bindings: &[(u32, &wgpu::Buffer)]) -> Result<()> {
        let g = self.grid(n);
        self.run(kernel, 0, &params, bindings, g)
    }
}

fn u32_len(n: usize, what: &'static str) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Shape { op: what, detail: format!("{n} elements exceed the 2^32 a GPU kernel can index") })
}

impl Backend for GpuBackend {
    type Tensor = GpuTensor;

    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "gpu".into(),
            name: self.summary.name.clone(),
            api: self.summary.backend.clone(),
            driver: format!("{} {}", self.summary.driver, self.summary.driver_info).trim().to_string(),
            device_type: self.summary.device_type.clone(),
            software: self.summary.software,
            timestamps: self.timestamps,
        }
    }

    fn zeros(&mut self, shape: Shape, dtype: DType, cat: MemCategory) -> Result<GpuTensor> {
        // Pooled buffers hold old data, so every new tensor is cleared on the device.
        let t = self.alloc(shape, dtype, cat)?;
        let n = u32_len(t.words(), "zeros")?;
        self.elementwise(Kernel::FillBits, n as usize, [n, 0, 0, 0], &[(3, t.buffer())])?;
        Ok(t)
    }

    fn upload_f32(&mut self, data: &[f32], shape: Shape, cat: MemCategory) -> Result<GpuTensor> {
        checks::data_len("upload", shape, data.len())?;
        let t = self.alloc(shape, DType::F32, cat)?;
        self.write_bytes(&t, bytemuck::cast_slice(data))?;
        Ok(t)
    }

    fn upload_u32(&mut self, data: &[u32], shape: Shape, cat: MemCategory) -> Result<GpuTensor> {
        checks::data_len("upload", shape, data.len())?;
        let t = self.alloc(shape, DType::U32, cat)?;
        self.write_bytes(&t, bytemuck::cast_slice(data))?;
        Ok(t)
    }

    fn write_f32(&mut self, t: &mut GpuTensor, data: &[f32]) -> Result<()> {
        checks::data_len("write", t.shape, data.len())?;
        if t.dtype.is_16bit() {
            let words = amp::pack_words(t.dtype, data);
            return self.write_bytes(t, bytemuck::cast_slice(&words));
        }
        checks::f32s("write", &[t])?;
        self.write_bytes(t, bytemuck::cast_slice(data))
    }

    fn write_u32(&mut self, t: &mut GpuTensor, data: &[u32]) -> Result<()> {
        checks::data_len("write", t.shape, data.len())?;
        ensure_shape(t.dtype == DType::U32, "write", || "expected a u32 tensor".into())?;
        self.write_bytes(t, bytemuck::cast_slice(data))
    }

    fn read_f32(&mut self, t: &GpuTensor) -> Result<Vec<f32>> {
        if t.dtype.is_16bit() {
            let words: Vec<u32> = self.read_bytes(t)?;
            return Ok(amp::unpack_words(t.dtype, &words, t.numel()));
        }
        checks::f32s("read", &[t])?;
        self.read_bytes(t)
    }

    fn read_u32(&mut self, t: &GpuTensor) -> Result<Vec<u32>> {
        ensure_shape(t.dtype == DType::U32, "read", || "expected a u32 tensor".into())?;
        self.read_bytes(t)
    }

    fn read_many(&mut self, ts: &[&GpuTensor]) -> Result<Vec<crate::tensor::HostData>> {
        self.read_batched(ts)
    }

    fn matmul(&mut self, a: &GpuTensor, b: &GpuTensor, c: &mut GpuTensor, ta: bool, tb: bool, acc: bool) -> Result<()> {
        let (m, n, k) = checks::matmul(a, b, c, ta, tb)?;
        if ta && self.matmul == MatmulVariant::RegBlock {
            // Reading a transposed A is pathologically slow for the register-blocked kernel on
            // llvmpipe (~16 ms per submit, measured); transposing it first costs one cheap pass.
            let mut at = self.alloc([m, k], DType::F32, MemCategory::Activations)?;
            self.transpose(a, &mut at)?;
            return self.matmul(&at, b, c, false, tb, acc);
        }
        let (m32, n32, k32) = (u32_len(m, "matmul")?, u32_len(n, "matmul")?, u32_len(k, "matmul")?);
        let (kernel, groups) = match self.matmul {
            // 16 rows × 8 columns per invocation, 8 invocations side by side.
            MatmulVariant::RegBlock => (Kernel::MatmulRegBlock, (n32.div_ceil(64), m32.div_ceil(16))),
            MatmulVariant::Tiled => (Kernel::MatmulTiled, (n32.div_ceil(64), m32.div_ceil(64))),
        };
        let max = self.summary.limits.max_compute_workgroups_per_dimension;
        ensure_shape(groups.0 <= max && groups.1 <= max, "matmul", || format!("{m}×{n} output needs more workgroups than this adapter allows ({max} per dimension)"))?;
        // vec4 loads of A / B where the row length along the loaded dimension allows them.
        let va = if ta { m % 4 == 0 } else { k % 4 == 0 };
        let vb = if tb { k % 4 == 0 } else { n % 4 == 0 };
        let variant = ta as u32 | (tb as u32) << 1 | (va as u32) << 2 | (vb as u32) << 3;
        self.run(kernel, variant, &[m32, n32, k32, acc as u32], &[(1, a.buffer()), (2, b.buffer()), (3, c.buffer())], groups)
    }

    fn bias_add(&mut self, y: &mut GpuTensor, bias: &GpuTensor) -> Result<()> {
        checks::bias(y, bias)?;
        let n = u32_len(y.numel(), "bias_add")?;
        self.elementwise(Kernel::BiasAdd, n as usize, [n, y.shape[1] as u32, 0, 0], &[(1, y.buffer()), (2, bias.buffer())])
    }

    fn relu(&mut self, x: &mut GpuTensor) -> Result<()> {
        checks::f32s("relu", &[x])?;
        let n = u32_len(x.numel(), "relu")?;
        self.elementwise(Kernel::Relu, n as usize, [n, 0, 0, 0], &[(1, x.buffer())])
    }

    fn relu_backward(&mut self, grad: &mut GpuTensor, act: &GpuTensor) -> Result<()> {
        checks::same_shape("relu_backward", grad, act)?;
        checks::f32s("relu_backward", &[grad])?;
        let n = u32_len(grad.numel(), "relu_backward")?;
        self.elementwise(Kernel::ReluBackward, n as usize, [n, 0, 0, 0], &[(1, grad.buffer()), (2, act.buffer())])
    }

    fn softmax_xent(&mut self, logits: &GpuTensor, labels: &GpuTensor, loss_rows: &mut GpuTensor, grad: Option<&mut GpuTensor>, grad_scale: f32) -> Result<()> {
        checks::labels("softmax_xent", logits, labels)?;
        let [rows, cols] = logits.shape;
        checks::vector_out("softmax_xent", loss_rows, rows, DType::F32)?;
        if let Some(g) = &grad {
            checks::same_shape("softmax_xent", *g, logits)?;
        }
        let write_grad = grad.is_some() as u32;
        let grad_buf = grad.map(|g| g.buffer().clone()).unwrap_or_else(|| self.dummy.clone());
        let params = [u32_len(rows, "softmax_xent")?, u32_len(cols, "softmax_xent")?, grad_scale.to_bits(), write_grad];
        let bindings = [(1, logits.buffer()), (2, labels.buffer()), (3, loss_rows.buffer()), (4, &grad_buf)];
        // Narrow rows: a thread per row beats a workgroup per row with its barriers.
        if cols <= ROWWISE_MAX_COLS {
            let g = self.grid(rows);
            self.run(Kernel::SoftmaxXentRowwise, 0, &params, &bindings, g)
        } else {
            let g = self.rows_grid(rows);
            self.run(Kernel::SoftmaxXent, 0, &params, &bindings, g)
        }
    }

    fn sum_cols(&mut self, x: &GpuTensor, out: &mut GpuTensor) -> Result<()> {
        checks::vector_out("sum_cols", out, x.shape[1], DType::F32)?;
        if x.dtype.is_16bit() {
            return amp::sum_cols16(self, x, out);
        }
        checks::f32s("sum_cols", &[x])?;
        let [r, c] = x.shape;
        let g = self.grid(c);
        self.run(Kernel::SumCols, 0, &[u32_len(r, "sum_cols")?, u32_len(c, "sum_cols")?, 0, 0], &[(1, x.buffer()), (2, out.buffer())], g)
    }

    fn sum_rows(&mut self, x: &GpuTensor, out: &mut GpuTensor) -> Result<()> {
        checks::f32s("sum_rows", &[x])?;
        checks::vector_out("sum_rows", out, x.shape[0], DType::F32)?;
        let [r, c] = x.shape;
        let g = self.grid(r);
        self.run(Kernel::SumRows, 0, &[u32_len(r, "sum_rows")?, u32_len(c, "sum_rows")?, 0, 0], &[(1, x.buffer()), (2, out.buffer())], g)
    }

    fn accumulate_sum(&mut self, x: &GpuTensor, acc: &mut GpuTensor, index: usize) -> Result<()> {
        checks::f32s("accumulate_sum", &[x])?;
        checks::acc_index("accumulate_sum", acc, index, DType::F32)?;
        let [r, c] = x.shape;
        let p = [u32_len(r, "accumulate_sum")?, u32_len(c, "accumulate_sum")?, index as u32, 0];
        self.run(Kernel::AccumulateSum, 0, &p, &[(1, x.buffer()), (2, acc.buffer())], (1, 1))
    }

    fn argmax_rows(&mut self, x: &GpuTensor, out: &mut GpuTensor) -> Result<()> {
        checks::f32s("argmax_rows", &[x])?;
        checks::vector_out("argmax_rows", out, x.shape[0], DType::U32)?;
        let [r, c] = x.shape;
        ensure_shape(c > 0, "argmax_rows", || "a row needs at least one column".into())?;
        let g = self.grid(r);
        self.run(Kernel::ArgmaxRows, 0, &[u32_len(r, "argmax_rows")?, u32_len(c, "argmax_rows")?, 0, 0], &[(1, x.buffer()), (4, out.buffer())], g)
    }

    fn count_correct(&mut self, logits: &GpuTensor, labels: &GpuTensor, acc: &mut GpuTensor, index: usize) -> Result<()> {
        checks::labels("count_correct", logits, labels)?;
        checks::acc_index("count_correct", acc, index, DType::U32)?;
        let [r, c] = logits.shape;
        ensure_shape(c > 0, "count_correct", || "a row needs at least one column".into())?;
        let p = [u32_len(r, "count_correct")?, u32_len(c, "count_correct")?, index as u32, 0];
        self.run(Kernel::CountCorrect, 0, &p, &[(1, logits.buffer()), (3, labels.buffer()), (4, acc.buffer())], (1, 1))
    }

    fn sgd_step(&mut self, p: &mut GpuTensor, g: &GpuTensor, v: &mut GpuTensor, hp: Sgd) -> Result<()> {
        checks::same_shape("sgd_step", p, g)?;
        checks::same_shape("sgd_step", p, v)?;
        checks::f32s("sgd_step", &[p])?;
        let n = u32_len(p.numel(), "sgd_step")?;
        let params = [n, hp.lr.to_bits(), hp.momentum.to_bits(), hp.weight_decay.to_bits()];
        let grid = self.grid(n as usize);
        self.run(Kernel::Sgd, 0, &params, &[(1, p.buffer()), (2, g.buffer()), (3, v.buffer())], grid)
    }

    fn adamw_step(&mut self, p: &mut GpuTensor, g: &GpuTensor, m: &mut GpuTensor, v: &mut GpuTensor, hp: AdamW, step: u32) -> Result<()> {
        checks::same_shape("adamw_step", p, g)?;
        checks::same_shape("adamw_step", p, m)?;
        checks::same_shape("adamw_step", p, v)?;
        checks::f32s("adamw_step", &[p])?;
        let n = u32_len(p.numel(), "adamw_step")?;
        let f = hp.factors(step);
        let params = [
            n,
            hp.lr.to_bits(),
            0f32.to_bits(),
            hp.weight_decay.to_bits(),
            hp.beta1.to_bits(),
            hp.beta2.to_bits(),
            hp.eps.to_bits(),
            f.decay.to_bits(),
            f.step_size.to_bits(),
            f.bias2_sqrt.to_bits(),
        ];
        let grid = self.grid(n as usize);
        self.run(Kernel::AdamW, 0, &params, &[(1, p.buffer()), (2, g.buffer()), (3, m.buffer()), (4, v.buffer())], grid)
    }

    fn fill(&mut self, t: &mut GpuTensor, value: f32) -> Result<()> {
        let n = u32_len(t.numel(), "fill")?;
        match t.dtype {
            DType::F32 => self.elementwise(Kernel::Fill, n as usize, [n, 0, value.to_bits(), 0], &[(1, t.buffer())]),
            DType::U32 => self.elementwise(Kernel::FillBits, n as usize, [n, 0, 0, value as u32], &[(3, t.buffer())]),
            DType::F16 | DType::BF16 => {
                let bits = crate::tensor::float16::round_bits(t.dtype, value) as u32;
                let n = u32_len(t.words(), "fill")?;
                self.elementwise(Kernel::FillBits, n as usize, [n, 0, 0, bits | bits << 16], &[(3, t.buffer())])
            }
        }
    }

    fn scale(&mut self, t: &mut GpuTensor, alpha: f32) -> Result<()> {
        checks::f32s("scale", &[t])?;
        let n = u32_len(t.numel(), "scale")?;
        self.elementwise(Kernel::Scale, n as usize, [n, 0, alpha.to_bits(), 0], &[(1, t.buffer())])
    }

    fn copy(&mut self, src: &GpuTensor, dst: &mut GpuTensor) -> Result<()> {
        checks::same_shape("copy", src, dst)?;
        let n = u32_len(src.words(), "copy")?;
        self.elementwise(Kernel::Copy, n as usize, [n, 0, 0, 0], &[(3, dst.buffer()), (4, src.buffer())])
    }

    fn prepare(&mut self) -> Result<()> {
        // Matmul pipelines depend on the shapes (vec4 eligibility), so they compile on first use.
        for kernel in Kernel::SIMPLE {
            self.pipelines.get(&self.device, PipelineKey { kernel, dtype: DType::F32, variant: 0 })?;
        }
        Ok(())
    }

    fn amp_unavailable(&self, dtype: DType) -> Option<String> {
        amp::unavailable(self, dtype)
    }

    fn cast(&mut self, x: &GpuTensor, out: &mut GpuTensor, stats: Option<&mut GpuTensor>) -> Result<()> {
        amp::cast(self, x, out, stats)
    }

    fn matmul16(&mut self, a: &GpuTensor, b: &GpuTensor, c: &mut GpuTensor, ta: bool, tb: bool, epi: Epilogue<'_, GpuTensor>, stats: Option<&mut GpuTensor>) -> Result<()> {
        amp::matmul16(self, a, b, c, ta, tb, epi, stats)
    }

    fn unscale_check(&mut self, g: &mut GpuTensor, inv_scale: f32, found: &mut GpuTensor) -> Result<()> {
        amp::unscale_check(self, g, inv_scale, found)
    }

    fn flush(&mut self) -> Result<()> {
        self.rec.flush(&self.queue);
        self.check()
    }

    fn sync(&mut self) -> Result<()> {
        self.flush()?;
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(recorder::poll_error)?;
        self.check()
    }

    fn take_busy_seconds(&mut self) -> Result<Option<f64>> {
        if !self.rec.has_timestamps() {
            return Ok(None);
        }
        self.flush()?;
        self.rec.collect_timestamps(&self.device, &self.queue)?;
        self.drain_kernel_profiler()?;
        self.check()?;
        Ok(self.rec.take_busy_ns().map(|ns| ns * 1e-9))
    }

    fn memory(&self) -> MemoryReport {
        memory_lock(&self.shared.ledger).report()
    }

    fn reset_memory_peaks(&mut self) {
        memory_lock(&self.shared.ledger).reset_peaks();
    }
}
