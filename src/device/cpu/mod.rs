//! The CPU backend: the reference for every op and a serious baseline — GEMM from the `gemm`
//! crate (packed, SIMD, multi-threaded) and rayon for the element-wise work on large tensors.

mod amp;
mod ops;

use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::tensor::{BackendInfo, DType, Ledger, MemCategory, Shape, SharedLedger, TensorMeta, checks, memory_lock};

pub use ops::PAR_THRESHOLD;

#[derive(Debug)]
pub(crate) enum Storage {
    F32(Vec<f32>),
    U32(Vec<u32>),
    /// F16 or BF16 bit patterns.
    Bits16(Vec<u16>, DType),
}

/// A CPU tensor; dropping it releases its bytes in the ledger.
#[derive(Debug)]
pub struct CpuTensor {
    pub(crate) data: Storage,
    shape: Shape,
    cat: MemCategory,
    ledger: SharedLedger,
}

impl CpuTensor {
    fn bytes(&self) -> u64 {
        (self.numel() * self.dtype().size_bytes()) as u64
    }
    pub(crate) fn f32(&self) -> &[f32] {
        match &self.data {
            Storage::F32(v) => v,
            _ => &[],
        }
    }
    pub(crate) fn f32_mut(&mut self) -> &mut [f32] {
        match &mut self.data {
            Storage::F32(v) => v,
            _ => &mut [],
        }
    }
    pub(crate) fn u32(&self) -> &[u32] {
        match &self.data {
            Storage::U32(v) => v,
            _ => &[],
        }
    }
    pub(crate) fn u32_mut(&mut self) -> &mut [u32] {
        match &mut self.data {
            Storage::U32(v) => v,
            _ => &mut [],
        }
    }
}

impl TensorMeta for CpuTensor {
    fn shape(&self) -> Shape {
        self.shape
    }
    fn dtype(&self) -> DType {
        match self.data {
            Storage::F32(_) => DType::F32,
            Storage::U32(_) => DType::U32,
            Storage::Bits16(_, dt) => dt,
        }
    }
}

impl Drop for CpuTensor {
    fn drop(&mut self) {
        memory_lock(&self.ledger).release(self.cat, self.bytes());
    }
}

pub struct CpuBackend {
    ledger: SharedLedger,
    threads: usize,
}

impl CpuBackend {
    pub fn new() -> Self {
        Self::with_budget(None)
    }

    /// A CPU backend whose ledger refuses allocations beyond `budget` bytes.
    pub fn with_budget(budget: Option<u64>) -> Self {
        CpuBackend { ledger: Arc::new(Mutex::new(Ledger::with_budget(budget))), threads: rayon::current_num_threads() }
    }

    fn alloc(&mut self, data: Storage, shape: Shape, cat: MemCategory) -> Result<CpuTensor> {
        let t = CpuTensor { data, shape, cat, ledger: self.ledger.clone() };
        // Reserve before handing out; on refusal the tensor must not release what it never held.
        if let Err(e) = memory_lock(&self.ledger).reserve(cat, t.bytes()) {
            std::mem::forget(t);
            return Err(e);
        }
        Ok(t)
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// The CPU's model name, as the OS reports it.
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|s| s.trim().to_string()))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

impl crate::tensor::Backend for CpuBackend {
    type Tensor = CpuTensor;

    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "cpu".into(),
            name: format!("{} ({} threads)", cpu_name(), self.threads),
            api: "native".into(),
            driver: "gemm 0.19 + rayon".into(),
            device_type: "Cpu".into(),
            software: false,
            timestamps: false,
        }
    }

    fn zeros(&mut self, shape: Shape, dtype: DType, cat: MemCategory) -> Result<CpuTensor> {
        let n = shape[0] * shape[1];
        let data = match dtype {
            DType::F32 => Storage::F32(vec![0.0; n]),
            DType::U32 => Storage::U32(vec![0; n]),
            DType::F16 | DType::BF16 => Storage::Bits16(vec![0; n], dtype),
        };
        self.alloc(data, shape, cat)
    }

    fn upload_f32(&mut self, data: &[f32], shape: Shape, cat: MemCategory) -> Result<CpuTensor> {
        checks::data_len("upload", shape, data.len())?;
        self.alloc(Storage::F32(data.to_vec()), shape, cat)
    }

    fn upload_u32(&mut self, data: &[u32], shape: Shape, cat: MemCategory) -> Result<CpuTensor> {
        checks::data_len("upload", shape, data.len())?;
        self.alloc(Storage::U32(data.to_vec()), shape, cat)
    }

    fn write_f32(&mut self, t: &mut CpuTensor, data: &[f32]) -> Result<()> {
        checks::data_len("write", t.shape, data.len())?;
        if let Storage::Bits16(bits, dt) = &mut t.data {
            *bits = crate::tensor::float16::encode(*dt, data);
            return Ok(());
        }
        checks::f32s("write", &[t])?;
        t.f32_mut().copy_from_slice(data);
        Ok(())
    }

    fn write_u32(&mut self, t: &mut CpuTensor, data: &[u32]) -> Result<()> {
        checks::data_len("write", t.shape, data.len())?;
        crate::error::ensure_shape(t.dtype() == DType::U32, "write", || "expected a u32 tensor".into())?;
        t.u32_mut().copy_from_slice(data);
        Ok(())
    }

    fn read_f32(&mut self, t: &CpuTensor) -> Result<Vec<f32>> {
        if let Storage::Bits16(bits, dt) = &t.data {
            return Ok(crate::tensor::float16::decode(*dt, bits));
        }
        checks::f32s("read", &[t])?;
        Ok(t.f32().to_vec())
    }

    fn read_u32(&mut self, t: &CpuTensor) -> Result<Vec<u32>> {
        crate::error::ensure_shape(t.dtype() == DType::U32, "read", || "expected a u32 tensor".into())?;
        Ok(t.u32().to_vec())
    }

    fn read_many(&mut self, ts: &[&CpuTensor]) -> Result<Vec<crate::tensor::HostData>> {
        use crate::tensor::HostData;
        ts.iter().map(|t| if t.dtype() == DType::U32 { self.read_u32(t).map(HostData::U32) } else { self.read_f32(t).map(HostData::F32) }).collect()
    }

    fn matmul(&mut self, a: &CpuTensor, b: &CpuTensor, c: &mut CpuTensor, ta: bool, tb: bool, acc: bool) -> Result<()> {
        let (m, n, k) = checks::matmul(a, b, c, ta, tb)?;
        ops::gemm(a.f32(), b.f32(), c.f32_mut(), m, n, k, ta, tb, acc, self.threads);
        Ok(())
    }

    fn bias_add(&mut self, y: &mut CpuTensor, bias: &CpuTensor) -> Result<()> {
        checks::bias(y, bias)?;
        let cols = y.shape[1];
        ops::bias_add(y.f32_mut(), bias.f32(), cols);
        Ok(())
    }

    fn relu(&mut self, x: &mut CpuTensor) -> Result<()> {
        checks::f32s("relu", &[x])?;
        ops::map_inplace(x.f32_mut(), |v| v.max(0.0));
        Ok(())
    }

    fn relu_backward(&mut self, grad: &mut CpuTensor, act: &CpuTensor) -> Result<()> {
        checks::same_shape("relu_backward", grad, act)?;
        checks::f32s("relu_backward", &[grad])?;
        ops::zip_inplace(grad.f32_mut(), act.f32(), |g, a| if a > 0.0 { g } else { 0.0 });
        Ok(())
    }

    fn softmax_xent(
        &mut self,
        logits: &CpuTensor,
        labels: &CpuTensor,
        loss_rows: &mut CpuTensor,
        grad: Option<&mut CpuTensor>,
        grad_scale: f32,
    ) -> Result<()> {
        checks::labels("softmax_xent", logits, labels)?;
        let [rows, cols] = logits.shape;
        checks::vector_out("softmax_xent", loss_rows, rows, DType::F32)?;
        let grad = match grad {
            Some(g) => {
                checks::same_shape("softmax_xent", g, logits)?;
                Some(g.f32_mut())
            }
            None => None,
        };
        ops::softmax_xent(logits.f32(), labels.u32(), loss_rows.f32_mut(), grad, cols, grad_scale);
        Ok(())
    }

    fn sum_cols(&mut self, x: &CpuTensor, out: &mut CpuTensor) -> Result<()> {
        checks::vector_out("sum_cols", out, x.shape[1], DType::F32)?;
        if let Storage::Bits16(bits, dt) = &x.data {
            ops::sum_cols(&crate::tensor::float16::decode(*dt, bits), out.f32_mut(), x.shape[1]);
            return Ok(());
        }
        checks::f32s("sum_cols", &[x])?;
        ops::sum_cols(x.f32(), out.f32_mut(), x.shape[1]);
        Ok(())
    }

    fn sum_rows(&mut self, x: &CpuTensor, out: &mut CpuTensor) -> Result<()> {
        checks::f32s("sum_rows", &[x])?;
        checks::vector_out("sum_rows", out, x.shape[0], DType::F32)?;
        ops::sum_rows(x.f32(), out.f32_mut(), x.shape[1]);
        Ok(())
    }

    fn accumulate_sum(&mut self, x: &CpuTensor, acc: &mut CpuTensor, index: usize) -> Result<()> {
        checks::f32s("accumulate_sum", &[x])?;
        checks::acc_index("accumulate_sum", acc, index, DType::F32)?;
        acc.f32_mut()[index] += ops::sum(x.f32());
        Ok(())
    }

    fn argmax_rows(&mut self, x: &CpuTensor, out: &mut CpuTensor) -> Result<()> {
        checks::f32s("argmax_rows", &[x])?;
        checks::vector_out("argmax_rows", out, x.shape[0], DType::U32)?;
        let cols = x.shape[1];
        for (o, row) in out.u32_mut().iter_mut().zip(x.f32().chunks_exact(cols)) {
            *o = ops::argmax(row) as u32;
        }
        Ok(())
    }

    fn count_correct(&mut self, logits: &CpuTensor, labels: &CpuTensor, acc: &mut CpuTensor, index: usize) -> Result<()> {
        checks::labels("count_correct", logits, labels)?;
        checks::acc_index("count_correct", acc, index, DType::U32)?;
        let cols = logits.shape[1];
        let hits = logits.f32().chunks_exact(cols).zip(labels.u32()).filter(|(row, l)| ops::argmax(row) as u32 == **l).count();
        acc.u32_mut()[index] += hits as u32;
        Ok(())
    }

    fn sgd_step(&mut self, p: &mut CpuTensor, g: &CpuTensor, v: &mut CpuTensor, hp: Sgd) -> Result<()> {
        checks::same_shape("sgd_step", p, g)?;
        checks::same_shape("sgd_step", p, v)?;
        checks::f32s("sgd_step", &[p])?;
        ops::sgd(p.f32_mut(), g.f32(), v.f32_mut(), hp);
        Ok(())
    }

    fn adamw_step(&mut self, p: &mut CpuTensor, g: &CpuTensor, m: &mut CpuTensor, v: &mut CpuTensor, hp: AdamW, step: u32) -> Result<()> {
        checks::same_shape("adamw_step", p, g)?;
        checks::same_shape("adamw_step", p, m)?;
        checks::same_shape("adamw_step", p, v)?;
        checks::f32s("adamw_step", &[p])?;
        ops::adamw(p.f32_mut(), g.f32(), m.f32_mut(), v.f32_mut(), hp, step);
        Ok(())
    }

    fn fill(&mut self, t: &mut CpuTensor, value: f32) -> Result<()> {
        match &mut t.data {
            Storage::F32(v) => v.fill(value),
            Storage::U32(v) => v.fill(value as u32),
            Storage::Bits16(v, dt) => v.fill(crate::tensor::float16::round_bits(*dt, value)),
        }
        Ok(())
    }

    fn scale(&mut self, t: &mut CpuTensor, alpha: f32) -> Result<()> {
        checks::f32s("scale", &[t])?;
        ops::map_inplace(t.f32_mut(), |v| v * alpha);
        Ok(())
    }

    fn copy(&mut self, src: &CpuTensor, dst: &mut CpuTensor) -> Result<()> {
        checks::same_shape("copy", src, dst)?;
        match (&src.data, &mut dst.data) {
            (Storage::F32(s), Storage::F32(d)) => d.copy_from_slice(s),
            (Storage::U32(s), Storage::U32(d)) => d.copy_from_slice(s),
            (Storage::Bits16(s, _), Storage::Bits16(d, _)) => d.copy_from_slice(s),
            _ => unreachable!("same_shape checked the dtypes"),
        }
        Ok(())
    }

    fn amp_unavailable(&self, dtype: DType) -> Option<String> {
        amp::unavailable(dtype)
    }

    fn cast(&mut self, x: &CpuTensor, out: &mut CpuTensor, stats: Option<&mut CpuTensor>) -> Result<()> {
        amp::cast(x, out, stats)
    }

    fn matmul16(&mut self, a: &CpuTensor, b: &CpuTensor, c: &mut CpuTensor, ta: bool, tb: bool, epi: Epilogue<'_, CpuTensor>, stats: Option<&mut CpuTensor>) -> Result<()> {
        amp::matmul16(a, b, c, ta, tb, epi, stats, self.threads)
    }

    fn unscale_check(&mut self, g: &mut CpuTensor, inv_scale: f32, found: &mut CpuTensor) -> Result<()> {
        amp::unscale_check(g, inv_scale, found)
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        Ok(())
    }

    fn take_busy_seconds(&mut self) -> Result<Option<f64>> {
        Ok(None)
    }

    fn memory(&self) -> MemoryReport {
        memory_lock(&self.ledger).report()
    }

    fn reset_memory_peaks(&mut self) {
        memory_lock(&self.ledger).reset_peaks();
    }
}

use crate::tensor::{AdamW, Epilogue, MemoryReport, Sgd};
