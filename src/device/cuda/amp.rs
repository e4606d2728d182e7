//! Mixed precision on CUDA (`AmpOps`): 16-bit GEMM through cuBLAS (f16/bf16 operands, f32
//! accumulation, on the tensor cores where the GPU has them) into an f32 product, then one
//! epilogue kernel (shaders/cuda/amp.cu) that adds the bias or applies the ReLU mask and rounds
//! once to the output type — the CPU reference's order, so results match it.

use super::backend::{CudaBackend, CudaTensor, driver};
use super::core::{grid, u32_of};
use super::kernels::Kernel;
use crate::error::Result;
use crate::tensor::{AmpOps, DType, Epilogue, TensorMeta, checks};

impl AmpOps for CudaBackend {
    fn amp_unavailable(&self, dtype: DType) -> Option<String> {
        if !dtype.is_16bit() {
            return Some(format!("{} is not a 16-bit type", dtype.name()));
        }
        let (major, minor) = self.cc;
        (dtype == DType::BF16 && major < 8).then(|| format!("bf16 GEMM on CUDA needs compute capability 8.0 (Ampere) or newer; this GPU has {major}.{minor}"))
    }

    fn cast(&mut self, x: &CudaTensor, out: &mut CudaTensor, stats: Option<&mut CudaTensor>) -> Result<()> {
        let dt = checks::cast(x, out, stats.as_deref())?;
        let (n, bf16) = (x.numel_u64(), (dt == DType::BF16) as u32);
        if n == 0 {
            return Ok(());
        }
        if out.dtype().is_16bit() {
            let s = self.ptr(stats.as_deref());
            launch!(self, Kernel::CastTo16, grid(n), &x.buf, &mut out.buf, &s, &n, &bf16)
        } else {
            launch!(self, Kernel::CastFrom16, grid(n), &x.buf, &mut out.buf, &n, &bf16)
        }
    }

    fn matmul16(&mut self, a: &CudaTensor, b: &CudaTensor, c: &mut CudaTensor, ta: bool, tb: bool, epi: Epilogue<'_, CudaTensor>, stats: Option<&mut CudaTensor>) -> Result<()> {
        let (m, n, k) = checks::matmul16(a, b, c, ta, tb, &epi, stats.as_deref())?;
        if let Some(why) = self.amp_unavailable(a.dtype()) {
            return Err(crate::tensor::ops::unsupported(self, "matmul16", &why));
        }
        let bf16 = a.dtype() == DType::BF16;
        if m == 0 || n == 0 {
            return Ok(());
        }
        self.mark_start()?;
        // Fast path: a plain f32 product goes straight into c.
        if matches!(epi, Epilogue::None) && c.dtype() == DType::F32 && k > 0 {
            return self.blas.gemm16(a, b, &mut c.buf, (m, n, k), ta, tb, bf16);
        }
        let count = (m * n) as u64;
        // The f32 product, transient like the CPU's (not a tensor, so not in the ledger).
        // SAFETY: written whole by the GEMM (or zeroed when k = 0) before the epilogue reads it.
        let mut acc = unsafe { self.stream.alloc::<u8>(m * n * 4) }.map_err(|e| driver("allocating the matmul16 product", e))?;
        if k == 0 {
            self.stream.memset_zeros(&mut acc).map_err(|e| driver("zeroing GPU memory", e))?;
        } else {
            self.blas.gemm16(a, b, &mut acc, (m, n, k), ta, tb, bf16)?;
        }
        let (bias, relu, mask) = match epi {
            Epilogue::None => (None, false, None),
            Epilogue::Bias { bias, relu } => (Some(bias), relu, None),
            Epilogue::ReluMask(act) => (None, false, Some(act)),
        };
        let (bias, relu, mask) = (self.ptr(bias), relu as u32, self.ptr(mask));
        let (out32, out16) = if c.dtype() == DType::F32 { (self.ptr(Some(&*c)), 0) } else { (0, self.ptr(Some(&*c))) };
        let (s, cols, bf) = (self.ptr(stats.as_deref()), u32_of(n, "columns")?, bf16 as u32);
        launch!(self, Kernel::Epilogue16, grid(count), &acc, &bias, &relu, &mask, &out32, &out16, &s, &count, &cols, &bf)
    }

    fn unscale_check(&mut self, g: &mut CudaTensor, inv_scale: f32, found: &mut CudaTensor) -> Result<()> {
        checks::unscale_check(g, found)?;
        let n = g.numel_u64();
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::UnscaleCheck, grid(n), &mut g.buf, &inv_scale, &mut found.buf, &n)
    }
}

impl CudaBackend {
    /// `sum_cols` of a 16-bit input (bias gradients of 16-bit activation gradients).
    pub(super) fn sum_cols16(&mut self, x: &CudaTensor, out: &mut CudaTensor) -> Result<()> {
        let [rows, cols] = x.shape();
        let (r, c, bf) = (u32_of(rows, "rows")?, u32_of(cols, "columns")?, (x.dtype() == DType::BF16) as u32);
        if cols == 0 {
            return Ok(());
        }
        launch!(self, Kernel::SumCols16, grid(cols as u64), &x.buf, &mut out.buf, &r, &c, &bf)
    }
}
