//! bf16 products whose output is at most 32 columns wide, where AMX's 32 × 32 blocks and the
//! `vdpbf16ps` kernel's 64-column panels would mostly multiply padding: a CNN's first
//! convolution (k = 9 taps into 16 channels), its weight gradient (9 × 16, summed over every
//! pixel of the batch), a classifier's 10 logits. Each bf16 value widens to f32 exactly (a
//! 16-bit shift) inside the kernel and f32 FMAs sum it, so the result is the f32 GEMM of the
//! widened operands up to summation order. Before this, `amp.rs` widened both operands whole
//! into fresh f32 copies per call (two allocations and two passes over memory) for the f32
//! GEMM. AVX-512F/BW/VL, chosen at run time; elsewhere the caller widens as before.

use super::gemm_bf16::RowStore;

/// Widest output handled: two vectors of 16 lanes per row.
pub const MAX_N: usize = 32;
/// Deepest row product (`rows`): b is widened into k × 32 f32 on the stack.
const MAX_K: usize = 128;
/// Rows of the transposed product's output (`transposed`): groups of up to 16 share one pass
/// over k in registers, each group a pass of its own (an MLP head's 128 × 10 weight gradient
/// takes 8; it was widened whole into f32 copies for the f32 GEMM before).
const MAX_ROWS: usize = 128;
/// Values of k each task of `transposed` sums in registers before its partial sums are added,
/// in order, to the total (bounded rounding growth, and deterministic with any thread count).
const K_CHUNK: usize = 2048;
/// Rows of the plain product per task, a multiple of the kernel's 8.
const ROWS_PER_TASK: usize = 256;

/// Whether this CPU runs these kernels.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *OK.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// c[m, n] = op(a)·op(b) through `store` (as `gemm_bf16_into`), for n ≤ 32 and either a plain a
/// with k ≤ 128 or a transposed a (stored [k, m]) with a plain b and m ≤ 128 rows of output (a
/// weight gradient). None when the shape is not one of those or the CPU lacks AVX-512.
#[allow(clippy::too_many_arguments)]
pub fn gemm<O: Send, S: RowStore<O>>(
    a: &[u16],
    b: &[u16],
    c: &mut [O],
    m: usize,
    n: usize,
    k: usize,
    ta: bool,
    tb: bool,
    store: &S,
) -> Option<[u64; 2]> {
    if n == 0 || n > MAX_N || !available() {
        return None;
    }
    if m == 0 {
        return Some([0, 0]);
    }
    #[cfg(target_arch = "x86_64")]
    {
        if !ta && k <= MAX_K {
            return Some(x86::rows(a, b, c, m, n, k, tb, store));
        }
        if ta && !tb && m <= MAX_ROWS && k > 0 {
            return Some(x86::transposed(a, b, c, m, n, k, store));
        }
    }
    let _ = (a, b, c, m, k, ta, tb, store);
    None
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use rayon::prelude::*;

    use super::{K_CHUNK, MAX_K, MAX_N, ROWS_PER_TASK, RowStore};
    use crate::device::cpu::gemm_bf16::store_rows;

    fn widen(bits: u16) -> f32 {
        f32::from_bits((bits as u32) << 16)
    }

    fn add(x: [u64; 2], y: [u64; 2]) -> [u64; 2] {
        [x[0] + y[0], x[1] + y[1]]
    }

    /// c = a·op(b), a [m, k] row-major: b widened once into k rows of 32 f32 (zero past n),
    /// then 8 rows of c at a time, each tap's weights loaded once for the 8.
    #[allow(clippy::too_many_arguments)]
    pub fn rows<O: Send, S: RowStore<O>>(a: &[u16], b: &[u16], c: &mut [O], m: usize, n: usize, k: usize, tb: bool, store: &S) -> [u64; 2] {
        let mut wf = [0f32; MAX_K * MAX_N];
        for t in 0..k {
            for j in 0..n {
                wf[t * MAX_N + j] = widen(if tb { b[j * k + t] } else { b[t * n + j] });
            }
        }
        let wf = &wf[..k * MAX_N];
        let task = |(blk, cb): (usize, &mut [O])| {
            let r0 = blk * ROWS_PER_TASK;
            let rows = cb.len() / n;
            let mut sums = [[0f32; MAX_N]; 8];
            let mut counts = [0, 0];
            for i0 in (0..rows).step_by(8) {
                let live = 8.min(rows - i0);
                // Rows past the end repeat the last live row; their sums are dropped.
                let arows: [&[u16]; 8] = std::array::from_fn(|r| &a[(r0 + i0 + r.min(live - 1)) * k..][..k]);
                // SAFETY: `available()` saw AVX-512F/BW/VL; every row holds k values, wf k·32.
                unsafe { if n > 16 { rows8::<2>(&arows, wf, &mut sums) } else { rows8::<1>(&arows, wf, &mut sums) } }
                for (r, s) in sums.iter_mut().enumerate().take(live) {
                    counts = add(counts, store(r0 + i0 + r, 0, &mut s[..n], &mut cb[(i0 + r) * n..][..n]));
                }
            }
            counts
        };
        if m * n * k < 1 << 18 {
            c.chunks_mut(ROWS_PER_TASK * n).enumerate().map(task).fold([0, 0], add)
        } else {
            c.par_chunks_mut(ROWS_PER_TASK * n).enumerate().map(task).reduce(|| [0, 0], add)
        }
    }

    /// sums[r][..16·NV] = Σ_t a[r][t] · wf[t]: 8·NV independent accumulators, so the FMAs'
    /// latency overlaps.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn rows8<const NV: usize>(a: &[&[u16]; 8], wf: &[f32], sums: &mut [[f32; MAX_N]; 8]) {
        let k = a[0].len();
        let mut acc = [[_mm512_setzero_ps(); NV]; 8];
        for t in 0..k {
            // SAFETY (the loads below): wf holds k·32 values, each a[r] k.
            let w: [__m512; NV] = std::array::from_fn(|v| unsafe { _mm512_loadu_ps(wf.as_ptr().add(t * MAX_N + 16 * v)) });
            for r in 0..8 {
                // The bf16 in every 16-bit lane, shifted into each 32-bit lane's high half: f32.
                let x = unsafe { *a[r].get_unchecked(t) } as i16;
                let av = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_set1_epi16(x)));
                for v in 0..NV {
                    acc[r][v] = _mm512_fmadd_ps(av, w[v], acc[r][v]);
                }
            }
        }
        for r in 0..8 {
            for v in 0..NV {
                // SAFETY: each sums row holds 32 values.
                unsafe { _mm512_storeu_ps(sums[r].as_mut_ptr().add(16 * v), acc[r][v]) };
            }
        }
    }

    /// c[m, n] = aᵀ·b with a stored [k, m] and b [k, n] (m ≤ MAX_ROWS): per chunk of k, every output
    /// row in registers; the chunks' partial sums are added in order.
    pub fn transposed<O: Send, S: RowStore<O>>(a: &[u16], b: &[u16], c: &mut [O], m: usize, n: usize, k: usize, store: &S) -> [u64; 2] {
        let chunks = k.div_ceil(K_CHUNK);
        let part = |ci: usize| {
            let (p0, len) = (ci * K_CHUNK, K_CHUNK.min(k - ci * K_CHUNK));
            let mut sums = [[0f32; MAX_N]; super::MAX_ROWS];
            let (a, b) = (&a[p0 * m..][..len * m], &b[p0 * n..][..len * n]);
            // SAFETY: `available()` saw AVX-512F/BW/VL; a holds len rows of m, b len rows of n.
            unsafe {
                match (n > 16, m) {
                    (false, ..=4) => tchunk::<4, 1>(a, b, m, n, &mut sums),
                    (false, ..=8) => tchunk::<8, 1>(a, b, m, n, &mut sums),
                    (false, ..=12) => tchunk::<12, 1>(a, b, m, n, &mut sums),
                    (false, _) => tchunk::<16, 1>(a, b, m, n, &mut sums),
                    (true, ..=4) => tchunk::<4, 2>(a, b, m, n, &mut sums),
                    (true, ..=8) => tchunk::<8, 2>(a, b, m, n, &mut sums),
                    (true, _) => tchunk::<12, 2>(a, b, m, n, &mut sums),
                }
            }
            sums
        };
        // 2 × 16 × 32 products need more than 12 rows × 2 vectors: a second pass over k.
        let parts: Vec<_> =
            if m * n * k < 1 << 18 { (0..chunks).map(part).collect() } else { (0..chunks).into_par_iter().map(part).collect() };
        let mut total = vec![0f32; m * n];
        for p in &parts {
            for (i, row) in total.chunks_exact_mut(n).enumerate() {
                row.iter_mut().zip(&p[i]).for_each(|(t, s)| *t += s);
            }
        }
        store_rows(&mut total, c, n, store)
    }

    /// sums[i][j] = Σ_p a[p][i] · b[p][j] over this chunk's rows p, i < m (≤ M, or a second
    /// pass for rows M.. when 2 vectors leave room for only 12), j < n.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn tchunk<const M: usize, const NV: usize>(
        a: &[u16],
        b: &[u16],
        m: usize,
        n: usize,
        sums: &mut [[f32; MAX_N]; super::MAX_ROWS],
    ) {
        let rows = b.len() / n;
        let mut i0 = 0;
        while i0 < m {
            // Output rows past m repeat the last one; their sums are dropped.
            let col: [usize; M] = std::array::from_fn(|i| (i0 + i).min(m - 1));
            let mut acc = [[_mm512_setzero_ps(); NV]; M];
            for p in 0..rows {
                let bv: [__m512; NV] = std::array::from_fn(|v| {
                    let live = n.saturating_sub(16 * v).min(16);
                    let mask: __mmask16 = ((1u32 << live) - 1) as u16;
                    // SAFETY: the mask reads only b's n values of row p.
                    let bits = unsafe { _mm256_maskz_loadu_epi16(mask, b.as_ptr().add(p * n + 16 * v) as *const i16) };
                    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits)))
                });
                let arow = &a[p * m..][..m];
                for i in 0..M {
                    let x = unsafe { *arow.get_unchecked(col[i]) } as i16;
                    let av = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_set1_epi16(x)));
                    for v in 0..NV {
                        acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
                    }
                }
            }
            for i in 0..M.min(m - i0) {
                for v in 0..NV {
                    // SAFETY: each sums row holds 32 values; i0 + i < m ≤ MAX_ROWS.
                    unsafe { _mm512_storeu_ps(sums[i0 + i].as_mut_ptr().add(16 * v), acc[i][v]) };
                }
            }
            i0 += M;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::cpu::gemm_bf16::reference;
    use rand::SeedableRng;

    /// Odd shapes (not multiples of 8, 16 or 32), one row, n across the one-vector/two-vector
    /// boundary, a transposed a past the register rows (m 13–16 with two vectors takes two
    /// passes) and k past one chunk.
    #[test]
    fn narrow_products_match_an_f64_reference_on_odd_shapes() {
        if !available() {
            eprintln!("this CPU lacks AVX-512: the narrow bf16 kernels are not tested");
            return;
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let cases = [
            (1, 1, 1, false, false),
            (1, 16, 9, false, false),
            (13, 17, 9, false, true),
            (301, 10, 128, false, false),
            (257, 32, 3, false, true),
            (9, 16, 1, true, false),
            (9, 16, 5000, true, false),
            (16, 32, 33, true, false),
            (13, 31, 2049, true, false),
            (3, 1, 7, true, false),
            // An MLP head's weight gradient (128 × 10 over a batch), and row groups past 16
            // with one and two vectors.
            (128, 10, 512, true, false),
            (45, 20, 100, true, false),
            (17, 9, 2100, true, false),
        ];
        for (m, n, k, ta, tb) in cases {
            let (a, b) = (reference::operand(&mut rng, m * k), reference::operand(&mut rng, k * n));
            let mut c = vec![f32::NAN; m * n];
            let store = |_: usize, _: usize, s: &mut [f32], o: &mut [f32]| {
                o.copy_from_slice(s);
                [0, 0]
            };
            assert!(gemm(&a, &b, &mut c, m, n, k, ta, tb, &store).is_some(), "{m}x{n}x{k} ta={ta} tb={tb} not handled");
            reference::check(&a, &b, &c, [m, n, k], ta, tb, "narrow");
        }
        // Shapes it leaves to the other paths.
        let store = |_: usize, _: usize, _: &mut [f32], _: &mut [f32]| [0, 0];
        assert!(gemm(&[0; 33], &[0; 33], &mut [0.0; 1], 1, 33, 1, false, false, &store).is_none());
        assert!(gemm(&[0; 129], &[0; 1], &mut [0.0; 129], 129, 1, 1, true, false, &store).is_none());
    }
}
