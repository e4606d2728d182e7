//! The CPU bf16 GEMM: c (f32) = a (bf16) · b (bf16). With AVX-512 BF16 (`vdpbf16ps`, chosen at
//! run time) each 32-bit lane multiplies a pair of adjacent-k bf16 values of a by the same pair
//! of b and adds both products to an f32 accumulator: 32 multiply-adds per instruction, twice
//! the f32 FMA's 16, and half the bytes read. bf16 × bf16 products are exact in f32, so the
//! result differs from the f32 GEMM of the widened operands only by summation order and by the
//! instruction treating subnormal inputs and outputs as zero (bf16 has f32's exponent range, so
//! only values below 1.2e-38 are affected). Elsewhere `amp.rs` widens to f32 and uses the f32
//! GEMM. Rayon over blocks of rows, like the other CPU GEMMs.

/// Which kernel multiplies bf16 operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16Path {
    /// AVX-512 BF16 `vdpbf16ps`: pairs of bf16 products into f32 lanes.
    Avx512Bf16,
    /// Widen both operands to f32 (exact) and run the f32 GEMM.
    Widen,
}

impl Bf16Path {
    /// The fastest path this CPU runs.
    pub fn detect() -> Bf16Path {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bf16") {
            return Bf16Path::Avx512Bf16;
        }
        Bf16Path::Widen
    }

    pub fn name(self) -> &'static str {
        match self {
            Bf16Path::Avx512Bf16 => "AVX-512 BF16 (vdpbf16ps, f32 accumulation)",
            Bf16Path::Widen => "widened to f32 (this CPU has no AVX-512 BF16)",
        }
    }
}

/// Whether f16 operands have a native path on this CPU: never here (AVX-512 FP16 would be
/// needed; gpulab widens f16 to f32). Named so `gpulab info` and the lesson can say why.
pub fn f16_path_name() -> &'static str {
    "widened to f32 (gpulab has no AVX-512 FP16 kernel)"
}

/// c[m, n] = op(a)·op(b), f32, overwritten; op transposes when the flag is set. Only on a CPU
/// where `Bf16Path::detect()` is `Avx512Bf16` (the caller checks; elsewhere it returns false
/// and leaves c alone).
#[allow(clippy::too_many_arguments)]
pub fn gemm_bf16(a: &[u16], b: &[u16], c: &mut [f32], m: usize, n: usize, k: usize, ta: bool, tb: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    if Bf16Path::detect() == Bf16Path::Avx512Bf16 {
        if m == 0 || n == 0 {
            return true;
        }
        let a_pairs = super::pairs::pack_a(a, m, k, ta, |v| v);
        let b_panels = super::pairs::pack_b(b, n, k, tb, dp::NR, |v| v);
        dp::gemm(&a_pairs, &b_panels, c, m, n, k.div_ceil(2));
        return true;
    }
    let _ = (a, b, c, m, n, k, ta, tb);
    false
}

#[cfg(target_arch = "x86_64")]
mod dp {
    use std::arch::x86_64::*;

    use rayon::prelude::*;

    /// Rows and 16-lane vectors of columns per micro-tile: 6 × 64 outputs in 24 registers.
    const MR: usize = 6;
    const NV: usize = 4;
    /// Columns per panel of b (`pairs::pack_b`): one 64-byte load is 16 columns' pairs.
    pub const NR: usize = 16 * NV;
    /// Rows of c per rayon task (a multiple of MR).
    const ROWS_PER_TASK: usize = 4 * MR;

    pub fn gemm(a: &[u32], bp: &[u32], c: &mut [f32], m: usize, n: usize, kp: usize) {
        let panels = n.div_ceil(NR);
        let task = |(blk, cb): (usize, &mut [f32])| {
            let rows = cb.len() / n;
            let r0 = blk * ROWS_PER_TASK;
            let mut tile = [[0f32; NR]; MR];
            for p in 0..panels {
                let panel = &bp[p * kp * NR..][..kp * NR];
                let cols = NR.min(n - p * NR);
                for i0 in (0..rows).step_by(MR) {
                    let live = MR.min(rows - i0);
                    // Rows past the end repeat the last live row; their results are dropped.
                    let arows: [&[u32]; MR] = std::array::from_fn(|r| &a[(r0 + i0 + r.min(live - 1)) * kp..][..kp]);
                    // SAFETY: gemm_bf16 calls this only after detect() saw avx512f and
                    // avx512bf16; every slice is as long as the kernel reads (kp words per row
                    // of a, kp·NR words per panel).
                    unsafe { micro(&arows, panel, kp, &mut tile) };
                    for r in 0..live {
                        cb[(i0 + r) * n + p * NR..][..cols].copy_from_slice(&tile[r][..cols]);
                    }
                }
            }
        };
        // Small products are not worth rayon's fork/join.
        if m * n * kp < 1 << 16 {
            c.chunks_mut(ROWS_PER_TASK * n).enumerate().for_each(task);
        } else {
            c.par_chunks_mut(ROWS_PER_TASK * n).enumerate().for_each(task);
        }
        debug_assert_eq!(c.len(), m * n);
    }

    /// tile[r][j] = Σ_p dot2(a_r word p, panel column j's word p), in f32.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn micro(a: &[&[u32]; MR], panel: &[u32], kp: usize, tile: &mut [[f32; NR]; MR]) {
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        let bp = panel.as_ptr();
        for p in 0..kp {
            // SAFETY (for the unsafe ops below): panel holds kp·NR words, a[r] kp words.
            let bv: [__m512bh; NV] = std::array::from_fn(|v| unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(bp.add(p * NR + 16 * v) as *const __m512i)) });
            for r in 0..MR {
                let word = unsafe { *a[r].get_unchecked(p) };
                let av: __m512bh = unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(word as i32)) };
                for v in 0..NV {
                    acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
                }
            }
        }
        for r in 0..MR {
            for v in 0..NV {
                unsafe { _mm512_storeu_ps(tile[r].as_mut_ptr().add(16 * v), acc[r][v]) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{DType, float16};
    use rand::{Rng, SeedableRng};

    #[test]
    fn avx512_bf16_matches_an_f64_reference_on_odd_shapes_and_transposes() {
        if Bf16Path::detect() != Bf16Path::Avx512Bf16 {
            eprintln!("this CPU lacks AVX-512 BF16: the vdpbf16ps path is not tested (the widening path is, in tests/it/amp.rs)");
            return;
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for &(m, n, k) in &[(1, 1, 1), (3, 5, 7), (7, 65, 33), (25, 64, 2), (70, 130, 9), (33, 1, 257), (5, 200, 0), (49, 129, 128)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let a: Vec<u16> = (0..m * k).map(|_| float16::round_bits(DType::BF16, rng.random_range(-2.0..2.0))).collect();
                let b: Vec<u16> = (0..k * n).map(|_| float16::round_bits(DType::BF16, rng.random_range(-2.0..2.0))).collect();
                let w = |bits: u16| float16::widen(DType::BF16, bits) as f64;
                let mut c = vec![f32::NAN; m * n]; // poisoned
                assert!(gemm_bf16(&a, &b, &mut c, m, n, k, ta, tb));
                for i in 0..m {
                    for j in 0..n {
                        let (mut want, mut mag) = (0.0f64, 0.0f64);
                        for p in 0..k {
                            let x = w(if ta { a[p * m + i] } else { a[i * k + p] });
                            let y = w(if tb { b[j * k + p] } else { b[p * n + j] });
                            want += x * y;
                            mag += (x * y).abs();
                        }
                        // Products are exact in f32; only the f32 sums round (k of them).
                        let tol = mag * (k as f64 + 1.0) * f32::EPSILON as f64;
                        let got = c[i * n + j] as f64;
                        assert!((got - want).abs() <= tol, "{m}x{n}x{k} ta={ta} tb={tb} c[{i},{j}] = {got}, want {want}");
                    }
                }
            }
        }
    }
}
