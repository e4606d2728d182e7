//! GEMM through cuBLAS. gpulab's tensors are row-major and cuBLAS is column-major, so
//! C = op(A)·op(B) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ: the operands swap and each row-major
//! buffer is read as its column-major transpose — no copy.

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use super::backend::CudaTensor;
use crate::error::{Error, Result};

pub struct Blas {
    handle: CudaBlas,
    stream: Arc<CudaStream>,
    /// f32 GEMM on tensor cores with TF32 inputs (opt-in; see `CudaBackend::set_tf32`).
    pub tf32: bool,
}

impl Blas {
    pub fn new(stream: Arc<CudaStream>) -> Result<Self> {
        let handle =
            CudaBlas::new(stream.clone()).map_err(|e| Error::CudaUnavailable(format!("creating the cuBLAS handle failed: {e:?}")))?;
        Ok(Blas { handle, stream, tf32: std::env::var("GPULAB_CUDA_TF32").is_ok_and(|v| v == "1") })
    }

    /// c[m, n] = op(a)·op(b) (+ c when `acc`), f32 in and out; shapes already checked.
    #[allow(clippy::too_many_arguments)]
    pub fn sgemm(
        &self,
        a: &CudaTensor,
        b: &CudaTensor,
        c: &mut CudaTensor,
        (m, n, k): (usize, usize, usize),
        ta: bool,
        tb: bool,
        acc: bool,
    ) -> Result<()> {
        let compute = if self.tf32 { cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32 } else { cublasComputeType_t::CUBLAS_COMPUTE_32F };
        self.gemm_ex(a, b, &mut c.buf, (m, n, k), ta, tb, acc, cudaDataType::CUDA_R_32F, compute)
    }

    /// out[m, n] (f32) = op(a)·op(b) with a, b both f16 or both bf16, products summed in f32
    /// on the tensor cores where the GPU has them; shapes already checked.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm16(
        &self,
        a: &CudaTensor,
        b: &CudaTensor,
        out: &mut CudaSlice<u8>,
        (m, n, k): (usize, usize, usize),
        ta: bool,
        tb: bool,
        bf16: bool,
    ) -> Result<()> {
        let t = if bf16 { cudaDataType::CUDA_R_16BF } else { cudaDataType::CUDA_R_16F };
        self.gemm_ex(a, b, out, (m, n, k), ta, tb, false, t, cublasComputeType_t::CUBLAS_COMPUTE_32F)
    }

    /// The one cuBLAS call: a and b of `ab_type`, an f32 output, f32 accumulation.
    #[allow(clippy::too_many_arguments)]
    fn gemm_ex(
        &self,
        a: &CudaTensor,
        b: &CudaTensor,
        c: &mut CudaSlice<u8>,
        (m, n, k): (usize, usize, usize),
        ta: bool,
        tb: bool,
        acc: bool,
        ab_type: cudaDataType,
        compute: cublasComputeType_t,
    ) -> Result<()> {
        let int = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| Error::InvalidConfig(format!("matmul {what} = {v} exceeds cuBLAS's 32-bit limit of {}", i32::MAX)))
        };
        let (mi, ni, ki) = (int(m, "m")?, int(n, "n")?, int(k, "k")?);
        let op = |t: bool| if t { cublasOperation_t::CUBLAS_OP_T } else { cublasOperation_t::CUBLAS_OP_N };
        // Column-major view: (Cᵀ)[n, m] = op(B)ᵀ[n, k] · op(A)ᵀ[k, m]; see the module comment.
        let lda = if tb { ki } else { ni };
        let ldb = if ta { mi } else { ki };
        let (alpha, beta) = (1.0f32, if acc { 1.0f32 } else { 0.0f32 });
        // cuBLAS runs in the calling thread's current context; the backend may have been
        // opened on another thread (cudarc's safe calls bind it themselves, this raw one not).
        self.stream.context().bind_to_thread().map_err(|e| super::backend::driver("binding the CUDA context", e))?;
        let (pa, _ra) = a.buf.device_ptr(&self.stream);
        let (pb, _rb) = b.buf.device_ptr(&self.stream);
        let (pc, _rc) = c.device_ptr_mut(&self.stream);
        // SAFETY: the pointers are live device buffers of the checked shapes (a: m·k, b: k·n
        // elements of ab_type, c: m·n f32); leading dimensions follow from those shapes;
        // alpha/beta are host f32 (the handle's default pointer mode) as the compute type asks.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.handle.handle(),
                op(tb),
                op(ta),
                ni,
                mi,
                ki,
                &alpha as *const f32 as *const _,
                pb as *const _,
                ab_type,
                lda.max(1),
                pa as *const _,
                ab_type,
                ldb.max(1),
                &beta as *const f32 as *const _,
                pc as *mut _,
                cudaDataType::CUDA_R_32F,
                ni.max(1),
                compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| Error::Internal(format!("cuBLAS GEMM {m}x{n}x{k} failed: {e:?}")))
    }
}
