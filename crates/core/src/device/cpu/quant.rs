//! Int8 quantization on the CPU (`QuantOps`): the reference every other backend must match,
//! and the int8 GEMM of `gemm_i8`, raw (i32) or with its dequantize epilogue fused (f32).

use super::gemm_i8::{self, I8Path};
use super::{CpuBackend, CpuTensor, Storage};
use crate::error::{Error, Result};
use crate::tensor::{Dequant, QuantGranularity, QuantOps, checks, quantize_value, scale_for_absmax};

fn i8s(t: &CpuTensor) -> &[i8] {
    match &t.data {
        Storage::I8(v) => v,
        _ => &[],
    }
}

fn internal(op: &str) -> Error {
    Error::Internal(format!("{op}: storage does not match the dtype checks accepted"))
}

/// One row of `quantize_value`: per column scales, or one scale for the row. The scalar rule,
/// and the tail of the AVX-512 and AVX2 versions picked at run time (`is_x86_feature_detected!`):
/// the IEEE divide, clamps and round-to-even are the same operations at any width, so every
/// version gives the same bytes; the wide ones are what make the input quantize of an int8
/// layer cheap next to its GEMM.
#[inline(always)]
fn quantize_row_body(o: &mut [i8], x: &[f32], s: &[f32]) {
    if let [s] = s {
        o.iter_mut().zip(x).for_each(|(o, &v)| *o = quantize_value(v, *s));
    } else {
        o.iter_mut().zip(x).zip(s).for_each(|((o, &v), &s)| *o = quantize_value(v, s));
    }
}

/// `quantize_row_body` in AVX-512, 16 values per step: the IEEE divide, the ±128 clamp,
/// round half to even (`roundscale`, the same result as `quantize_value`'s 1.5·2²³ trick),
/// the ±127 clamp, NaN → 0 by mask, then a narrowing store. The tail runs the scalar rule.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn quantize_row_avx512(o: &mut [i8], x: &[f32], s: &[f32]) {
    use std::arch::x86_64::*;
    let n = o.len().min(x.len());
    let per_col = s.len() > 1;
    let full = if per_col { n.min(s.len()) / 16 * 16 } else { n / 16 * 16 };
    let (lo128, hi128, lo127, hi127) = (_mm512_set1_ps(-128.0), _mm512_set1_ps(128.0), _mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
    let one = _mm512_set1_ps(s[0]);
    let mut i = 0;
    while i < full {
        // SAFETY: i + 16 ≤ full ≤ the length of o, x (and s when per column).
        unsafe {
            let v = _mm512_loadu_ps(x.as_ptr().add(i));
            let sc = if per_col { _mm512_loadu_ps(s.as_ptr().add(i)) } else { one };
            let t = _mm512_div_ps(v, sc);
            let finite = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(t, t);
            let t = _mm512_min_ps(_mm512_max_ps(t, lo128), hi128);
            let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
            let r = _mm512_min_ps(_mm512_max_ps(r, lo127), hi127);
            let q = _mm512_maskz_cvtps_epi32(finite, r);
            _mm_storeu_si128(o.as_mut_ptr().add(i) as *mut __m128i, _mm512_cvtepi32_epi8(q));
        }
        i += 16;
    }
    let tail_s = if per_col { &s[i.min(s.len())..] } else { s };
    quantize_row_body(&mut o[i..], &x[i..], tail_s);
}

/// `quantize_row_body` in AVX2, 32 values per step: the AVX-512 version's steps on four
/// 8-lane vectors (`vroundps` to nearest even; NaN → 0 by masking the converted lanes), then
/// two saturating packs, exact because every lane is already within ±127, and a lane
/// permute back into element order. The tail runs the scalar rule.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn quantize_row_avx2(o: &mut [i8], x: &[f32], s: &[f32]) {
    use std::arch::x86_64::*;
    let n = o.len().min(x.len());
    let per_col = s.len() > 1;
    let full = if per_col { n.min(s.len()) / 32 * 32 } else { n / 32 * 32 };
    let (lo128, hi128, lo127, hi127) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(128.0), _mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
    let one = _mm256_set1_ps(s[0]);
    // packs works within 128-bit halves: dwords 0,4,1,5,2,6,3,7 put the bytes back in order.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let mut i = 0;
    while i < full {
        // SAFETY: i + 32 ≤ full ≤ the length of o, x (and s when per column).
        let q: [__m256i; 4] = std::array::from_fn(|v| unsafe {
            let at = i + 8 * v;
            let sc = if per_col { _mm256_loadu_ps(s.as_ptr().add(at)) } else { one };
            let t = _mm256_div_ps(_mm256_loadu_ps(x.as_ptr().add(at)), sc);
            let finite = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_ORD_Q>(t, t));
            let t = _mm256_min_ps(_mm256_max_ps(t, lo128), hi128);
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
            let r = _mm256_min_ps(_mm256_max_ps(r, lo127), hi127);
            _mm256_and_si256(_mm256_cvtps_epi32(r), finite)
        });
        let bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        // SAFETY: as above, 32 bytes of o from i.
        unsafe { _mm256_storeu_si256(o.as_mut_ptr().add(i) as *mut __m256i, _mm256_permutevar8x32_epi32(bytes, order)) };
        i += 32;
    }
    let tail_s = if per_col { &s[i.min(s.len())..] } else { s };
    quantize_row_body(&mut o[i..], &x[i..], tail_s);
}

fn quantize_row(o: &mut [i8], x: &[f32], s: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static LEVEL: OnceLock<u8> = OnceLock::new();
        let level = *LEVEL.get_or_init(|| {
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vl") {
                2
            } else if is_x86_feature_detected!("avx2") {
                1
            } else {
                0
            }
        });
        // SAFETY: each version runs only where the CPU reported its features.
        match level {
            2 => return unsafe { quantize_row_avx512(o, x, s) },
            1 => return unsafe { quantize_row_avx2(o, x, s) },
            _ => {}
        }
    }
    quantize_row_body(o, x, s)
}

/// The largest |x|, NaN ignored as `f32::max` ignores it: max is exact and order-free, so any
/// order gives the sequential fold's value. AVX-512 or AVX2 where the CPU has them (a dynamic
/// int8 layer takes one per batch: 2 µs for [64, 784] against 9 for the portable lanes).
fn absmax(xs: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: each version runs only where the CPU reported its features.
        if is_x86_feature_detected!("avx512f") {
            return unsafe { absmax_avx512(xs) };
        }
        if is_x86_feature_detected!("avx2") {
            return unsafe { absmax_avx2(xs) };
        }
    }
    let mut lanes = [0.0f32; 16];
    let chunks = xs.chunks_exact(16);
    let tail = chunks.remainder().iter().fold(0.0f32, |m, v| m.max(v.abs()));
    for c in chunks {
        lanes.iter_mut().zip(c).for_each(|(m, v)| *m = m.max(v.abs()));
    }
    lanes.iter().fold(tail, |m, &v| m.max(v))
}

/// `absmax` in AVX-512, four vectors at a time: `max(|v|, m)` keeps m where v is NaN (the
/// instruction returns its second operand when either is NaN).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn absmax_avx512(xs: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let chunks = xs.chunks_exact(64);
    let m = chunks.remainder().iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let (abs, mut acc) = (_mm512_set1_epi32(0x7fff_ffff), [_mm512_setzero_ps(); 4]);
    for c in chunks {
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: every chunk holds 64 values.
            let v = unsafe { _mm512_loadu_ps(c.as_ptr().add(16 * j)) };
            *a = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), abs)), *a);
        }
    }
    m.max(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(acc[0], acc[1]), _mm512_max_ps(acc[2], acc[3]))))
}

/// `absmax_avx512` in AVX2's 8 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn absmax_avx2(xs: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let chunks = xs.chunks_exact(32);
    let m = chunks.remainder().iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let (abs, mut acc) = (_mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff)), [_mm256_setzero_ps(); 4]);
    for c in chunks {
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: every chunk holds 32 values.
            *a = _mm256_max_ps(_mm256_and_ps(unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * j)) }, abs), *a);
        }
    }
    let mut lanes = [0.0f32; 8];
    // SAFETY: lanes holds 8 values.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_max_ps(_mm256_max_ps(acc[0], acc[1]), _mm256_max_ps(acc[2], acc[3]))) };
    lanes.iter().fold(m, |m, &v| m.max(v))
}

/// q = quantize_value(x, its scale), for checked tensors, row by row (see `quantize_row`), on
/// rayon for large tensors.
fn quantize_into(x: &CpuTensor, q: &mut CpuTensor, s: &[f32], per_channel: bool) -> Result<()> {
    use rayon::prelude::*;
    let cols = x.shape[1].max(1);
    let out = q.i8_mut().ok_or_else(|| internal("quantize"))?;
    let s = if per_channel { s } else { &s[..1] };
    let row = |(o, xr): (&mut [i8], &[f32])| quantize_row(o, xr, s);
    if out.len() >= super::PAR_THRESHOLD {
        out.par_chunks_mut(cols).zip(x.f32().par_chunks(cols)).for_each(row);
    } else {
        out.chunks_mut(cols).zip(x.f32().chunks(cols)).for_each(row);
    }
    Ok(())
}

/// out = q · s[column], row by row (vectorises), on rayon for large tensors.
fn dequantize_rows<T: Copy + Sync>(q: &[T], s: &[f32], out: &mut [f32], widen: impl Fn(T) -> f32 + Sync) {
    use rayon::prelude::*;
    let row = |(o, qr): (&mut [f32], &[T])| o.iter_mut().zip(qr).zip(s).for_each(|((o, &q), &s)| *o = widen(q) * s);
    if out.len() >= super::PAR_THRESHOLD {
        out.par_chunks_mut(s.len()).zip(q.par_chunks(s.len())).for_each(row);
    } else {
        out.chunks_mut(s.len()).zip(q.chunks(s.len())).for_each(row);
    }
}

impl QuantOps for CpuBackend {
    fn quant_unavailable(&self) -> Option<String> {
        None
    }

    fn int8_kernel(&self) -> Option<String> {
        Some(self.i8_path.name().into())
    }

    fn write_i8(&mut self, t: &mut CpuTensor, data: &[i8]) -> Result<()> {
        checks::data_len("write_i8", t.shape, data.len())?;
        checks::dtype("write_i8", t, crate::tensor::DType::I8)?;
        t.i8_mut().ok_or_else(|| internal("write_i8"))?.copy_from_slice(data);
        Ok(())
    }

    fn read_i8(&mut self, t: &CpuTensor) -> Result<Vec<i8>> {
        checks::dtype("read_i8", t, crate::tensor::DType::I8)?;
        Ok(i8s(t).to_vec())
    }

    fn read_i32(&mut self, t: &CpuTensor) -> Result<Vec<i32>> {
        checks::dtype("read_i32", t, crate::tensor::DType::I32)?;
        match &t.data {
            Storage::I32(v) => Ok(v.clone()),
            _ => Err(internal("read_i32")),
        }
    }

    fn quantize(&mut self, x: &CpuTensor, q: &mut CpuTensor, scales: &mut CpuTensor, granularity: QuantGranularity) -> Result<()> {
        checks::quantize(x, q, scales, granularity)?;
        let cols = x.shape[1];
        let xs = x.f32();
        let s = scales.f32_mut();
        match granularity {
            QuantGranularity::PerTensor => s[0] = scale_for_absmax(absmax(xs)),
            QuantGranularity::PerChannel => {
                let mut absmax = vec![0.0f32; cols];
                for row in xs.chunks_exact(cols.max(1)) {
                    absmax.iter_mut().zip(row).for_each(|(m, v)| *m = m.max(v.abs()));
                }
                s.iter_mut().zip(&absmax).for_each(|(s, &a)| *s = scale_for_absmax(a));
            }
        }
        quantize_into(x, q, scales.f32(), granularity == QuantGranularity::PerChannel)
    }

    fn quantize_with(&mut self, x: &CpuTensor, q: &mut CpuTensor, scales: &CpuTensor) -> Result<()> {
        let per_channel = checks::quantize_with(x, q, scales)?;
        quantize_into(x, q, scales.f32(), per_channel)
    }

    fn dequantize(&mut self, q: &CpuTensor, scales: &CpuTensor, out: &mut CpuTensor) -> Result<()> {
        let per_channel = checks::dequantize(q, scales, out)?;
        let cols = q.shape[1].max(1);
        // One scale per column, repeated for per-tensor scales, so each row is one zipped loop.
        let s: Vec<f32> = if per_channel { scales.f32().to_vec() } else { vec![scales.f32()[0]; cols] };
        let o = out.f32_mut();
        match &q.data {
            Storage::I8(v) => dequantize_rows(v, &s, o, |q| q as f32),
            Storage::I32(v) => dequantize_rows(v, &s, o, |q| q as f32),
            _ => return Err(internal("dequantize")),
        }
        Ok(())
    }

    fn matmul_i8(&mut self, a: &CpuTensor, b: &CpuTensor, c: &mut CpuTensor, ta: bool, tb: bool) -> Result<()> {
        let (m, n, k) = checks::matmul_i8(a, b, c, ta, tb)?;
        let Storage::I32(out) = &mut c.data else { return Err(internal("matmul_i8")) };
        gemm_i8::gemm_i8(i8s(a), i8s(b), &b.packed, out, m, n, k, ta, tb, self.i8_path, &gemm_i8::Raw);
        Ok(())
    }

    /// The GEMM's kernels finish each sum into f32 where they store it (`gemm_i8::Finish`).
    fn matmul_i8_dequant(
        &mut self,
        a: &CpuTensor,
        b: &CpuTensor,
        out: &mut CpuTensor,
        ta: bool,
        tb: bool,
        epi: Dequant<'_, CpuTensor>,
    ) -> Result<()> {
        let ((m, n, k), per_column) = checks::matmul_i8_dequant(a, b, out, ta, tb, &epi)?;
        let scales = &epi.scales.f32()[..if per_column { n } else { 1 }];
        // s_x · s_W[col] is formed per value, as the host forms it for the separate ops.
        let finish =
            gemm_i8::Finish { scales, act: epi.act_scale.map_or(1.0, |t| t.f32()[0]), bias: epi.bias.map(|t| t.f32()), relu: epi.relu };
        let Storage::F32(o) = &mut out.data else { return Err(internal("matmul_i8_dequant")) };
        gemm_i8::gemm_i8(i8s(a), i8s(b), &b.packed, o, m, n, k, ta, tb, self.i8_path, &finish);
        Ok(())
    }
}

impl CpuBackend {
    /// Forces the portable int8 GEMM even where VNNI is present (to compare the two), or goes
    /// back to the fastest path this CPU has.
    pub fn set_int8_portable(&mut self, portable: bool) {
        self.i8_path = if portable { I8Path::Portable } else { I8Path::detect() };
    }

    /// Forces the AVX2 int8 GEMM (the path of CPUs without VNNI) where this CPU has AVX2;
    /// returns whether it did.
    pub fn set_int8_avx2(&mut self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            self.i8_path = I8Path::Avx2;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every absmax version this CPU runs equals the sequential `f32::max` fold on every length
    /// around the vector widths, with NaN (ignored), infinities and -0 among the values.
    #[test]
    fn absmax_equals_the_sequential_fold_on_every_path() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for len in [0, 1, 7, 31, 32, 33, 63, 64, 65, 200, 1000] {
            for special in [None, Some(f32::NAN), Some(f32::NEG_INFINITY), Some(-0.0)] {
                let mut x: Vec<f32> = (0..len).map(|_| rng.random_range(-3.0..3.0)).collect();
                if let Some(v) = special.filter(|_| len > 0) {
                    x[rng.random_range(0..len)] = v;
                }
                let want = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                assert_eq!(absmax(&x).to_bits(), want.to_bits(), "dispatched, len {len} {special:?}");
                #[cfg(target_arch = "x86_64")]
                {
                    if is_x86_feature_detected!("avx512f") {
                        // SAFETY: the CPU has AVX-512F.
                        assert_eq!(unsafe { absmax_avx512(&x) }.to_bits(), want.to_bits(), "avx512, len {len} {special:?}");
                    }
                    if is_x86_feature_detected!("avx2") {
                        // SAFETY: the CPU has AVX2.
                        assert_eq!(unsafe { absmax_avx2(&x) }.to_bits(), want.to_bits(), "avx2, len {len} {special:?}");
                    }
                }
            }
        }
    }
}
