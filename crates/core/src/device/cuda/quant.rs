//! Int8 on CUDA (`QuantOps`): shaders/cuda/quant.cu. I8 tensors hold one byte per element; the
//! int8 GEMM stages 16×32 slabs in shared memory and multiplies four bytes at a time with
//! `__dp4a` (compute capability 6.1 and newer; kernels.rs compiles quant.cu for it), its i32 sums
//! exact and wrapping like the CPU's. `matmul_i8_dequant` is the family's unfused default
//! (`matmul_i8`, then `dequantize`, `bias_add`, `relu`), equal to the CPU's bit for bit.

use cudarc::driver::LaunchConfig;

use super::backend::{CudaBackend, CudaTensor};
use super::core::{grid, one_block, u32_of};
use super::kernels::Kernel;
use crate::error::{Error, Result};
use crate::tensor::{DType, QuantGranularity, QuantOps, TensorMeta, checks};

/// 1/127 as the host rounds it (`tensor::scale_for_absmax`).
const INV127: f32 = 1.0 / 127.0;

/// The GEMM's tile (TILE in quant.cu): a 16×16 block per 16×16 outputs.
const TILE: u32 = 16;

impl CudaBackend {
    /// q = quantize(x) with the scales already in `scales` (one, or one per column).
    fn quantize_by(&mut self, x: &CudaTensor, q: &mut CudaTensor, scales: &CudaTensor, per_channel: bool) -> Result<()> {
        let (n, cols, pc) = (x.numel_u64(), u32_of(x.shape()[1], "columns")?, per_channel as u32);
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::Quantize, grid(n), &x.buf, &scales.buf, &mut q.buf, &n, &cols, &pc)
    }
}

impl QuantOps for CudaBackend {
    fn quant_unavailable(&self) -> Option<String> {
        None
    }

    fn int8_kernel(&self) -> Option<String> {
        let (major, minor) = self.cc;
        Some(
            if (major, minor) >= (6, 1) {
                "CUDA __dp4a, 16×16 tiles"
            } else {
                "CUDA scalar i8 (no dp4a before compute capability 6.1), 16×16 tiles"
            }
            .into(),
        )
    }

    fn write_i8(&mut self, t: &mut CudaTensor, data: &[i8]) -> Result<()> {
        checks::data_len("write_i8", t.shape(), data.len())?;
        checks::dtype("write_i8", t, DType::I8)?;
        self.write_bytes(t, bytemuck::cast_slice(data))
    }

    fn read_i8(&mut self, t: &CudaTensor) -> Result<Vec<i8>> {
        checks::dtype("read_i8", t, DType::I8)?;
        Ok(bytemuck::cast_slice(&self.read_bytes(t)?).to_vec())
    }

    fn read_i32(&mut self, t: &CudaTensor) -> Result<Vec<i32>> {
        checks::dtype("read_i32", t, DType::I32)?;
        Ok(bytemuck::pod_collect_to_vec(&self.read_bytes(t)?))
    }

    fn quantize(&mut self, x: &CudaTensor, q: &mut CudaTensor, scales: &mut CudaTensor, granularity: QuantGranularity) -> Result<()> {
        checks::quantize(x, q, scales, granularity)?;
        let [rows, cols] = x.shape();
        let per_channel = granularity == QuantGranularity::PerChannel;
        if per_channel {
            let (r, c) = (u32_of(rows, "rows")?, u32_of(cols, "columns")?);
            if cols > 0 {
                launch!(self, Kernel::AbsmaxCols, grid(cols as u64), &x.buf, &mut scales.buf, &r, &c, &INV127)?;
            }
        } else {
            let n = x.numel_u64();
            launch!(self, Kernel::AbsmaxAll, one_block(), &x.buf, &mut scales.buf, &n, &INV127)?;
        }
        self.quantize_by(x, q, scales, per_channel)
    }

    fn quantize_with(&mut self, x: &CudaTensor, q: &mut CudaTensor, scales: &CudaTensor) -> Result<()> {
        let per_channel = checks::quantize_with(x, q, scales)?;
        self.quantize_by(x, q, scales, per_channel)
    }

    fn dequantize(&mut self, q: &CudaTensor, scales: &CudaTensor, out: &mut CudaTensor) -> Result<()> {
        let per_channel = checks::dequantize(q, scales, out)?;
        let (n, cols, pc) = (q.numel_u64(), u32_of(q.shape()[1], "columns")?, per_channel as u32);
        if n == 0 {
            return Ok(());
        }
        let kernel = if q.dtype() == DType::I8 { Kernel::DequantizeI8 } else { Kernel::DequantizeI32 };
        launch!(self, kernel, grid(n), &q.buf, &scales.buf, &mut out.buf, &n, &cols, &pc)
    }

    fn matmul_i8(&mut self, a: &CudaTensor, b: &CudaTensor, c: &mut CudaTensor, ta: bool, tb: bool) -> Result<()> {
        let (m, n, k) = checks::matmul_i8(a, b, c, ta, tb)?;
        let (m32, n32, k32) = (u32_of(m, "rows")?, u32_of(n, "columns")?, u32_of(k, "inner dimension")?);
        if m == 0 || n == 0 {
            return Ok(());
        }
        // gridDim.y is at most 65535 blocks.
        if m.div_ceil(TILE as usize) > 65535 {
            return Err(Error::InvalidConfig(format!(
                "matmul_i8 of {m} rows exceeds the CUDA kernel's limit of 65535 tiles of {TILE} rows"
            )));
        }
        let cfg = LaunchConfig { grid_dim: (n32.div_ceil(TILE), m32.div_ceil(TILE), 1), block_dim: (TILE, TILE, 1), shared_mem_bytes: 0 };
        let (ta, tb) = (ta as u32, tb as u32);
        launch!(self, Kernel::MatmulI8, cfg, &a.buf, &b.buf, &mut c.buf, &m32, &n32, &k32, &ta, &tb)
    }
}
