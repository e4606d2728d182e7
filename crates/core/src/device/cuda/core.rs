//! The f32 ops and host transfers of the CUDA backend (`CoreOps`): validation through
//! `tensor::checks` (the same refusals as every backend), then one kernel of shaders/cuda/core.cu
//! or one cuBLAS call, queued on the backend's stream.

use cudarc::driver::LaunchConfig;

use super::backend::{CudaBackend, CudaTensor, driver};
use super::kernels::{Kernel, REDUCE_THREADS};
use crate::error::{Error, Result};
use crate::tensor::{AdamW, CoreOps, DType, HostData, MemCategory, Sgd, Shape, TensorMeta, checks, float16};

const THREADS: u32 = 256;

/// Enough blocks of THREADS for `n` items (grid-stride kernels cover the rest), at least one.
pub(super) fn grid(n: u64) -> LaunchConfig {
    let blocks = n.div_ceil(THREADS as u64).clamp(1, 1 << 20) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

/// The single block the fixed-order reductions run in.
pub(super) fn one_block() -> LaunchConfig {
    LaunchConfig { grid_dim: (1, 1, 1), block_dim: (REDUCE_THREADS, 1, 1), shared_mem_bytes: 0 }
}

pub(super) fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::InvalidConfig(format!("{what} = {v} exceeds the CUDA kernels' 32-bit limit")))
}

impl CudaBackend {
    fn upload_bytes(&mut self, bytes: &[u8], shape: Shape, dtype: DType, cat: MemCategory) -> Result<CudaTensor> {
        let mut t = self.alloc(shape, dtype, cat)?;
        self.write_bytes(&mut t, bytes)?;
        Ok(t)
    }

    pub(super) fn write_bytes(&mut self, t: &mut CudaTensor, bytes: &[u8]) -> Result<()> {
        if bytes.len() != t.bytes() {
            return Err(Error::Internal(format!("write of {} bytes into a {}-byte CUDA tensor", bytes.len(), t.bytes())));
        }
        if !bytes.is_empty() {
            self.stream.memcpy_htod(bytes, &mut t.buf).map_err(|e| driver("copying to the GPU", e))?;
        }
        Ok(())
    }

    /// The tensor's bytes, after everything queued before has run.
    pub(super) fn read_bytes(&mut self, t: &CudaTensor) -> Result<Vec<u8>> {
        self.end_span()?;
        let mut out = vec![0u8; t.bytes()];
        if !out.is_empty() {
            self.stream.memcpy_dtoh(&t.buf.slice(..t.bytes()), &mut out).map_err(|e| driver("copying from the GPU", e))?;
        }
        self.stream.synchronize().map_err(|e| driver("waiting for the GPU", e))?;
        Ok(out)
    }

    fn zero(&mut self, t: &mut CudaTensor) -> Result<()> {
        self.stream.memset_zeros(&mut t.buf).map_err(|e| driver("zeroing GPU memory", e))
    }
}

impl CoreOps for CudaBackend {
    fn zeros(&mut self, shape: Shape, dtype: DType, cat: MemCategory) -> Result<CudaTensor> {
        let mut t = self.alloc(shape, dtype, cat)?;
        self.zero(&mut t)?;
        Ok(t)
    }

    fn upload_f32(&mut self, data: &[f32], shape: Shape, cat: MemCategory) -> Result<CudaTensor> {
        checks::data_len("upload", shape, data.len())?;
        self.upload_bytes(bytemuck::cast_slice(data), shape, DType::F32, cat)
    }

    fn upload_u32(&mut self, data: &[u32], shape: Shape, cat: MemCategory) -> Result<CudaTensor> {
        checks::data_len("upload", shape, data.len())?;
        self.upload_bytes(bytemuck::cast_slice(data), shape, DType::U32, cat)
    }

    fn write_f32(&mut self, t: &mut CudaTensor, data: &[f32]) -> Result<()> {
        checks::data_len("write", t.shape(), data.len())?;
        if t.dtype().is_16bit() {
            let bits = float16::encode(t.dtype(), data);
            return self.write_bytes(t, bytemuck::cast_slice(&bits));
        }
        checks::f32("write", t)?;
        self.write_bytes(t, bytemuck::cast_slice(data))
    }

    fn write_u32(&mut self, t: &mut CudaTensor, data: &[u32]) -> Result<()> {
        checks::data_len("write", t.shape(), data.len())?;
        checks::dtype("write", t, DType::U32)?;
        self.write_bytes(t, bytemuck::cast_slice(data))
    }

    fn read_f32(&mut self, t: &CudaTensor) -> Result<Vec<f32>> {
        if t.dtype().is_16bit() {
            let bits: Vec<u16> = bytemuck::pod_collect_to_vec(&self.read_bytes(t)?);
            return Ok(float16::decode(t.dtype(), &bits));
        }
        checks::f32("read", t)?;
        Ok(bytemuck::pod_collect_to_vec(&self.read_bytes(t)?))
    }

    fn read_u32(&mut self, t: &CudaTensor) -> Result<Vec<u32>> {
        checks::dtype("read", t, DType::U32)?;
        Ok(bytemuck::pod_collect_to_vec(&self.read_bytes(t)?))
    }

    /// One read per tensor; each copy waits only for work queued before it (one stream).
    fn read_many(&mut self, ts: &[&CudaTensor]) -> Result<Vec<HostData>> {
        for t in ts {
            checks::not_quant("read_many", *t)?;
        }
        ts.iter()
            .map(|t| if t.dtype() == DType::U32 { self.read_u32(t).map(HostData::U32) } else { self.read_f32(t).map(HostData::F32) })
            .collect()
    }

    fn matmul(&mut self, a: &CudaTensor, b: &CudaTensor, c: &mut CudaTensor, ta: bool, tb: bool, acc: bool) -> Result<()> {
        let (m, n, k) = checks::matmul(a, b, c, ta, tb)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        self.mark_start()?;
        if k == 0 {
            return if acc { Ok(()) } else { self.zero(c) };
        }
        self.blas.sgemm(a, b, c, (m, n, k), ta, tb, acc)
    }

    fn bias_add(&mut self, y: &mut CudaTensor, bias: &CudaTensor) -> Result<()> {
        checks::bias(y, bias)?;
        let (n, cols) = (y.numel_u64(), u32_of(y.shape()[1], "columns")?);
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::BiasAdd, grid(n), &mut y.buf, &bias.buf, &n, &cols)
    }

    fn relu(&mut self, x: &mut CudaTensor) -> Result<()> {
        checks::f32("relu", x)?;
        let n = x.numel_u64();
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::Relu, grid(n), &mut x.buf, &n)
    }

    fn relu_backward(&mut self, grad: &mut CudaTensor, act: &CudaTensor) -> Result<()> {
        checks::same_shape("relu_backward", grad, act)?;
        checks::f32("relu_backward", grad)?;
        let n = grad.numel_u64();
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::ReluBackward, grid(n), &mut grad.buf, &act.buf, &n)
    }

    fn softmax_xent(
        &mut self,
        logits: &CudaTensor,
        labels: &CudaTensor,
        loss_rows: &mut CudaTensor,
        grad: Option<&mut CudaTensor>,
        grad_scale: f32,
    ) -> Result<()> {
        checks::labels("softmax_xent", logits, labels)?;
        let [rows, cols] = logits.shape();
        checks::vector_out("softmax_xent", loss_rows, rows, DType::F32)?;
        if let Some(g) = &grad {
            checks::same_shape("softmax_xent", *g, logits)?;
        }
        let (r, c) = (u32_of(rows, "rows")?, u32_of(cols, "columns")?);
        if rows == 0 {
            return Ok(());
        }
        let cfg = grid(rows as u64);
        match grad {
            Some(g) => {
                launch!(self, Kernel::SoftmaxXent, cfg, &logits.buf, &labels.buf, &mut loss_rows.buf, &mut g.buf, &r, &c, &grad_scale)
            }
            None => {
                let null = 0u64; // a null `float* grad`: the kernel skips the gradient
                launch!(self, Kernel::SoftmaxXent, cfg, &logits.buf, &labels.buf, &mut loss_rows.buf, &null, &r, &c, &grad_scale)
            }
        }
    }

    fn sum_cols(&mut self, x: &CudaTensor, out: &mut CudaTensor) -> Result<()> {
        checks::vector_out("sum_cols", out, x.shape()[1], DType::F32)?;
        if x.dtype().is_16bit() {
            return self.sum_cols16(x, out);
        }
        checks::f32("sum_cols", x)?;
        let [rows, cols] = x.shape();
        let (r, c) = (u32_of(rows, "rows")?, u32_of(cols, "columns")?);
        if cols == 0 {
            return Ok(());
        }
        launch!(self, Kernel::SumCols, grid(cols as u64), &x.buf, &mut out.buf, &r, &c)
    }

    fn sum_rows(&mut self, x: &CudaTensor, out: &mut CudaTensor) -> Result<()> {
        checks::f32("sum_rows", x)?;
        checks::vector_out("sum_rows", out, x.shape()[0], DType::F32)?;
        let [rows, cols] = x.shape();
        let (r, c) = (u32_of(rows, "rows")?, u32_of(cols, "columns")?);
        if rows == 0 {
            return Ok(());
        }
        launch!(self, Kernel::SumRows, grid(rows as u64), &x.buf, &mut out.buf, &r, &c)
    }

    fn accumulate_sum(&mut self, x: &CudaTensor, acc: &mut CudaTensor, index: usize) -> Result<()> {
        checks::f32("accumulate_sum", x)?;
        checks::acc_index("accumulate_sum", acc, index, DType::F32)?;
        let (n, i) = (x.numel_u64(), u32_of(index, "index")?);
        launch!(self, Kernel::AccumulateSum, one_block(), &x.buf, &mut acc.buf, &n, &i)
    }

    fn argmax_rows(&mut self, x: &CudaTensor, out: &mut CudaTensor) -> Result<()> {
        checks::f32("argmax_rows", x)?;
        checks::nonempty_rows("argmax_rows", x)?;
        checks::vector_out("argmax_rows", out, x.shape()[0], DType::U32)?;
        let [rows, cols] = x.shape();
        let (r, c) = (u32_of(rows, "rows")?, u32_of(cols, "columns")?);
        if rows == 0 {
            return Ok(());
        }
        launch!(self, Kernel::ArgmaxRows, grid(rows as u64), &x.buf, &mut out.buf, &r, &c)
    }

    fn count_correct(&mut self, logits: &CudaTensor, labels: &CudaTensor, acc: &mut CudaTensor, index: usize) -> Result<()> {
        checks::labels("count_correct", logits, labels)?;
        checks::acc_index("count_correct", acc, index, DType::U32)?;
        let [rows, cols] = logits.shape();
        let (r, c, i) = (u32_of(rows, "rows")?, u32_of(cols, "columns")?, u32_of(index, "index")?);
        launch!(self, Kernel::CountCorrect, one_block(), &logits.buf, &labels.buf, &mut acc.buf, &r, &c, &i)
    }

    fn sgd_step(&mut self, p: &mut CudaTensor, g: &CudaTensor, v: &mut CudaTensor, hp: Sgd) -> Result<()> {
        checks::same_shape("sgd_step", p, g)?;
        checks::same_shape("sgd_step", p, v)?;
        checks::f32("sgd_step", p)?;
        let n = p.numel_u64();
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::SgdStep, grid(n), &mut p.buf, &g.buf, &mut v.buf, &n, &hp.lr, &hp.momentum, &hp.weight_decay)
    }

    fn adamw_step(
        &mut self,
        p: &mut CudaTensor,
        g: &CudaTensor,
        m: &mut CudaTensor,
        v: &mut CudaTensor,
        hp: AdamW,
        step: u32,
    ) -> Result<()> {
        checks::same_shape("adamw_step", p, g)?;
        checks::same_shape("adamw_step", p, m)?;
        checks::same_shape("adamw_step", p, v)?;
        checks::f32("adamw_step", p)?;
        let n = p.numel_u64();
        if n == 0 {
            return Ok(());
        }
        let f = hp.factors(step);
        launch!(
            self,
            Kernel::AdamwStep,
            grid(n),
            &mut p.buf,
            &g.buf,
            &mut m.buf,
            &mut v.buf,
            &n,
            &hp.beta1,
            &hp.beta2,
            &hp.eps,
            &f.decay,
            &f.step_size,
            &f.bias2_sqrt
        )
    }

    fn fill(&mut self, t: &mut CudaTensor, value: f32) -> Result<()> {
        checks::not_quant("fill", t)?;
        let n = t.numel_u64();
        if n == 0 {
            return Ok(());
        }
        match t.dtype() {
            DType::F16 | DType::BF16 => {
                let bits = float16::round_bits(t.dtype(), value);
                launch!(self, Kernel::FillU16, grid(n), &mut t.buf, &n, &bits)
            }
            dt => {
                let bits = if dt == DType::U32 { value as u32 } else { value.to_bits() };
                launch!(self, Kernel::FillU32, grid(n), &mut t.buf, &n, &bits)
            }
        }
    }

    fn scale(&mut self, t: &mut CudaTensor, alpha: f32) -> Result<()> {
        checks::f32("scale", t)?;
        let n = t.numel_u64();
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::Scale, grid(n), &mut t.buf, &n, &alpha)
    }

    fn add_to(&mut self, x: &CudaTensor, acc: &mut CudaTensor) -> Result<()> {
        checks::same_shape("add_to", x, acc)?;
        checks::f32("add_to", x)?;
        let n = x.numel_u64();
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::AddTo, grid(n), &mut acc.buf, &x.buf, &n)
    }

    fn copy(&mut self, src: &CudaTensor, dst: &mut CudaTensor) -> Result<()> {
        checks::same_shape("copy", src, dst)?;
        if src.bytes() == 0 {
            return Ok(());
        }
        self.mark_start()?;
        self.stream.memcpy_dtod(&src.buf, &mut dst.buf).map_err(|e| driver("copying on the GPU", e))
    }

    /// Compiles (or loads from the disk cache) every kernel, so timed work never pays for NVRTC.
    fn prepare(&mut self) -> Result<()> {
        for k in Kernel::ALL {
            self.kernels.function(&self.ctx, k)?;
        }
        Ok(())
    }

    /// Launches are queued as they are made; flushing only closes the step's busy-time span.
    fn flush(&mut self) -> Result<()> {
        self.end_span()
    }

    fn sync(&mut self) -> Result<()> {
        self.end_span()?;
        self.stream.synchronize().map_err(|e| driver("waiting for the GPU", e))
    }
}
