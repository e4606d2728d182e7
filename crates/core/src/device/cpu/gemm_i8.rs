//! The CPU int8 GEMM: c (i32) = a (i8) · b (i8), exact. Three kernels, chosen at run time:
//! - AVX-512 VNNI (`vpdpbusd`): a is offset to u8 (a + 128) and the offset is taken back out
//!   with the column sums of b: Σ(a+128)·b − 128·Σb = Σa·b, exact in wrapping i32 arithmetic.
//! - AVX2 (`vpmaddwd`): both operands widened to i16 and packed in pairs of adjacent k
//!   (`pairs`), so one instruction multiplies 16 pairs and adds each pair into an i32 lane;
//!   a pair of i8 products is at most 2·128² = 32 768 in magnitude, so nothing saturates on
//!   the full i8 range. 16 multiply-adds per instruction against the f32 FMA's 8.
//! - A portable loop over a row of a and a row of bᵀ, which the compiler vectorises.
//!
//! The packed kernels keep b's packed form with its tensor (weights are packed once) and run
//! register-blocked micro-tiles on rayon over blocks of rows, like the f32 path. Each kernel
//! hands every finished i32 sum to a `Store`, which keeps it (`Raw`: `matmul_i8`) or turns it
//! into f32 there (`Finish`: the int8 layer's dequantize, bias and ReLU, `matmul_i8_dequant`),
//! so the fused op writes no i32 tensor.

use rayon::prelude::*;

/// Which kernel computes the product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum I8Path {
    /// AVX-512 VNNI `vpdpbusd`: 64 multiply-adds per instruction.
    Vnni,
    /// AVX2 `vpmaddwd` on i16-widened pairs: 16 multiply-adds per instruction, picked where
    /// AVX2 exists without VNNI.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    /// Plain Rust, vectorised by the compiler for the baseline target.
    Portable,
}

impl I8Path {
    /// The fastest path this CPU runs.
    pub fn detect() -> I8Path {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
        {
            return I8Path::Vnni;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return I8Path::Avx2;
        }
        I8Path::Portable
    }

    pub fn name(self) -> &'static str {
        match self {
            I8Path::Vnni => "AVX-512 VNNI (u8×i8 vpdpbusd, +128 offset corrected)",
            I8Path::Avx2 => "AVX2 (i8 widened to i16 pairs, vpmaddwd into i32)",
            I8Path::Portable => "portable i8×i8 to i32 loop",
        }
    }
}

/// Rows of c per rayon task.
const ROWS_PER_TASK: usize = 32;

/// What the GEMM stores for the exact i32 sum `acc` of output column `col`.
pub trait Store: Sync {
    type Out: Copy + Send;
    fn store(&self, col: usize, acc: i32) -> Self::Out;
    /// `store` for the consecutive columns col0.. of one row of a finished tile.
    #[inline(always)]
    fn store_row(&self, col0: usize, acc: &[i32], out: &mut [Self::Out]) {
        for (jj, (o, &a)) in out.iter_mut().zip(acc).enumerate() {
            *o = self.store(col0 + jj, a);
        }
    }
}

/// The i32 sum itself (`matmul_i8`).
pub struct Raw;

impl Store for Raw {
    type Out = i32;
    #[inline(always)]
    fn store(&self, _col: usize, acc: i32) -> i32 {
        acc
    }
    #[inline(always)]
    fn store_row(&self, _col0: usize, acc: &[i32], out: &mut [i32]) {
        out.copy_from_slice(&acc[..out.len()]);
    }
}

/// (acc as f32) · (act · scale), then + bias[col], then max(·, 0): `dequantize`, `bias_add`
/// and `relu`'s f32 operations in their order, so the result equals theirs bit for bit (with
/// act = 1, the product is the scale itself).
pub struct Finish<'a> {
    /// One scale (per tensor) or one per column.
    pub scales: &'a [f32],
    /// The activation scale multiplied into each scale (`Dequant::act_scale`), or 1.
    pub act: f32,
    pub bias: Option<&'a [f32]>,
    pub relu: bool,
}

impl Store for Finish<'_> {
    type Out = f32;
    #[inline(always)]
    fn store(&self, col: usize, acc: i32) -> f32 {
        let s = if let [s] = self.scales { *s } else { self.scales[col] };
        let mut v = acc as f32 * (self.act * s);
        if let Some(b) = self.bias {
            v += b[col];
        }
        if self.relu {
            v = v.max(0.0);
        }
        v
    }

    /// The same three steps a whole row segment at a time, so each is one loop the compiler
    /// vectorises instead of three branches per value.
    #[inline(always)]
    fn store_row(&self, col0: usize, acc: &[i32], out: &mut [f32]) {
        let out = &mut out[..acc.len()];
        let act = self.act;
        if let [s] = self.scales {
            let s = act * s;
            out.iter_mut().zip(acc).for_each(|(o, &a)| *o = a as f32 * s);
        } else {
            out.iter_mut().zip(acc).zip(&self.scales[col0..]).for_each(|((o, &a), &s)| *o = a as f32 * (act * s));
        }
        if let Some(b) = self.bias {
            out.iter_mut().zip(&b[col0..]).for_each(|(o, &b)| *o += b);
        }
        if self.relu {
            out.iter_mut().for_each(|o| *o = o.max(0.0));
        }
    }
}

/// A b operand packed for one kernel, kept with its tensor (weights are packed once, not per
/// call); the tensor drops it whenever its values change.
pub struct PackedB {
    path: I8Path,
    tb: bool,
    n: usize,
    k: usize,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    data: PackedData,
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum PackedData {
    /// Groups of 4 bytes per 32-bit lane, and 128 · b's column sums (the offset correction).
    Vnni { bytes: Vec<i8>, offset: Vec<i32> },
    /// Pairs of i16 per 32-bit lane (`pairs::pack_b`).
    Pairs(Vec<u32>),
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes = match &self.data {
            PackedData::Vnni { bytes, .. } => bytes.len(),
            PackedData::Pairs(w) => 4 * w.len(),
        };
        write!(f, "PackedB {{ {:?}, n: {}, k: {}, tb: {}, {bytes} bytes }}", self.path, self.n, self.k, self.tb)
    }
}

/// Where a tensor keeps its packed form.
pub type PackCache = std::sync::Mutex<Option<std::sync::Arc<PackedB>>>;

/// b's packed form for `path`, from the cache when it was packed for the same kernel and
/// shape, else packed now (`pack`) and cached.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn packed(cache: &PackCache, path: I8Path, tb: bool, n: usize, k: usize, pack: impl FnOnce() -> PackedData) -> std::sync::Arc<PackedB> {
    let mut slot = cache.lock().unwrap_or_else(|p| p.into_inner());
    match slot.as_ref() {
        Some(p) if (p.path, p.tb, p.n, p.k) == (path, tb, n, k) => p.clone(),
        _ => slot.insert(std::sync::Arc::new(PackedB { path, tb, n, k, data: pack() })).clone(),
    }
}

/// c[m, n] = store(op(a)·op(b)) (overwritten), with op transposing when the flag is set.
/// `path` must be one this CPU runs (`I8Path::detect` or `Portable`); `b_cache` is b's
/// tensor's cache of its packed form.
#[allow(clippy::too_many_arguments)]
pub fn gemm_i8<S: Store>(
    a: &[i8],
    b: &[i8],
    b_cache: &PackCache,
    c: &mut [S::Out],
    m: usize,
    n: usize,
    k: usize,
    ta: bool,
    tb: bool,
    path: I8Path,
    st: &S,
) {
    if m == 0 || n == 0 {
        return;
    }
    match path {
        #[cfg(target_arch = "x86_64")]
        I8Path::Vnni => {
            let a_rows: std::borrow::Cow<'_, [i8]> = if ta { transpose(a, k, m).into() } else { a.into() };
            let p = packed(b_cache, path, tb, n, k, || vnni::pack_b(b, n, k, tb));
            let PackedData::Vnni { bytes, offset } = &p.data else { unreachable!("the cache key holds the path") };
            vnni::gemm(&a_rows, bytes, offset, c, m, n, k, st)
        }
        #[cfg(target_arch = "x86_64")]
        I8Path::Avx2 => {
            let p = packed(b_cache, path, tb, n, k, || {
                PackedData::Pairs(super::pairs::pack_b(b, n, k, tb, avx2::NR, super::pairs::Pad::NONE, widen).into_vec())
            });
            let PackedData::Pairs(words) = &p.data else { unreachable!("the cache key holds the path") };
            avx2::gemm(&super::pairs::pack_a(a, m, k, ta, super::pairs::Pad::NONE, widen), words, c, m, n, k.div_ceil(2), st)
        }
        _ => {
            let a_rows: std::borrow::Cow<'_, [i8]> = if ta { transpose(a, k, m).into() } else { a.into() };
            portable(&a_rows, b, c, n, k, tb, st)
        }
    }
}

/// An i8 as the bits of the i16 of the same value (sign-extended), for the pair packers.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn widen(v: i8) -> u16 {
    v as i16 as u16
}

/// [rows, cols] → [cols, rows]
fn transpose(x: &[i8], rows: usize, cols: usize) -> Vec<i8> {
    let mut out = vec![0i8; x.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = x[r * cols + c];
        }
    }
    out
}

/// One row of c: dot products of a's row with each row of bᵀ (k each), each stored as it is
/// finished.
#[inline(always)]
fn row_dots<S: Store>(arow: &[i8], bt: &[i8], crow: &mut [S::Out], k: usize, st: &S) {
    for (j, cv) in crow.iter_mut().enumerate() {
        let acc = if k == 0 { 0 } else { arow.iter().zip(&bt[j * k..][..k]).fold(0i32, |s, (&p, &q)| s.wrapping_add(p as i32 * q as i32)) };
        *cv = st.store(j, acc);
    }
}

fn portable<S: Store>(a: &[i8], b: &[i8], c: &mut [S::Out], n: usize, k: usize, tb: bool, st: &S) {
    // bᵀ as rows of k, so both operands of each dot product are contiguous.
    let bt: std::borrow::Cow<'_, [i8]> = if tb { b.into() } else { transpose(b, k, n).into() };
    c.par_chunks_mut(ROWS_PER_TASK * n).enumerate().for_each(|(blk, cb)| {
        for (r, crow) in cb.chunks_exact_mut(n).enumerate() {
            let i = blk * ROWS_PER_TASK + r;
            row_dots(&a[i * k..][..k], &bt, crow, k, st);
        }
    });
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use rayon::prelude::*;

    /// Rows and 16-lane vectors of columns per micro-tile: 4 × 64 outputs in 16 registers.
    const MR: usize = 4;
    const NV: usize = 4;
    const NR: usize = 16 * NV;
    /// Rows of c per rayon task: four per batch of 64, so a thread that wakes late is helped
    /// by the other rather than waited for.
    const ROWS_PER_TASK: usize = 4 * MR;

    /// b packed panel by panel (NR columns each), then group by group of 4 k values: the 4
    /// bytes of column j for k = 4g..4g+4 are one 32-bit lane, so one 64-byte load feeds 16
    /// columns. Padding (k beyond k, columns beyond n) is zero, so it adds nothing. Also
    /// returns 128·Σ_k b[k][j] per column, padded to whole panels (the offset correction,
    /// wrapping like the sums). Reads b in its stored order.
    pub fn pack_b(b: &[i8], n: usize, k: usize, tb: bool) -> super::PackedData {
        let kg = k.div_ceil(4);
        let mut out = vec![0i8; n.div_ceil(NR) * kg * NR * 4];
        let mut col_sum = vec![0i32; n.div_ceil(NR) * NR];
        let at = |kx: usize, j: usize| ((j / NR * kg + kx / 4) * NR + j % NR) * 4 + kx % 4;
        if tb {
            for (j, row) in b.chunks_exact(k.max(1)).take(n).enumerate() {
                for (kx, &v) in row.iter().enumerate() {
                    out[at(kx, j)] = v;
                }
                col_sum[j] = row.iter().map(|&v| v as i32).sum();
            }
        } else {
            for (kx, row) in b.chunks_exact(n).take(k).enumerate() {
                for (j, &v) in row.iter().enumerate() {
                    out[at(kx, j)] = v;
                    col_sum[j] += v as i32;
                }
            }
        }
        col_sum.iter_mut().for_each(|s| *s = s.wrapping_mul(128));
        super::PackedData::Vnni { bytes: out, offset: col_sum }
    }

    /// c = store(a·b): a as m rows of k i8, b packed by `pack_b` with its offsets.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm<S: super::Store>(a: &[i8], bp: &[i8], offset: &[i32], c: &mut [S::Out], m: usize, n: usize, k: usize, st: &S) {
        let kg = k.div_ceil(4);
        // a + 128 as u8 (flip the sign bit), each row padded with zeros to whole groups of 4.
        let kp = kg * 4;
        let mut au: Vec<u8> = Vec::with_capacity(m * kp);
        for row in a.chunks_exact(k.max(1)).take(m) {
            au.extend(row.iter().map(|&s| (s as u8) ^ 0x80));
            au.resize(au.len() + kp - k, 0);
        }
        au.resize(m * kp, 0);
        let panels = n.div_ceil(NR);
        let task = |(blk, cb): (usize, &mut [S::Out])| {
            let rows = cb.len() / n;
            let r0 = blk * ROWS_PER_TASK;
            let mut tile = [[0i32; NR]; MR];
            let row = |i: usize| &au[(r0 + i) * kp..][..kp];
            for p in 0..panels {
                let panel = &bp[p * kg * NR * 4..][..kg * NR * 4];
                let off = &offset[p * NR..][..NR];
                let cols = NR.min(n - p * NR);
                let mut i0 = 0;
                while i0 < rows {
                    let live = MR.min(rows - i0);
                    // SAFETY: detect() saw avx512f, avx512bw and avx512vnni before choosing
                    // Vnni (tests force it only where the CPU has it); every slice is as long as
                    // the kernel reads (kg groups of 4 bytes per row, kg·NR·4 per panel, NR
                    // offsets, `live` rows of the tile).
                    unsafe {
                        if live == MR {
                            micro::<MR>(&std::array::from_fn(|r| row(i0 + r)), panel, off, kg, &mut tile);
                        } else {
                            // The last rows one at a time: batch 1 computes one row, not four.
                            for r in 0..live {
                                micro::<1>(&[row(i0 + r)], panel, off, kg, &mut tile[r..]);
                            }
                        }
                    }
                    for (r, t) in tile.iter().enumerate().take(live) {
                        st.store_row(p * NR, &t[..cols], &mut cb[(i0 + r) * n + p * NR..][..cols]);
                    }
                    i0 += live;
                }
            }
        };
        // Small products are not worth rayon's fork/join.
        if m * n * k < 1 << 16 {
            c.chunks_mut(ROWS_PER_TASK * n).enumerate().for_each(task);
        } else {
            c.par_chunks_mut(ROWS_PER_TASK * n).enumerate().for_each(task);
        }
    }

    /// tile[r][j] = Σ_g dot4(a_r[4g..4g+4] as u8, panel column j's 4 bytes of group g) −
    /// off[j] for r < R: the offset correction is taken out before the sums leave registers.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn micro<const R: usize>(a: &[&[u8]; R], panel: &[i8], off: &[i32], kg: usize, tile: &mut [[i32; NR]]) {
        let mut acc = [[_mm512_setzero_si512(); NV]; R];
        let bp = panel.as_ptr();
        for g in 0..kg {
            // SAFETY (for the unsafe ops below): panel holds kg·NR·4 bytes, each a row kg·4.
            let bv: [__m512i; NV] = std::array::from_fn(|v| unsafe { _mm512_loadu_si512(bp.add((g * NR + 16 * v) * 4) as *const __m512i) });
            for r in 0..R {
                let word = unsafe { (a[r].as_ptr().add(4 * g) as *const i32).read_unaligned() };
                let av = _mm512_set1_epi32(word);
                for v in 0..NV {
                    acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], av, bv[v]);
                }
            }
        }
        for v in 0..NV {
            // SAFETY: off holds NR offsets, tile R rows of NR.
            let o = unsafe { _mm512_loadu_si512(off.as_ptr().add(16 * v) as *const __m512i) };
            for r in 0..R {
                unsafe { _mm512_storeu_si512(tile[r].as_mut_ptr().add(16 * v) as *mut __m512i, _mm512_sub_epi32(acc[r][v], o)) };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use rayon::prelude::*;

    /// Rows and 8-lane vectors of columns per micro-tile: 4 × 16 outputs in 8 registers, with
    /// b's two vectors and a's broadcast pair beside them.
    const MR: usize = 4;
    const NV: usize = 2;
    /// Columns per panel of b (`pairs::pack_b`).
    pub const NR: usize = 8 * NV;
    /// Rows of c per rayon task: four per batch of 64, so a thread that wakes late is helped
    /// by the other rather than waited for.
    const ROWS_PER_TASK: usize = 4 * MR;

    /// c = store(a·b): a as m rows of kp pair words (`pairs::pack_a`), b as panels of NR
    /// columns of kp pair words each (`pairs::pack_b`).
    #[allow(clippy::too_many_arguments)]
    pub fn gemm<S: super::Store>(a: &[u32], bp: &[u32], c: &mut [S::Out], m: usize, n: usize, kp: usize, st: &S) {
        let panels = n.div_ceil(NR);
        let task = |(blk, cb): (usize, &mut [S::Out])| {
            let rows = cb.len() / n;
            let r0 = blk * ROWS_PER_TASK;
            let mut tile = [[0i32; NR]; MR];
            let row = |i: usize| &a[(r0 + i) * kp..][..kp];
            for p in 0..panels {
                // One panel (kp·NR words: 25 KiB for k = 784) stays in L1 across the row tiles.
                let panel = &bp[p * kp * NR..][..kp * NR];
                let cols = NR.min(n - p * NR);
                let mut i0 = 0;
                while i0 < rows {
                    let live = MR.min(rows - i0);
                    // SAFETY: detect() saw avx2 before choosing Avx2 (tests force it only where
                    // the CPU has it); every slice is as long as the kernel reads (kp words per
                    // row of a, kp·NR per panel, `live` rows of the tile).
                    unsafe {
                        if live == MR {
                            micro::<MR>(&std::array::from_fn(|r| row(i0 + r)), panel, kp, &mut tile);
                        } else {
                            // The last rows one at a time rather than a full tile of repeats:
                            // batch 1 computes one row, not four.
                            for r in 0..live {
                                micro::<1>(&[row(i0 + r)], panel, kp, &mut tile[r..]);
                            }
                        }
                    }
                    for (r, t) in tile.iter().enumerate().take(live) {
                        st.store_row(p * NR, &t[..cols], &mut cb[(i0 + r) * n + p * NR..][..cols]);
                    }
                    i0 += live;
                }
            }
        };
        // Small products are not worth rayon's fork/join.
        if m * n * kp < 1 << 15 {
            c.chunks_mut(ROWS_PER_TASK * n).enumerate().for_each(task);
        } else {
            c.par_chunks_mut(ROWS_PER_TASK * n).enumerate().for_each(task);
        }
    }

    /// tile[r][j] = Σ_p madd(a_r word p, panel column j's word p) for r < R: `vpmaddwd`
    /// multiplies the two i16 halves and adds both products into one i32 lane (exact for
    /// values from i8), and the sums wrap like `wrapping_add`.
    #[target_feature(enable = "avx2")]
    unsafe fn micro<const R: usize>(a: &[&[u32]; R], panel: &[u32], kp: usize, tile: &mut [[i32; NR]]) {
        let mut acc = [[_mm256_setzero_si256(); NV]; R];
        let bp = panel.as_ptr();
        for p in 0..kp {
            // SAFETY (for the unsafe ops below): panel holds kp·NR words, a[r] kp words.
            let bv: [__m256i; NV] = std::array::from_fn(|v| unsafe { _mm256_loadu_si256(bp.add(p * NR + 8 * v) as *const __m256i) });
            for r in 0..R {
                let av = _mm256_set1_epi32(unsafe { *a[r].get_unchecked(p) } as i32);
                for v in 0..NV {
                    acc[r][v] = _mm256_add_epi32(acc[r][v], _mm256_madd_epi16(av, bv[v]));
                }
            }
        }
        for r in 0..R {
            for v in 0..NV {
                unsafe { _mm256_storeu_si256(tile[r].as_mut_ptr().add(8 * v) as *mut __m256i, acc[r][v]) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn naive(a: &[i8], b: &[i8], m: usize, n: usize, k: usize, ta: bool, tb: bool) -> Vec<i32> {
        let mut c = vec![0i32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0i32;
                for kx in 0..k {
                    let x = if ta { a[kx * m + i] } else { a[i * k + kx] } as i32;
                    let y = if tb { b[j * k + kx] } else { b[kx * n + j] } as i32;
                    s = s.wrapping_add(x * y);
                }
                c[i * n + j] = s;
            }
        }
        c
    }

    fn paths() -> Vec<I8Path> {
        let mut p = vec![I8Path::Portable];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            p.push(I8Path::Avx2);
        }
        if I8Path::detect() == I8Path::Vnni {
            p.push(I8Path::Vnni);
        } else {
            eprintln!("this CPU lacks AVX-512 VNNI: the VNNI int8 path is not tested");
        }
        p
    }

    #[test]
    fn every_path_is_exact_on_odd_shapes_and_extremes() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for &(m, n, k) in &[(1, 1, 1), (3, 5, 7), (17, 65, 33), (4, 64, 4), (70, 130, 9), (33, 1, 257), (5, 200, 0), (64, 129, 128)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                // -128 included: the raw GEMM is exact on the full i8 range.
                let a: Vec<i8> = (0..m * k).map(|_| rng.random_range(-128..=127)).collect();
                let b: Vec<i8> = (0..k * n).map(|_| rng.random_range(-128..=127)).collect();
                let want = naive(&a, &b, m, n, k, ta, tb);
                for path in paths() {
                    let mut c = vec![i32::MIN + 7; m * n]; // poisoned
                    gemm_i8(&a, &b, &PackCache::default(), &mut c, m, n, k, ta, tb, path, &Raw);
                    assert_eq!(c, want, "{path:?} {m}x{n}x{k} ta={ta} tb={tb}");
                }
            }
        }
    }

    /// A b packed for one kernel is reused by that kernel's next call and packed afresh when
    /// the same tensor is read another way (transposed), and every product stays exact.
    #[test]
    fn the_packed_b_is_reused_per_kernel_and_layout() {
        let (m, n, k) = (5, 20, 9);
        let a: Vec<i8> = (0..m * k).map(|i| (i as i32 * 7 % 255 - 127) as i8).collect();
        let b: Vec<i8> = (0..k * n).map(|i| (i as i32 * 13 % 255 - 127) as i8).collect();
        let packing: Vec<I8Path> = paths().into_iter().filter(|&p| p != I8Path::Portable).collect();
        assert!(!packing.is_empty() || !cfg!(target_arch = "x86_64"), "an x86-64 CI machine has AVX2");
        for path in packing {
            let cache = PackCache::default();
            let cached = || cache.lock().unwrap().clone().expect("b was packed");
            let mut c = vec![i32::MIN; m * n];
            gemm_i8(&a, &b, &cache, &mut c, m, n, k, false, false, path, &Raw);
            let first = cached();
            assert_eq!((first.path, first.tb), (path, false));
            c.fill(i32::MIN);
            gemm_i8(&a, &b, &cache, &mut c, m, n, k, false, false, path, &Raw);
            assert!(std::sync::Arc::ptr_eq(&first, &cached()), "{path:?} packed b again for the same call");
            assert_eq!(c, naive(&a, &b, m, n, k, false, false), "{path:?} from the cache");
            gemm_i8(&a, &b, &cache, &mut c, m, n, k, false, true, path, &Raw);
            assert!(!std::sync::Arc::ptr_eq(&first, &cached()) && cached().tb, "{path:?} reused b's packing for bᵀ");
            assert_eq!(c, naive(&a, &b, m, n, k, false, true), "{path:?} transposed after a cached plain b");
        }
    }

    #[test]
    fn saturated_operands_accumulate_exactly() {
        // ±127 everywhere: the largest products; k = 1000 sums to ±16 129 000.
        let (m, n, k) = (9, 70, 1000);
        let a = vec![127i8; m * k];
        let b: Vec<i8> = (0..k * n).map(|i| if (i / n) % 2 == 0 { 127 } else { -127 }).collect();
        let b2 = vec![-127i8; k * n];
        for path in paths() {
            let mut c = vec![-1i32; m * n];
            gemm_i8(&a, &b2, &PackCache::default(), &mut c, m, n, k, false, false, path, &Raw);
            assert!(c.iter().all(|&v| v == -127 * 127 * k as i32), "{path:?}: {:?}", &c[..4]);
            gemm_i8(&a, &b, &PackCache::default(), &mut c, m, n, k, false, false, path, &Raw);
            assert_eq!(c, naive(&a, &b, m, n, k, false, false), "{path:?} alternating");
        }
    }

    /// The fused store on every path (VNNI's offset correction included) equals the three f32
    /// steps done one after another on the exact sums, bit for bit, output poisoned with NaN.
    #[test]
    fn every_path_finishes_to_the_separate_f32_steps_bit_for_bit() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for &(m, n, k) in &[(1, 1, 1), (7, 33, 65), (65, 7, 33), (33, 65, 7), (5, 130, 0)] {
            let a: Vec<i8> = (0..m * k).map(|_| rng.random_range(-127..=127)).collect();
            let b: Vec<i8> = (0..k * n).map(|_| rng.random_range(-127..=127)).collect();
            let per_col: Vec<f32> = (0..n).map(|_| rng.random_range(1e-4..1e-2)).collect();
            let bias: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0..2.0)).collect();
            let acc = naive(&a, &b, m, n, k, false, false);
            for scales in [vec![3e-3f32], per_col] {
                for (with_bias, relu) in [(false, false), (true, false), (false, true), (true, true)] {
                    let st = Finish { scales: &scales, act: 1.0, bias: with_bias.then_some(&bias[..]), relu };
                    let want: Vec<u32> = acc
                        .iter()
                        .enumerate()
                        .map(|(i, &v)| {
                            let mut y = v as f32 * scales[if scales.len() == 1 { 0 } else { i % n }];
                            if with_bias {
                                y += bias[i % n];
                            }
                            if relu {
                                y = y.max(0.0);
                            }
                            y.to_bits()
                        })
                        .collect();
                    for path in paths() {
                        let mut c = vec![f32::NAN; m * n];
                        gemm_i8(&a, &b, &PackCache::default(), &mut c, m, n, k, false, false, path, &st);
                        let got: Vec<u32> = c.iter().map(|v| v.to_bits()).collect();
                        assert_eq!(got, want, "{path:?} {m}x{n}x{k} scales {} bias {with_bias} relu {relu}", scales.len());
                    }
                }
            }
        }
    }
}
