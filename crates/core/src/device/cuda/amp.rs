//! Mixed precision on CUDA (`AmpOps`): 16-bit GEMM through cuBLAS (f16/bf16 operands, f32
//! accumulation, on the tensor cores where the GPU has them) into an f32 product, then one
//! epilogue kernel (shaders/cuda/amp.cu) that adds the bias or applies the ReLU mask and rounds
//! once to the output type — the CPU reference's order, so results match it.

use super::backend::{CudaBackend, CudaTensor, driver};
use super::core::{grid, u32_of};
use super::kernels::Kernel;
use crate::error::Result;
use cudarc::driver::LaunchConfig;

use crate::tensor::scaler::{AmpOptimizer, ScalerRule};
use crate::tensor::{AmpOps, DType, Epilogue, TensorMeta, checks};

impl AmpOps for CudaBackend {
    fn amp_unavailable(&self, dtype: DType) -> Option<String> {
        if !dtype.is_16bit() {
            return Some(format!("{} is not a 16-bit type", dtype.name()));
        }
        let (major, minor) = self.cc;
        (dtype == DType::BF16 && major < 8)
            .then(|| format!("bf16 GEMM on CUDA needs compute capability 8.0 (Ampere) or newer; this GPU has {major}.{minor}"))
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

    fn matmul16(
        &mut self,
        a: &CudaTensor,
        b: &CudaTensor,
        c: &mut CudaTensor,
        ta: bool,
        tb: bool,
        epi: Epilogue<'_, CudaTensor>,
        stats: Option<&mut CudaTensor>,
    ) -> Result<()> {
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

    fn scale_by_loss_scale(&mut self, g: &mut CudaTensor, state: &CudaTensor) -> Result<()> {
        checks::f32("scale_by_loss_scale", g)?;
        checks::scaler_state("scale_by_loss_scale", state)?;
        let n = g.numel_u64();
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::ScaleByLossScale, grid(n), &mut g.buf, &state.buf, &n)
    }

    fn unscale_check(&mut self, g: &mut CudaTensor, state: &mut CudaTensor) -> Result<()> {
        checks::unscale_check(g, state)?;
        let n = g.numel_u64();
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::UnscaleCheck, grid(n), &mut g.buf, &mut state.buf, &n)
    }

    fn amp_update(
        &mut self,
        p: &mut CudaTensor,
        g: &CudaTensor,
        slots: &mut [CudaTensor],
        opt: AmpOptimizer<'_, CudaTensor>,
        state: &CudaTensor,
        w16: Option<&mut CudaTensor>,
    ) -> Result<()> {
        let dt = checks::amp_update(p, g, slots, &opt, state, w16.as_deref())?;
        let n = p.numel_u64();
        if n == 0 {
            return Ok(());
        }
        // Slots, table and copy as raw device pointers (0 = absent), like the epilogue's optionals.
        let s1 = self.ptr(slots.first());
        let s2 = self.ptr(slots.get(1));
        let out = self.ptr(w16.as_deref());
        let bf16 = (dt == Some(DType::BF16)) as u32;
        let (adam, table, lr, momentum, wd, beta1, beta2, eps, decay) = match opt {
            AmpOptimizer::Sgd(hp) => (0u32, 0u64, hp.lr, hp.momentum, hp.weight_decay, 0.0f32, 0.0f32, 0.0f32, 1.0f32),
            AmpOptimizer::AdamW(hp, t) => {
                (1, self.ptr(Some(t)), hp.lr, 0.0, hp.weight_decay, hp.beta1, hp.beta2, hp.eps, 1.0 - hp.lr * hp.weight_decay)
            }
        };
        launch!(
            self,
            Kernel::AmpUpdate,
            grid(n),
            &mut p.buf,
            &g.buf,
            &s1,
            &s2,
            &state.buf,
            &table,
            &out,
            &n,
            &adam,
            &lr,
            &momentum,
            &wd,
            &beta1,
            &beta2,
            &eps,
            &decay,
            &bf16
        )
    }

    fn scaler_update(&mut self, state: &mut CudaTensor, rule: ScalerRule, log: &mut CudaTensor, slot: usize) -> Result<()> {
        checks::scaler_update(state, log, slot)?;
        let (slot, scaling) = (u32_of(slot, "log slot")?, rule.scaling as u32);
        let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        launch!(
            self,
            Kernel::ScalerUpdate,
            one,
            &mut state.buf,
            &mut log.buf,
            &slot,
            &scaling,
            &rule.growth_interval,
            &rule.growth_factor,
            &rule.backoff_factor,
            &rule.min_scale
        )
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
