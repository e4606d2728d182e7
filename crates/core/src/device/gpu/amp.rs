//! Mixed-precision ops on the GPU: 16-bit tensors are packed two per 32-bit word (see
//! `shaders/float16_*.wgsl`); FP16 kernels use WGSL's f16 and need SHADER_F16, BF16 kernels are
//! plain u32 + f32 and run everywhere.

use super::kernels::Kernel;
use super::tuning::Matmul16Variant;
use super::{GpuBackend, GpuTensor, Spare, u32_len};
use crate::error::Result;
use crate::tensor::scaler::{AmpOptimizer, ScalerRule};
use crate::tensor::{DType, Epilogue, MemCategory, TensorMeta, checks, float16};

pub fn unavailable(gpu: &GpuBackend, dtype: DType) -> Option<String> {
    match dtype {
        DType::BF16 => None,
        DType::F16 if gpu.summary.features.iter().any(|f| f == "SHADER_F16") => None,
        DType::F16 => Some(fp16_refusal(&gpu.summary.name)),
        _ => Some(format!("{} is not a 16-bit type", dtype.name())),
    }
}

/// The one sentence the lab, the CLI and the report give when an adapter cannot run fp16 (WGSL's
/// f16 needs SHADER_F16; gpulab never falls back to f32 behind the learner's back).
pub fn fp16_refusal(adapter: &str) -> String {
    format!("fp16 needs SHADER_F16, which {adapter} does not offer; bf16 and fp32 run")
}

pub(super) fn ensure_available(gpu: &GpuBackend, op: &'static str, dtype: DType) -> Result<()> {
    match unavailable(gpu, dtype) {
        None => Ok(()),
        Some(why) => Err(gpu.beyond_limits(op, why)),
    }
}

/// Host values rounded to `dt` and packed two per word, as the kernels store them.
pub fn pack_words(dt: DType, data: &[f32]) -> Vec<u32> {
    data.chunks(2)
        .map(|p| float16::round_bits(dt, p[0]) as u32 | (p.get(1).map_or(0, |&v| float16::round_bits(dt, v)) as u32) << 16)
        .collect()
}

pub fn unpack_words(dt: DType, words: &[u32], numel: usize) -> Vec<f32> {
    words.iter().flat_map(|w| [*w as u16, (*w >> 16) as u16]).take(numel).map(|b| float16::widen(dt, b)).collect()
}

pub fn cast(gpu: &mut GpuBackend, x: &GpuTensor, out: &mut GpuTensor, stats: Option<&mut GpuTensor>) -> Result<()> {
    let dt = checks::cast(x, out, stats.as_deref())?;
    ensure_available(gpu, "cast", dt)?;
    let n = u32_len(x.numel(), "cast")?;
    if x.dtype == DType::F32 {
        let count = stats.is_some() as u32;
        let s = stats.map(|s| s.buffer().clone()).unwrap_or_else(|| gpu.spare(Spare::Stats));
        let g = gpu.grid(out.words());
        gpu.run_as(dt, Kernel::CastTo16, 0, &[n, 0, count, 0], &[(1, x.buffer()), (4, out.buffer()), (5, &s)], g)
    } else {
        let g = gpu.grid(x.numel());
        gpu.run_as(dt, Kernel::CastToF32, 0, &[n, 0, 0, 0], &[(3, x.buffer()), (2, out.buffer())], g)
    }
}

pub fn sum_cols16(gpu: &mut GpuBackend, x: &GpuTensor, out: &mut GpuTensor) -> Result<()> {
    ensure_available(gpu, "sum_cols", x.dtype)?;
    let [r, c] = x.shape;
    // Long and narrow (a convolution's bias gradient over batch × height × width): split the
    // rows as core.rs does for f32, 64 columns × a slice of rows per workgroup.
    let split = if gpu.pipelines.wg() >= 64 { super::core::split_k(c.div_ceil(64), r) } else { 1 };
    if split > 1 {
        let len = r.div_ceil(split);
        let split = r.div_ceil(len);
        let part = gpu.alloc([split, c], DType::F32, MemCategory::Activations)?;
        let params = [u32_len(r, "sum_cols")?, u32_len(c, "sum_cols")?, 0, len as u32];
        let groups = (c.div_ceil(64) as u32, split as u32);
        gpu.run_as(x.dtype, Kernel::SumCols16Part, 0, &params, &[(7, x.buffer()), (6, part.buffer())], groups)?;
        return gpu.sum_slices(&part, out, false);
    }
    let g = gpu.grid(c);
    gpu.run_as(
        x.dtype,
        Kernel::SumCols16,
        0,
        &[u32_len(r, "sum_cols")?, u32_len(c, "sum_cols")?, 0, 0],
        &[(7, x.buffer()), (6, out.buffer())],
        g,
    )
}

#[allow(clippy::too_many_arguments)]
pub fn matmul16(
    gpu: &mut GpuBackend,
    a: &GpuTensor,
    b: &GpuTensor,
    c: &mut GpuTensor,
    ta: bool,
    tb: bool,
    epi: Epilogue<'_, GpuTensor>,
    stats: Option<&mut GpuTensor>,
) -> Result<()> {
    let (m, n, k) = checks::matmul16(a, b, c, ta, tb, &epi, stats.as_deref())?;
    let dt = a.dtype;
    ensure_available(gpu, "matmul16", dt)?;
    u32_len(m * n, "matmul16")?;
    // The register-blocked and cooperative-matrix kernels store whole words of a 16-bit C, so
    // they need N even; otherwise the plain kernel runs.
    let chosen = gpu.matmul16_choice(dt)?.get(m, n, k);
    let whole_words = c.dtype == DType::F32 || n % 2 == 0;
    if chosen == Matmul16Variant::Coop && !gpu.matmul16_variants(dt).contains(&chosen) {
        // Only `set_matmul16_variant` can get here (choose16 never picks what cannot run).
        return Err(gpu.beyond_limits("matmul16", format!("the cooperative-matrix GEMM runs f16 only, on a device with EXPERIMENTAL_COOPERATIVE_MATRIX (16×16×16 f16/f32); this is {} on {}", dt.name(), gpu.summary.name)));
    }
    let coop = chosen == Matmul16Variant::Coop && whole_words;
    let regblock = chosen == Matmul16Variant::RegBlock && whole_words;
    let tiled = chosen == Matmul16Variant::Tiled && whole_words;
    if ta && regblock {
        // As for f32 (core.rs): reading a transposed A is pathologically slow for a
        // register-blocked kernel on llvmpipe (28 ms for a 64×128×32 weight gradient,
        // measured), so A is transposed first in one cheap pass.
        let mut at = gpu.alloc([m, k], dt, MemCategory::Activations)?;
        transpose16(gpu, a, &mut at)?;
        return matmul16(gpu, &at, b, c, false, tb, epi, stats);
    }
    let (m32, n32, k32) = (m as u32, n as u32, k as u32);
    let spare_in = gpu.spare(Spare::Input);
    let (code, bias, act) = match epi {
        Epilogue::None => (0, spare_in.clone(), spare_in),
        Epilogue::Bias { bias, relu } => (1 + relu as u32, bias.buffer().clone(), spare_in),
        // checks::matmul16 allows a mask (and stats) only with a 16-bit output.
        Epilogue::ReluMask(act) => (3, spare_in, act.buffer().clone()),
    };
    let variant = ta as u32 | (tb as u32) << 1;
    if regblock || coop || tiled {
        // The register-blocked kernel, the tiled one (64×64 blocks) and the cooperative-matrix
        // one (shaders/matmul16_coop.wgsl, 128×32 blocks, every transpose) share their bindings
        // and parameters.
        // The tiled kernel splits a long K (a weight gradient: f32 out, no epilogue, no stats)
        // over slices when its output has too few tiles, as the f32 one does (core.rs).
        let m_tiles = m32.div_ceil(64).max(1);
        let plain_f32 = c.dtype == DType::F32 && code == 0 && stats.is_none();
        let split = if tiled && plain_f32 { super::core::split_k(m.div_ceil(64) * n.div_ceil(64), k) } else { 1 };
        let k_len = if split > 1 { k.div_ceil(split).next_multiple_of(16) } else { k.max(1) };
        let split = k.div_ceil(k_len).max(1);
        let (kernel, variant, groups) = if coop {
            (Kernel::Matmul16Coop, variant, (n32.div_ceil(32), m32.div_ceil(128)))
        } else if tiled {
            (Kernel::Matmul16Tiled, variant, (n32.div_ceil(64), m_tiles * split as u32))
        } else {
            // vec4<u32> loads (8 values) where the row length along the loaded dimension allows them.
            let va = if ta { m % 8 == 0 } else { k % 8 == 0 };
            let vb = if tb { k % 8 == 0 } else { n % 8 == 0 };
            (Kernel::Matmul16Reg, variant | (va as u32) << 2 | (vb as u32) << 3, (n32.div_ceil(64), m32.div_ceil(16)))
        };
        let max = gpu.summary.limits.max_compute_workgroups_per_dimension;
        if groups.0 > max || groups.1 > max {
            return Err(
                gpu.beyond_limits("matmul16", format!("a {m}×{n} output needs more workgroups than it allows ({max} per dimension)"))
            );
        }
        // One entry point for both outputs: the unused one and unused stats get spare buffers.
        let spare_c = gpu.spare(Spare::Output);
        let count = stats.is_some() as u32;
        let s = stats.map(|s| s.buffer().clone()).unwrap_or_else(|| gpu.spare(Spare::Stats));
        let out16 = c.dtype != DType::F32;
        let params = [m32, n32, k32, code, count, out16 as u32, k_len as u32, m_tiles];
        if split > 1 {
            // Each slice's partial product, then the slices added in order into C.
            let part = gpu.alloc([split, m * n], DType::F32, MemCategory::Activations)?;
            let bindings = [(1, a.buffer()), (2, b.buffer()), (3, &spare_c), (4, part.buffer()), (5, &bias), (6, &act), (7, &s)];
            gpu.run_as(dt, kernel, variant, &params, &bindings, groups)?;
            return gpu.sum_slices(&part, c, false);
        }
        let (c16, c32) = if out16 { (c.buffer(), &spare_c) } else { (&spare_c, c.buffer()) };
        let bindings = [(1, a.buffer()), (2, b.buffer()), (3, c16), (4, c32), (5, &bias), (6, &act), (7, &s)];
        return gpu.run_as(dt, kernel, variant, &params, &bindings, groups);
    }
    let g = gpu.grid((m * n).div_ceil(2));
    if c.dtype == DType::F32 {
        let bindings = [(1, a.buffer()), (2, b.buffer()), (4, c.buffer()), (5, &bias)];
        return gpu.run_as(dt, Kernel::Matmul16F32, variant, &[m32, n32, k32, code, 0], &bindings, g);
    }
    let count = stats.is_some() as u32;
    let s = stats.map(|s| s.buffer().clone()).unwrap_or_else(|| gpu.spare(Spare::Stats));
    let bindings = [(1, a.buffer()), (2, b.buffer()), (3, c.buffer()), (5, &bias), (6, &act), (7, &s)];
    gpu.run_as(dt, Kernel::Matmul16Out, variant, &[m32, n32, k32, code, count], &bindings, g)
}

/// dst[c, r] = src[r, c] for 16-bit matrices.
fn transpose16(gpu: &mut GpuBackend, src: &GpuTensor, dst: &mut GpuTensor) -> Result<()> {
    let [r, c] = src.shape;
    if dst.shape != [c, r] || dst.dtype != src.dtype {
        return Err(crate::error::Error::Internal(format!("transpose16 of {:?} into {:?}", src.shape, dst.shape)));
    }
    let g = gpu.grid((r * c).div_ceil(2));
    gpu.run_as(
        src.dtype,
        Kernel::Transpose16,
        0,
        &[u32_len(r * c, "transpose")?, u32_len(c, "transpose")?, 0, 0],
        &[(3, src.buffer()), (4, dst.buffer())],
        g,
    )
}

pub fn scale_by_loss_scale(gpu: &mut GpuBackend, g: &mut GpuTensor, state: &GpuTensor) -> Result<()> {
    checks::f32("scale_by_loss_scale", g)?;
    checks::scaler_state("scale_by_loss_scale", state)?;
    let n = u32_len(g.numel(), "scale_by_loss_scale")?;
    let grid = gpu.grid(g.numel());
    gpu.run(Kernel::ScaleByLossScale, 0, &[n, 0, 0, 0, 0, 0, 0, 0], &[(1, g.buffer()), (2, state.buffer())], grid)
}

pub fn unscale_check(gpu: &mut GpuBackend, g: &mut GpuTensor, state: &mut GpuTensor) -> Result<()> {
    checks::unscale_check(g, state)?;
    let n = u32_len(g.numel(), "unscale_check")?;
    let grid = gpu.grid(g.numel());
    gpu.run(Kernel::UnscaleCheck, 0, &[n, 0, 0, 0, 0, 0, 0, 0], &[(1, g.buffer()), (2, state.buffer())], grid)
}

pub fn amp_update(
    gpu: &mut GpuBackend,
    p: &mut GpuTensor,
    g: &GpuTensor,
    slots: &mut [GpuTensor],
    opt: AmpOptimizer<'_, GpuTensor>,
    state: &GpuTensor,
    w16: Option<&mut GpuTensor>,
) -> Result<()> {
    // A parameter without a 16-bit copy (a bias) runs the bf16 instance, which every adapter has.
    let dt = checks::amp_update(p, g, slots, &opt, state, w16.as_deref())?.unwrap_or(DType::BF16);
    ensure_available(gpu, "amp_update", dt)?;
    let n = u32_len(p.numel(), "amp_update")?;
    let write16 = w16.is_some() as u32;
    let out = w16.map(|w| w.buffer().clone()).unwrap_or_else(|| gpu.spare(Spare::Output));
    let (kernel, hp, table) = match opt {
        AmpOptimizer::Sgd(hp) => (Kernel::AmpSgd, [hp.lr, hp.momentum, hp.weight_decay, 0.0, 0.0, 0.0, 0.0], gpu.spare(Spare::Input)),
        AmpOptimizer::AdamW(hp, table) => (
            Kernel::AmpAdamW,
            [hp.lr, 0.0, hp.weight_decay, hp.beta1, hp.beta2, hp.eps, 1.0 - hp.lr * hp.weight_decay],
            table.buffer().clone(),
        ),
    };
    let mut params = vec![n];
    params.extend(hp.iter().map(|v| v.to_bits()));
    params.extend([write16, 0, 0, 0]);
    let (s1, s2) = match slots {
        [v] => (v.buffer().clone(), gpu.spare(Spare::Input)),
        [m, v] => (m.buffer().clone(), v.buffer().clone()),
        _ => return Err(crate::error::Error::Internal("checks::amp_update let a slot count through".into())),
    };
    let grid = gpu.grid(p.numel().div_ceil(2));
    // A pipeline's layout holds only the bindings its entry point uses: SGD reads no s2 or table.
    let mut bindings = vec![(1, p.buffer()), (2, g.buffer()), (3, &s1), (5, state.buffer()), (7, &out)];
    if kernel == Kernel::AmpAdamW {
        bindings.extend([(4, &s2), (6, &table)]);
    }
    gpu.run_as(dt, kernel, 0, &params, &bindings, grid)
}

pub fn scaler_update(gpu: &mut GpuBackend, state: &mut GpuTensor, rule: ScalerRule, log: &mut GpuTensor, slot: usize) -> Result<()> {
    checks::scaler_update(state, log, slot)?;
    let params = [
        0,
        slot as u32,
        rule.scaling as u32,
        rule.growth_interval,
        rule.growth_factor.to_bits(),
        rule.backoff_factor.to_bits(),
        rule.min_scale.to_bits(),
        0,
    ];
    gpu.run(Kernel::ScalerUpdate, 0, &params, &[(2, state.buffer()), (3, log.buffer())], (1, 1))
}
