//! Int8 quantization on the GPU (`QuantOps`): i8 tensors packed four per 32-bit word
//! (shaders/quant.wgsl), and the int8 GEMM with `dot4I8Packed` (shaders/matmul_i8.wgsl), whose
//! i32 results equal the CPU's exactly, as do its f32 results with the dequantize epilogue fused.

use super::kernels::Kernel;
use super::{GpuBackend, GpuTensor, u32_len};
use crate::error::Result;
use crate::tensor::{DType, Dequant, QuantGranularity, QuantOps, TensorMeta, checks};

/// Host i8 values packed four per word (element e in byte e % 4 of word e / 4).
pub fn pack_i8(data: &[i8]) -> Vec<u32> {
    data.chunks(4).map(|c| c.iter().enumerate().fold(0u32, |w, (t, &v)| w | ((v as u8 as u32) << (8 * t)))).collect()
}

pub fn unpack_i8(words: &[u32], numel: usize) -> Vec<i8> {
    words.iter().flat_map(|w| w.to_le_bytes()).take(numel).map(|b| b as i8).collect()
}

/// The bits of 1/127 as the host rounds it (`tensor::scale_for_absmax`).
fn inv127_bits() -> u32 {
    (1.0f32 / 127.0).to_bits()
}

impl QuantOps for GpuBackend {
    fn quant_unavailable(&self) -> Option<String> {
        None
    }

    fn int8_kernel(&self) -> Option<String> {
        Some("WGSL dot4I8Packed, 4×4 outputs per invocation".into())
    }

    fn write_i8(&mut self, t: &mut GpuTensor, data: &[i8]) -> Result<()> {
        checks::data_len("write_i8", t.shape, data.len())?;
        checks::dtype("write_i8", t, DType::I8)?;
        let words = pack_i8(data);
        self.write_bytes(t, bytemuck::cast_slice(&words))
    }

    fn read_i8(&mut self, t: &GpuTensor) -> Result<Vec<i8>> {
        checks::dtype("read_i8", t, DType::I8)?;
        let words: Vec<u32> = self.read_bytes(t)?;
        Ok(unpack_i8(&words, t.numel()))
    }

    fn read_i32(&mut self, t: &GpuTensor) -> Result<Vec<i32>> {
        checks::dtype("read_i32", t, DType::I32)?;
        self.read_bytes(t)
    }

    fn quantize(&mut self, x: &GpuTensor, q: &mut GpuTensor, scales: &mut GpuTensor, granularity: QuantGranularity) -> Result<()> {
        checks::quantize(x, q, scales, granularity)?;
        let [rows, cols] = x.shape;
        let n = u32_len(x.numel(), "quantize")?;
        let (r32, c32) = (rows as u32, cols as u32);
        let per_channel = granularity == QuantGranularity::PerChannel;
        let params = [n, r32, c32, per_channel as u32, inv127_bits()];
        // A long absmax (a per-tensor scale over a whole activation or weight; a column over
        // many rows) is split so it fills the GPU, as the column sums are (core.rs `split_k`).
        let (width, len) = if per_channel { (cols, rows) } else { (1, x.numel()) };
        let split = if self.pipelines.wg() >= 64 { super::core::split_k(width.div_ceil(64), len) } else { 1 };
        if split > 1 {
            let slice = len.div_ceil(split);
            let split = len.div_ceil(slice);
            let part = self.alloc([split, width], DType::F32, crate::tensor::MemCategory::Activations)?;
            let p = [n, r32, c32, per_channel as u32, inv127_bits(), slice as u32, split as u32];
            let groups = if per_channel { (cols.div_ceil(64) as u32, split as u32) } else { (1, split as u32) };
            self.run(Kernel::AbsmaxPart, 0, &p, &[(1, x.buffer()), (7, part.buffer())], groups)?;
            let g = self.grid(width);
            self.run(Kernel::AbsmaxFinish, 0, &p, &[(4, part.buffer()), (3, scales.buffer())], g)?;
        } else if per_channel {
            let g = self.grid(cols);
            self.run(Kernel::AbsmaxCols, 0, &params, &[(1, x.buffer()), (3, scales.buffer())], g)?;
        } else {
            self.run(Kernel::AbsmaxAll, 0, &params, &[(1, x.buffer()), (3, scales.buffer())], (1, 1))?;
        }
        let g = self.grid(q.words());
        self.run(Kernel::Quantize, 0, &params, &[(1, x.buffer()), (2, q.buffer()), (4, scales.buffer())], g)
    }

    fn quantize_with(&mut self, x: &GpuTensor, q: &mut GpuTensor, scales: &GpuTensor) -> Result<()> {
        let per_channel = checks::quantize_with(x, q, scales)?;
        let n = u32_len(x.numel(), "quantize_with")?;
        let params = [n, x.shape[0] as u32, x.shape[1] as u32, per_channel as u32, inv127_bits()];
        let g = self.grid(q.words());
        self.run(Kernel::Quantize, 0, &params, &[(1, x.buffer()), (2, q.buffer()), (4, scales.buffer())], g)
    }

    fn dequantize(&mut self, q: &GpuTensor, scales: &GpuTensor, out: &mut GpuTensor) -> Result<()> {
        let per_channel = checks::dequantize(q, scales, out)?;
        let n = u32_len(q.numel(), "dequantize")?;
        let params = [n, q.shape[0] as u32, q.shape[1] as u32, per_channel as u32, inv127_bits()];
        let g = self.grid(q.numel());
        let (kernel, slot) = if q.dtype == DType::I8 { (Kernel::DequantizeI8, 5) } else { (Kernel::DequantizeI32, 6) };
        self.run(kernel, 0, &params, &[(slot, q.buffer()), (4, scales.buffer()), (7, out.buffer())], g)
    }

    fn matmul_i8(&mut self, a: &GpuTensor, b: &GpuTensor, c: &mut GpuTensor, ta: bool, tb: bool) -> Result<()> {
        let (m, n, k) = checks::matmul_i8(a, b, c, ta, tb)?;
        let (dims, groups, variant) = self.i8_launch("matmul_i8", (m, n, k), ta, tb)?;
        self.run_as(
            DType::I8,
            Kernel::MatmulI8,
            variant,
            &[dims[0], dims[1], dims[2], 0, 0],
            &[(1, a.buffer()), (2, b.buffer()), (3, c.buffer())],
            groups,
        )
    }

    /// The same kernel's `main_dequant` entry: each sum finished into f32 in registers.
    fn matmul_i8_dequant(
        &mut self,
        a: &GpuTensor,
        b: &GpuTensor,
        out: &mut GpuTensor,
        ta: bool,
        tb: bool,
        epi: Dequant<'_, GpuTensor>,
    ) -> Result<()> {
        let (mnk, per_column) = checks::matmul_i8_dequant(a, b, out, ta, tb, &epi)?;
        let (dims, groups, variant) = self.i8_launch("matmul_i8_dequant", mnk, ta, tb)?;
        let flags = per_column as u32 | (epi.bias.is_some() as u32) << 1 | (epi.relu as u32) << 2 | (epi.act_scale.is_some() as u32) << 3;
        // Without a bias (an activation scale) the kernel never reads binding 5 (7); the
        // scales stand in for it.
        let bias = epi.bias.unwrap_or(epi.scales);
        let act = epi.act_scale.unwrap_or(epi.scales);
        let bindings =
            [(1, a.buffer()), (2, b.buffer()), (4, epi.scales.buffer()), (5, bias.buffer()), (6, out.buffer()), (7, act.buffer())];
        self.run_as(DType::I8, Kernel::MatmulI8Dequant, variant, &[dims[0], dims[1], dims[2], flags, 0], &bindings, groups)
    }
}

impl GpuBackend {
    /// The int8 GEMM's launch for an m×n×k product: the dimensions as u32, the workgroups (4×4
    /// outputs per invocation, 8×8 invocations per workgroup) and the variant bits (transposes,
    /// word-aligned rows), or why the adapter cannot run it.
    fn i8_launch(&self, op: &'static str, (m, n, k): (usize, usize, usize), ta: bool, tb: bool) -> Result<([u32; 3], (u32, u32), u32)> {
        let (m32, n32, k32) = (u32_len(m, op)?, u32_len(n, op)?, u32_len(k, op)?);
        u32_len(m * n, op)?;
        let groups = (n32.div_ceil(32), m32.div_ceil(32));
        let max = self.summary.limits.max_compute_workgroups_per_dimension;
        if groups.0 > max || groups.1 > max {
            return Err(self.beyond_limits(op, format!("a {m}×{n} output needs more workgroups than it allows ({max} per dimension)")));
        }
        let va = !ta && k % 4 == 0;
        let vb = !tb && n % 4 == 0;
        Ok(([m32, n32, k32], groups, ta as u32 | (tb as u32) << 1 | (va as u32) << 2 | (vb as u32) << 3))
    }
}
