//! Mixed-precision ops on the CPU. bf16 operands are multiplied by `vdpbf16ps` where the CPU
//! has AVX-512 BF16 (gemm_bf16.rs); otherwise, and always for f16 (no AVX-512 FP16 kernel),
//! 16-bit operands are widened to f32 (exactly) and multiplied by the f32 GEMM. Results are
//! rounded to the output type with the same round-to-nearest-even as the GPU kernels.

use super::gemm_bf16::{Bf16Path, RowStore, gemm_bf16_into, store_rows};
use super::gemm_bf16_narrow;
use rayon::prelude::*;

use super::{CpuTensor, Storage, ops, optim};
use crate::error::{Error, Result};
use crate::tensor::scaler::{self, AmpOptimizer, ScalerRule, word};
use crate::tensor::{DType, Epilogue, TensorMeta, checks, float16};

pub fn unavailable(dtype: DType) -> Option<String> {
    (!dtype.is_16bit()).then(|| format!("{} is not a 16-bit type", dtype.name()))
}

/// Elements per rayon task in the conversions.
const CHUNK: usize = 1 << 14;

fn widened(t: &CpuTensor) -> Vec<f32> {
    match &t.data {
        Storage::Bits16(bits, dt) => {
            let mut out = vec![0.0; bits.len()];
            widen_into(*dt, bits, &mut out);
            out
        }
        _ => t.f32().to_vec(),
    }
}

/// Adds to stats that `checks` already validated.
fn stats_add(stats: Option<&mut CpuTensor>, nonzero: u64, flushed: u64) -> Result<()> {
    if let Some(s) = stats {
        let v = s.u32_mut();
        v[0] = v[0].wrapping_add(nonzero as u32);
        v[1] = v[1].wrapping_add(flushed as u32);
    }
    Ok(())
}

/// Rounds `src` into 16-bit `out`, counting nonzero values and those that became zero; rayon
/// over chunks of large tensors (the per-step cast of the master weights is one).
fn round_into(src: &[f32], out: &mut [u16], dt: DType) -> (u64, u64) {
    let chunk = |(o, s): (&mut [u16], &[f32])| {
        float16::encode_into(dt, s, o);
        count_flushed(s, o)
    };
    if src.len() >= ops::PAR_THRESHOLD {
        out.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).map(chunk).reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    } else {
        chunk((out, src))
    }
}

/// (nonzero values of `src`, those whose 16-bit rounding `out` is ±0): with AVX-512 16 at a
/// time (the scalar fold was a third of the cast of a CNN's convolution gradients).
fn count_flushed(src: &[f32], out: &[u16]) -> (u64, u64) {
    let scalar = |s: &[f32], o: &[u16]| {
        s.iter()
            .zip(o)
            .fold((0u64, 0u64), |(nz, fl), (&v, &b)| (nz + (v != 0.0) as u64, fl + (v != 0.0 && float16::is_zero_bits(b)) as u64))
    };
    #[cfg(target_arch = "x86_64")]
    if super::gemm_bf16_narrow::available() {
        let whole = src.len() / 16 * 16;
        // SAFETY: the CPU has AVX-512F/BW/VL; both slices hold `whole` values.
        let (nz, fl) = unsafe { count_flushed_avx512(&src[..whole], &out[..whole]) };
        let (tn, tf) = scalar(&src[whole..], &out[whole..]);
        return (nz + tn, fl + tf);
    }
    scalar(src, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn count_flushed_avx512(src: &[f32], out: &[u16]) -> (u64, u64) {
    use std::arch::x86_64::*;
    let (mut nz, mut fl) = (0u64, 0u64);
    for (s, o) in src.chunks_exact(16).zip(out.chunks_exact(16)) {
        // SAFETY: each chunk holds 16 values.
        let (v, b) = unsafe { (_mm512_loadu_ps(s.as_ptr()), _mm256_loadu_si256(o.as_ptr() as *const __m256i)) };
        // NaN compares unequal to zero, as `v != 0.0` does.
        let nonzero = _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(v, _mm512_setzero_ps());
        let zero16 = _mm256_testn_epi16_mask(b, _mm256_set1_epi16(0x7fff));
        nz += nonzero.count_ones() as u64;
        fl += (nonzero & zero16).count_ones() as u64;
    }
    (nz, fl)
}

/// Rounds `src` into 16-bit `dst` (no counting), on rayon from a batch-512 MLP input's size
/// (a batch of 128's was slower split: the fork cost more than half its rounding).
pub(super) fn encode_par(dt: DType, src: &[f32], dst: &mut [u16]) {
    if src.len() >= 1 << 18 {
        dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| float16::encode_into(dt, s, d));
    } else {
        float16::encode_into(dt, src, dst);
    }
}

/// Widens 16-bit `src` into `dst`, on rayon for large tensors.
fn widen_into(dt: DType, src: &[u16], dst: &mut [f32]) {
    if src.len() >= ops::PAR_THRESHOLD {
        dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| float16::decode_into(dt, s, d));
    } else {
        float16::decode_into(dt, src, dst);
    }
}

pub fn cast(x: &CpuTensor, out: &mut CpuTensor, stats: Option<&mut CpuTensor>) -> Result<()> {
    checks::cast(x, out, stats.as_deref())?;
    match (&x.data, &mut out.data) {
        (Storage::F32(src), Storage::Bits16(dst, dt)) => {
            let (nz, fl) = round_into(src, dst, *dt);
            stats_add(stats, nz, fl)
        }
        (Storage::Bits16(src, dt), Storage::F32(dst)) => {
            widen_into(*dt, src, dst);
            Ok(())
        }
        _ => Err(Error::Internal(format!("checks::cast let {} → {} through", x.dtype().name(), out.dtype().name()))),
    }
}

#[allow(clippy::too_many_arguments)]
pub fn matmul16(
    a: &CpuTensor,
    b: &CpuTensor,
    c: &mut CpuTensor,
    ta: bool,
    tb: bool,
    epi: Epilogue<'_, CpuTensor>,
    stats: Option<&mut CpuTensor>,
    threads: usize,
    bf16: Bf16Path,
) -> Result<()> {
    let (m, n, k) = checks::matmul16(a, b, c, ta, tb, &epi, stats.as_deref())?;
    // A backend told to widen (the reference the native paths are tested against) widens all.
    let narrow = bf16 != Bf16Path::Widen;
    let bf16 = bf16.for_shape(m, n, k);
    // The epilogue on row i's sums for the columns from j0, applied as each block of sums is
    // finished (inside the bf16 kernel) or row by row after the widened f32 GEMM.
    let epilogue = |i: usize, j0: usize, sums: &mut [f32]| match epi {
        Epilogue::None => {}
        Epilogue::Bias { bias, relu } => {
            for (v, b) in sums.iter_mut().zip(&bias.f32()[j0..]) {
                *v += b;
                if relu {
                    *v = v.max(0.0);
                }
            }
        }
        Epilogue::ReluMask(act) => {
            let at = i * n + j0;
            match &act.data {
                // A 16-bit value is > 0 where its bits, read as i16, lie in 1..=+inf's (NaN's
                // lie above): a compare that vectorises, unlike a widening per value.
                Storage::Bits16(bits, dt) => {
                    let inf = float16::round_bits(*dt, f32::INFINITY) as i16;
                    sums.iter_mut().zip(&bits[at..]).for_each(|(g, &a)| *g = if (1..=inf).contains(&(a as i16)) { *g } else { 0.0 })
                }
                _ => sums.iter_mut().zip(&act.f32()[at..]).for_each(|(g, &a)| *g = if a > 0.0 { *g } else { 0.0 }),
            }
        }
    };
    let native = |out: &mut dyn FnMut(&[u16], &[u16], Bf16Path) -> Option<[u64; 2]>| match (&a.data, &b.data) {
        (Storage::Bits16(x, DType::BF16), Storage::Bits16(y, _)) => out(x, y, bf16),
        _ => None,
    };
    let widened_product = |acc: &mut [f32]| ops::gemm(&widened(a), &widened(b), acc, m, n, k, ta, tb, false, threads);
    match &mut c.data {
        Storage::F32(out) => {
            let store = |i: usize, j0: usize, sums: &mut [f32], o: &mut [f32]| {
                epilogue(i, j0, sums);
                o.copy_from_slice(sums);
                [0, 0]
            };
            if native(&mut |x, y, path| bf16_product(x, y, out, [m, n, k], ta, tb, path, narrow, &store)).is_none() {
                // The widened GEMM writes the output itself; the epilogue then runs in place.
                widened_product(out);
                ops::chunks(out, n, |i, row| epilogue(i, 0, row));
            }
            Ok(())
        }
        Storage::Bits16(out, odt) => {
            let (odt, count) = (*odt, stats.is_some());
            let store = |i: usize, j0: usize, sums: &mut [f32], o: &mut [u16]| {
                epilogue(i, j0, sums);
                float16::encode_into(odt, sums, o);
                if !count {
                    return [0, 0];
                }
                let (nz, fl) = count_flushed(sums, o);
                [nz, fl]
            };
            let counts = match native(&mut |x, y, path| bf16_product(x, y, out, [m, n, k], ta, tb, path, narrow, &store)) {
                Some(c) => c,
                None => {
                    let mut acc = vec![0.0f32; m * n];
                    widened_product(&mut acc);
                    store_rows(&mut acc, out, n, &store)
                }
            };
            stats_add(stats, counts[0], counts[1])
        }
        _ => Err(Error::Internal("checks::matmul16 let an integer output through".into())),
    }
}

/// A bf16 product through `store`: with `narrow`, the narrow kernels where the shape-chosen
/// path would widen (a CNN's first convolution and its weight gradient, a classifier's
/// logits), else that path; None leaves the widening to the caller.
#[allow(clippy::too_many_arguments)]
fn bf16_product<O: Send, S: RowStore<O>>(
    a: &[u16],
    b: &[u16],
    out: &mut [O],
    [m, n, k]: [usize; 3],
    ta: bool,
    tb: bool,
    path: Bf16Path,
    narrow: bool,
    store: &S,
) -> Option<[u64; 2]> {
    if path == Bf16Path::Widen {
        return if narrow { gemm_bf16_narrow::gemm(a, b, out, m, n, k, ta, tb, store) } else { None };
    }
    // A weight gradient aᵀ·b whose a is the wider operand (a CNN's 144 column taps against 32
    // channels, an input layer's 784 features against 256 units): AMX packs op(a) row by row,
    // which for a transposed a gathers a's columns over all k (every pixel of the batch, one
    // short read per row and block of 16); multiplied the other way round (cᵀ = bᵀ·a) only the
    // narrower b is gathered and a is interleaved two rows at a time where it lies. Only where
    // k dwarfs the output (a CNN's pixels): transposing cᵀ back costs a strided pass over m·n,
    // which for an MLP's weight gradient (k = the batch) was more than the gather it saved.
    if path == Bf16Path::Amx && ta && !tb && m > n && k >= 8 * m.max(n) {
        let mut ct = vec![0f32; n * m];
        let copy = |_: usize, _: usize, s: &mut [f32], o: &mut [f32]| {
            o.copy_from_slice(s);
            [0, 0]
        };
        gemm_bf16_into(b, a, &mut ct, n, m, k, true, false, path, &copy)?;
        let mut c: Vec<f32> = (0..m * n).map(|at| ct[(at % n) * m + at / n]).collect();
        return Some(store_rows(&mut c, out, n, store));
    }
    gemm_bf16_into(a, b, out, m, n, k, ta, tb, path, store)
}

pub fn scale_by_loss_scale(g: &mut CpuTensor, state: &CpuTensor) -> Result<()> {
    checks::f32("scale_by_loss_scale", g)?;
    checks::scaler_state("scale_by_loss_scale", state)?;
    let scale = f32::from_bits(state.u32()[word::SCALE]);
    ops::map_inplace(g.f32_mut(), |v| v * scale);
    Ok(())
}

pub fn unscale_check(g: &mut CpuTensor, state: &mut CpuTensor) -> Result<()> {
    checks::unscale_check(g, state)?;
    let inv_scale = f32::from_bits(state.u32()[word::INV_SCALE]);
    let mut bad = false;
    for v in g.f32_mut() {
        bad |= !v.is_finite();
        *v *= inv_scale;
    }
    if bad {
        state.u32_mut()[word::FOUND_INF] = 1;
    }
    Ok(())
}

pub fn amp_update(
    p: &mut CpuTensor,
    g: &CpuTensor,
    slots: &mut [CpuTensor],
    opt: AmpOptimizer<'_, CpuTensor>,
    state: &CpuTensor,
    w16: Option<&mut CpuTensor>,
) -> Result<()> {
    checks::amp_update(p, g, slots, &opt, state, w16.as_deref())?;
    let words = state.u32();
    if words[word::FOUND_INF] != 0 {
        return Ok(());
    }
    // The 16-bit copy of the new weights, written chunk by chunk right after each chunk's
    // update while it is still in L1: one sweep over memory instead of two, and no counting
    // of flushed values that nobody reads (that scalar fold was a fifth of a bf16 step).
    let mut w16 = match w16 {
        Some(w) => match &mut w.data {
            Storage::Bits16(out, dt) => Some((out.as_mut_slice(), *dt)),
            _ => return Err(Error::Internal("checks::amp_update let a non-16-bit copy through".into())),
        },
        None => None,
    };
    let round = |p: &[f32], w: Option<(&mut [u16], DType)>| {
        if let Some((w, dt)) = w {
            float16::encode_into(dt, p, w);
        }
    };
    match (opt, slots) {
        (AmpOptimizer::Sgd(hp), [v]) => {
            let step = |p: &mut [f32], g: &[f32], v: &mut [f32], w: Option<(&mut [u16], DType)>| {
                optim::sgd(p, g, v, hp);
                round(p, w);
            };
            fused(p.f32_mut(), g.f32(), [v.f32_mut()], w16.as_mut().map(|(w, dt)| (&mut **w, *dt)), |p, g, [v], w| step(p, g, v, w));
        }
        (AmpOptimizer::AdamW(hp, table), [m, v]) => {
            let row = words[word::STEPS] as usize;
            let t = table.f32();
            let (Some(&step_size), Some(&bias2_sqrt)) = (t.get(2 * row), t.get(2 * row + 1)) else {
                return Err(Error::Internal(format!("the AdamW factor table has {} rows; step {} needs more", t.len() / 2, row + 1)));
            };
            let f = crate::tensor::AdamFactors { decay: 1.0 - hp.lr * hp.weight_decay, step_size, bias2_sqrt };
            let step = |p: &mut [f32], g: &[f32], [m, v]: [&mut [f32]; 2], w: Option<(&mut [u16], DType)>| {
                optim::adamw_with(p, g, m, v, hp, f);
                round(p, w);
            };
            fused(p.f32_mut(), g.f32(), [m.f32_mut(), v.f32_mut()], w16.as_mut().map(|(w, dt)| (&mut **w, *dt)), step);
        }
        _ => return Err(Error::Internal("checks::amp_update let a slot count through".into())),
    }
    Ok(())
}

/// Elements per chunk of the fused update: its arrays stay in L1 between the update and the
/// rounding.
const UPDATE_CHUNK: usize = 1 << 12;

/// `f(p, g, slots, w16)` over matching chunks of every array, on rayon for large tensors.
fn fused<const S: usize>(
    p: &mut [f32],
    g: &[f32],
    slots: [&mut [f32]; S],
    w16: Option<(&mut [u16], DType)>,
    f: impl Fn(&mut [f32], &[f32], [&mut [f32]; S], Option<(&mut [u16], DType)>) + Sync,
) {
    if p.len() < ops::PAR_THRESHOLD {
        return f(p, g, slots, w16);
    }
    let n = p.len().div_ceil(UPDATE_CHUNK);
    // Each chunk's slices, split up front so the tasks own disjoint pieces.
    let mut slot_chunks: Vec<std::slice::ChunksMut<'_, f32>> = slots.into_iter().map(|s| s.chunks_mut(UPDATE_CHUNK)).collect();
    let mut w_chunks = w16.map(|(w, dt)| (w.chunks_mut(UPDATE_CHUNK), dt));
    let mut tasks = Vec::with_capacity(n);
    for (pc, gc) in p.chunks_mut(UPDATE_CHUNK).zip(g.chunks(UPDATE_CHUNK)) {
        let sc: [&mut [f32]; S] = std::array::from_fn(|i| slot_chunks[i].next().unwrap_or_default());
        let wc = w_chunks.as_mut().and_then(|(it, dt)| it.next().map(|w| (w, *dt)));
        tasks.push((pc, gc, sc, wc));
    }
    tasks.into_par_iter().for_each(|(pc, gc, sc, wc)| f(pc, gc, sc, wc));
}

pub fn scaler_update(state: &mut CpuTensor, rule: ScalerRule, log: &mut CpuTensor, slot: usize) -> Result<()> {
    checks::scaler_update(state, log, slot)?;
    let entry = scaler::update_words(state.u32_mut(), rule);
    log.u32_mut()[slot] = entry;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector count agrees with the definition on every kind of value, past whole vectors.
    #[test]
    fn flushed_count_matches_the_scalar_definition() {
        let kinds = [0.0, -0.0, 1.0, f32::NAN, 1e-44, -1e-44, 1e-40, f32::INFINITY, -3.5, 2e-45];
        let src: Vec<f32> = (0..37).map(|i| kinds[i * 7 % kinds.len()]).collect();
        let out = float16::encode(DType::BF16, &src);
        let want = src
            .iter()
            .zip(&out)
            .fold((0, 0), |(nz, fl), (&v, &b)| (nz + (v != 0.0) as u64, fl + (v != 0.0 && float16::is_zero_bits(b)) as u64));
        assert!(want.1 > 0 && want.0 > want.1, "the values exercise both counts: {want:?}");
        assert_eq!(count_flushed(&src, &out), want);
    }
}
