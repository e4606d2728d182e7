//! The CPU bf16 GEMM: c (f32) = a (bf16) · b (bf16). With AVX-512 BF16 (`vdpbf16ps`, chosen at
//! run time) each 32-bit lane multiplies a pair of adjacent-k bf16 values of a by the same pair
//! of b and adds both products to an f32 accumulator: 32 multiply-adds per instruction, twice
//! the f32 FMA's 16, and half the bytes read. bf16 × bf16 products are exact in f32, so the
//! result differs from the f32 GEMM of the widened operands only by summation order and by the
//! instruction treating subnormal inputs and outputs as zero (bf16 has f32's exponent range, so
//! only values below 1.2e-38 are affected). With AMX (`tdpbf16ps`, also chosen at run time) one
//! instruction does 8 192 multiply-adds on tiles. Elsewhere `amp.rs` widens to f32 and uses the
//! f32 GEMM. Rayon over blocks of rows, like the other CPU GEMMs.

/// Which kernel multiplies bf16 operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16Path {
    /// AMX `tdpbf16ps`: one instruction multiplies a 16×32 by a 32×16 bf16 tile into 16×16 f32
    /// sums (8 192 multiply-adds).
    Amx,
    /// AVX-512 BF16 `vdpbf16ps`: pairs of bf16 products into f32 lanes.
    Avx512Bf16,
    /// Widen both operands to f32 (exact) and run the f32 GEMM.
    Widen,
}

impl Bf16Path {
    /// The fastest path this CPU runs.
    pub fn detect() -> Bf16Path {
        [Bf16Path::Amx, Bf16Path::Avx512Bf16].into_iter().find(|p| p.available()).unwrap_or(Bf16Path::Widen)
    }

    /// Whether this CPU (and, for AMX, the OS) runs the path.
    pub fn available(self) -> bool {
        match self {
            #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
            Bf16Path::Amx => amx::available(),
            #[cfg(target_arch = "x86_64")]
            Bf16Path::Avx512Bf16 => std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bf16"),
            Bf16Path::Widen => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The path that multiplies an m×k by k×n product: this one, or a narrower one where its
    /// tiles would mostly hold padding. AMX fills 32 × 32 blocks of c from steps of 32 k and
    /// packs a (its rows padded to 32, its k to 32) every call: a CNN's first convolution
    /// (k = 9, n = 16) or the head's 10 classes would be mostly zeros, and packing 100 000 rows
    /// for them cost more than the product. The vector kernel's panels are 64 columns wide.
    /// Below those sizes the operands are widened to f32 (exactly) for the f32 GEMM.
    pub fn for_shape(self, m: usize, n: usize, k: usize) -> Bf16Path {
        let amx_fits = m >= 32 && n >= 32 && k >= 32;
        match self {
            Bf16Path::Amx if amx_fits => Bf16Path::Amx,
            Bf16Path::Amx | Bf16Path::Avx512Bf16 if n >= 48 && Bf16Path::Avx512Bf16.available() => Bf16Path::Avx512Bf16,
            _ => Bf16Path::Widen,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Bf16Path::Amx => "AMX (tdpbf16ps on 16×16 tiles, f32 accumulation)",
            Bf16Path::Avx512Bf16 => "AVX-512 BF16 (vdpbf16ps, f32 accumulation)",
            Bf16Path::Widen => "widened to f32 (no AMX or AVX-512 BF16 kernel in use)",
        }
    }
}

/// Whether f16 operands have a native path on this CPU: never here (AVX-512 FP16 would be
/// needed; gpulab widens f16 to f32). Named so `gpulab info` and the lesson can say why.
pub fn f16_path_name() -> &'static str {
    "widened to f32 (gpulab has no AVX-512 FP16 kernel)"
}

/// c[m, n] = op(a)·op(b), f32, overwritten; op transposes when the flag is set. `path` must be
/// available on this CPU (`Bf16Path::available`); for `Widen` this returns false and leaves c
/// alone (the caller widens). The tests' entry; the ops call `gemm_bf16_into`.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub fn gemm_bf16(a: &[u16], b: &[u16], c: &mut [f32], m: usize, n: usize, k: usize, ta: bool, tb: bool, path: Bf16Path) -> bool {
    gemm_bf16_into(a, b, c, m, n, k, ta, tb, path, &|_, _, sums: &mut [f32], out: &mut [f32]| {
        out.copy_from_slice(sums);
        [0, 0]
    })
    .is_some()
}

/// `gemm_bf16` whose finished sums go through `store(i, j0, sums, out)`: row i's sums for the
/// columns from j0 (mutable, for an epilogue) and the slice of c they belong in. The vector
/// kernel calls it as each tile leaves its registers, so an epilogue and a rounding to 16 bits
/// cost no pass of their own; AMX calls it per 32 × 32 block from the tiles it stored. Returns the sum of what the calls
/// returned (a rounding's [nonzero, flushed] counts), or None for a path this CPU lacks.
#[allow(clippy::too_many_arguments)]
pub fn gemm_bf16_into<O: Send, S: RowStore<O>>(
    a: &[u16],
    b: &[u16],
    c: &mut [O],
    m: usize,
    n: usize,
    k: usize,
    ta: bool,
    tb: bool,
    path: Bf16Path,
    store: &S,
) -> Option<[u64; 2]> {
    use super::pairs::{Pad, pack_a_16, pack_b};
    if path == Bf16Path::Widen || !path.available() {
        return None;
    }
    if m == 0 || n == 0 {
        return Some([0, 0]);
    }
    match path {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        Bf16Path::Amx => {
            // Row-major a with even k is already in pairs: its whole blocks of 32 rows are read
            // where they lie (a copy of a CNN's columns cost as much as their product).
            let packed;
            // SAFETY: every bit pattern is a valid u32.
            let src = match (ta, k % 2, unsafe { a.align_to::<u32>() }) {
                (false, 0, ([], words, [])) => amx::A::Rows { a: words, words: k / 2 },
                _ => {
                    packed = pack_a_16(a, m, k, ta, amx::PAD);
                    amx::A::Packed(&packed)
                }
            };
            Some(amx::gemm(src, &pack_b(b, n, k, tb, amx::NR, amx::PAD, |v| v), c, m, n, amx::PAD.words(k), store))
        }
        #[cfg(target_arch = "x86_64")]
        Bf16Path::Avx512Bf16 => {
            // Row-major a with even k is already in pairs (little-endian: k = 2p low, 2p + 1
            // high): the kernel reads it where it lies when the words are aligned.
            // SAFETY: every bit pattern is a valid u32.
            let packed;
            let a = match (ta, k % 2, unsafe { a.align_to::<u32>() }) {
                (false, 0, ([], words, [])) => words,
                _ => {
                    packed = pack_a_16(a, m, k, ta, Pad::NONE);
                    &packed[..]
                }
            };
            Some(dp::gemm(a, &pack_b(b, n, k, tb, dp::NR, Pad::NONE, |v| v), c, m, n, k.div_ceil(2), store))
        }
        _ => {
            let _ = (a, b, c, ta, tb, Pad::NONE, store);
            None
        }
    }
}

/// Where a GEMM's finished sums go (`gemm_bf16_into`).
pub trait RowStore<O>: Fn(usize, usize, &mut [f32], &mut [O]) -> [u64; 2] + Sync {}
impl<O, F: Fn(usize, usize, &mut [f32], &mut [O]) -> [u64; 2] + Sync> RowStore<O> for F {}

fn add(x: [u64; 2], y: [u64; 2]) -> [u64; 2] {
    [x[0] + y[0], x[1] + y[1]]
}

/// Every row of the `[_, n]` sums through `store` into c, rayon over rows when large.
pub fn store_rows<O: Send, S: RowStore<O>>(sums: &mut [f32], c: &mut [O], n: usize, store: &S) -> [u64; 2] {
    use rayon::prelude::*;
    if n == 0 {
        return [0, 0];
    }
    let row = |(i, (s, o)): (usize, (&mut [f32], &mut [O]))| store(i, 0, s, o);
    if sums.len() >= super::ops::PAR_THRESHOLD {
        sums.par_chunks_mut(n).zip(c.par_chunks_mut(n)).enumerate().map(row).reduce(|| [0, 0], add)
    } else {
        sums.chunks_mut(n).zip(c.chunks_mut(n)).enumerate().map(row).fold([0, 0], add)
    }
}

/// AMX: the 16×16 f32 tiles of c in blocks of 2 × 2 (tmm0–3), a's two row tiles (tmm4–5) and
/// b's two column tiles (tmm6–7) loaded per step of 32 k. The instructions are written in
/// `asm!` (Rust's AMX intrinsics are unstable); the tiles live between the `asm!` blocks of
/// one task, which configures them first and releases them last. Linux hands a process the
/// tile state only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), made once.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx {
    use std::arch::asm;

    use rayon::prelude::*;

    use super::super::pairs::Pad;

    /// a's rows come in blocks of 32 (two tiles); every row and panel column has whole steps of
    /// 16 words (32 k values) — both zero-padded.
    pub const PAD: Pad = Pad { rows: 32, words: 16 };
    /// Columns per panel of b: one tile's 16.
    pub const NR: usize = 16;
    /// Steps of 32 k that a's rows are prefetched ahead of the tile loads.
    const PREFETCH: usize = 2;

    /// Whether the CPU has AMX-TILE and AMX-BF16 and Linux lets this process use the tiles.
    pub fn available() -> bool {
        static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *OK.get_or_init(|| {
            use std::arch::x86_64::{__cpuid, __cpuid_count};
            // CPUID.(EAX=7, ECX=0):EDX bit 22 is AMX-BF16, bit 24 AMX-TILE.
            if __cpuid(0).eax < 7 || __cpuid_count(7, 0).edx & (1 << 22 | 1 << 24) != 1 << 22 | 1 << 24 {
                return false;
            }
            const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
            const XFEATURE_XTILEDATA: libc::c_long = 18;
            // SAFETY: arch_prctl with this request only asks the kernel for permission; it
            // returns 0 when granted (for the whole process) and -1 where it is not supported.
            unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
        })
    }

    /// The 64-byte tile configuration (palette 1): eight tiles of 16 rows × 64 bytes.
    #[repr(C, align(64))]
    struct Config {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        colsb: [u16; 16],
        rows: [u8; 16],
    }

    const CONFIG: Config = Config {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
        rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
    };

    /// The a operand as the tiles read it.
    pub enum A<'a> {
        /// Rows (a multiple of 32) of `kw` words (`pairs::pack_a` with PAD).
        Packed(&'a [u32]),
        /// m rows of `words` pairs, unpadded: whole blocks of 32 rows are loaded where they lie,
        /// but for their last step when `words` is not a multiple of 16 (copied, zero-padded);
        /// a last partial block is packed.
        Rows { a: &'a [u32], words: usize },
    }

    /// One block of 32 rows of a: where its steps of 16 words start and their row stride in
    /// words, how many steps are read there, and the zero-padded copy the rest come from.
    struct Block {
        base: *const u32,
        stride: usize,
        direct: usize,
        rest: Rest,
    }

    /// The steps a block's rows do not supply: a whole block's last step (32 rows of 16 words,
    /// on the stack), or a partial block packed whole.
    // The large variant is the point: one per task on the stack, no allocation per block.
    #[allow(clippy::large_enum_variant)]
    enum Rest {
        Tail([u32; 32 * 16]),
        Packed(Vec<u32>),
    }

    impl Rest {
        fn words(&self) -> &[u32] {
            match self {
                Rest::Tail(t) => t,
                Rest::Packed(p) => p,
            }
        }
    }

    fn block(a: &A<'_>, blk: usize, rows: usize, kw: usize) -> Block {
        match *a {
            A::Packed(p) => Block { base: p[blk * 32 * kw..][..32 * kw].as_ptr(), stride: kw, direct: kw / 16, rest: Rest::Tail([0; 512]) },
            A::Rows { a, words } if rows == 32 => {
                let (rows_of, direct) = (&a[blk * 32 * words..][..32 * words], words / 16);
                let (tail, mut rest) = (words - 16 * direct, [0u32; 32 * 16]);
                if tail > 0 {
                    for (r, dst) in rest.chunks_exact_mut(16).enumerate() {
                        dst[..tail].copy_from_slice(&rows_of[r * words + 16 * direct..][..tail]);
                    }
                }
                Block { base: rows_of.as_ptr(), stride: words, direct, rest: Rest::Tail(rest) }
            }
            A::Rows { a, words } => {
                let mut rest = vec![0u32; 32 * kw];
                for (r, dst) in rest.chunks_exact_mut(kw.max(1)).take(rows).enumerate() {
                    dst[..words].copy_from_slice(&a[(blk * 32 + r) * words..][..words]);
                }
                Block { base: std::ptr::null(), stride: kw, direct: 0, rest: Rest::Packed(rest) }
            }
        }
    }

    /// c = a·b through `store` (`gemm_bf16_into`), each 32 × 32 block as it leaves the tiles:
    /// a as `A` says with `kw` words per padded row, b as panels of NR columns of `kw` words
    /// each (`pairs::pack_b` with PAD).
    pub fn gemm<O: Send, S: super::RowStore<O>>(a: A<'_>, bp: &[u32], c: &mut [O], m: usize, n: usize, kw: usize, store: &S) -> [u64; 2] {
        let panels = n.div_ceil(NR);
        let a_ok = match a {
            A::Packed(p) => p.len() >= m.next_multiple_of(32) * kw,
            A::Rows { a, words } => a.len() >= m * words && words <= kw,
        };
        assert!(a_ok && bp.len() >= panels * kw * NR, "AMX operands packed short");
        let task = |(blk, cb): (usize, &mut [O])| {
            let rows = cb.len() / n;
            let mut counts = [0, 0];
            let ab = block(&a, blk, rows, kw);
            // Step s's two row tiles and their row stride in bytes.
            let tiles = |s: usize| -> (*const u32, *const u32, usize) {
                if s < ab.direct {
                    // SAFETY: steps below `direct` lie inside the block's 32 rows of `stride` words.
                    unsafe { (ab.base.add(s * 16), ab.base.add(16 * ab.stride + s * 16), ab.stride * 4) }
                } else {
                    let w = kw - 16 * ab.direct;
                    let r = &ab.rest.words()[(s - ab.direct) * 16..];
                    (r.as_ptr(), r[16 * w..].as_ptr(), w * 4)
                }
            };
            // 32 × 32 sums of one block, 128 bytes a row.
            let mut out = [[0f32; 32]; 32];
            // SAFETY: `available()` was true (gemm_bf16 checks); the configuration is a valid
            // palette-1 layout for every tile used below.
            unsafe { asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly)) };
            let mut p = 0;
            while p < panels {
                // An odd last panel is paired with itself; its copy is not stored.
                let q = (p + 1).min(panels - 1);
                let (b0, b1) = (&bp[p * kw * NR..][..kw * NR], &bp[q * kw * NR..][..kw * NR]);
                // SAFETY: every tile load reads 16 rows of 64 bytes inside the block's rows
                // (`tiles`), b0 and b1 (word rows s·16..s·16+16 of NR words); the stores write
                // 16 rows of 64 bytes inside `out` (128-byte rows).
                unsafe {
                    asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
                    for s in 0..kw / 16 {
                        let (a0, a2, sa) = tiles(s);
                        if s + PREFETCH < kw / 16 {
                            // a's 32 rows are 32 streams, each a line a step: fetched ahead so
                            // the tile loads find them in L1.
                            let (p0, p2, ps) = tiles(s + PREFETCH);
                            for r in 0..16 {
                                use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
                                _mm_prefetch::<_MM_HINT_T0>((p0 as *const i8).add(r * ps));
                                _mm_prefetch::<_MM_HINT_T0>((p2 as *const i8).add(r * ps));
                            }
                        }
                        asm!(
                            "tileloadd tmm4, [{a} + {sa}*1]",
                            "tileloadd tmm5, [{a2} + {sa}*1]",
                            "tileloadd tmm6, [{b0} + {sb}*1]",
                            "tileloadd tmm7, [{b1} + {sb}*1]",
                            "tdpbf16ps tmm0, tmm4, tmm6",
                            "tdpbf16ps tmm1, tmm4, tmm7",
                            "tdpbf16ps tmm2, tmm5, tmm6",
                            "tdpbf16ps tmm3, tmm5, tmm7",
                            a = in(reg) a0,
                            a2 = in(reg) a2,
                            b0 = in(reg) b0.as_ptr().add(s * 16 * NR),
                            b1 = in(reg) b1.as_ptr().add(s * 16 * NR),
                            sa = in(reg) sa,
                            sb = in(reg) NR * 4,
                            options(nostack, readonly),
                        );
                    }
                    let o = out.as_mut_ptr() as *mut f32;
                    asm!(
                        "tilestored [{o} + {so}*1], tmm0",
                        "tilestored [{o1} + {so}*1], tmm1",
                        "tilestored [{o2} + {so}*1], tmm2",
                        "tilestored [{o3} + {so}*1], tmm3",
                        o = in(reg) o,
                        o1 = in(reg) o.add(16),
                        o2 = in(reg) o.add(16 * 32),
                        o3 = in(reg) o.add(16 * 32 + 16),
                        so = in(reg) 32usize * 4,
                        options(nostack),
                    );
                }
                let (j0, cols) = (p * NR, (2 * NR).min(n - p * NR));
                for (r, row) in out.iter_mut().enumerate().take(rows) {
                    let got = store(blk * 32 + r, j0, &mut row[..cols], &mut cb[r * n + j0..][..cols]);
                    counts = super::add(counts, got);
                }
                p += 2;
            }
            // SAFETY: releases the tiles this task configured.
            unsafe { asm!("tilerelease", options(nostack, nomem)) };
            counts
        };
        // A block of 32 × 32 is 4 instructions per 32 k: forking pays only for many blocks.
        if m * n * kw < 1 << 20 {
            c.chunks_mut(32 * n).enumerate().map(task).fold([0, 0], super::add)
        } else {
            c.par_chunks_mut(32 * n).enumerate().map(task).reduce(|| [0, 0], super::add)
        }
    }
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

    /// c = a·b through `store` (`gemm_bf16_into`): a as m rows of kp words, b as panels of NR
    /// columns (`pairs::pack_a`, `pack_b`).
    pub fn gemm<O: Send, S: super::RowStore<O>>(a: &[u32], bp: &[u32], c: &mut [O], m: usize, n: usize, kp: usize, store: &S) -> [u64; 2] {
        let panels = n.div_ceil(NR);
        let task = |(blk, cb): (usize, &mut [O])| {
            let rows = cb.len() / n;
            let r0 = blk * ROWS_PER_TASK;
            let mut tile = [[0f32; NR]; MR];
            let mut counts = [0, 0];
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
                    for (r, sums) in tile.iter_mut().enumerate().take(live) {
                        let got = store(r0 + i0 + r, p * NR, &mut sums[..cols], &mut cb[(i0 + r) * n + p * NR..][..cols]);
                        counts = super::add(counts, got);
                    }
                }
            }
            counts
        };
        debug_assert_eq!(c.len(), m * n);
        // Small products are not worth rayon's fork/join.
        if m * n * kp < 1 << 16 {
            c.chunks_mut(ROWS_PER_TASK * n).enumerate().map(task).fold([0, 0], super::add)
        } else {
            c.par_chunks_mut(ROWS_PER_TASK * n).enumerate().map(task).reduce(|| [0, 0], super::add)
        }
    }

    /// tile[r][j] = Σ_p dot2(a_r word p, panel column j's word p), in f32.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn micro(a: &[&[u32]; MR], panel: &[u32], kp: usize, tile: &mut [[f32; NR]; MR]) {
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        let bp = panel.as_ptr();
        for p in 0..kp {
            // SAFETY (for the unsafe ops below): panel holds kp·NR words, a[r] kp words.
            let bv: [__m512bh; NV] = std::array::from_fn(|v| unsafe {
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(bp.add(p * NR + 16 * v) as *const __m512i))
            });
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

/// The f64 reference every bf16 kernel's tests hold their products to.
#[cfg(test)]
pub(super) mod reference {
    use crate::tensor::{DType, float16};
    use rand::Rng;

    /// `len` random bf16 values in [-2, 2).
    pub fn operand(rng: &mut impl Rng, len: usize) -> Vec<u16> {
        (0..len).map(|_| float16::round_bits(DType::BF16, rng.random_range(-2.0..2.0))).collect()
    }

    /// c = op(a)·op(b) within the rounding of k f32 sums (the products are exact in f32).
    pub fn check(a: &[u16], b: &[u16], c: &[f32], [m, n, k]: [usize; 3], ta: bool, tb: bool, label: &str) {
        let w = |bits: u16| float16::widen(DType::BF16, bits) as f64;
        for i in 0..m {
            for j in 0..n {
                let (mut want, mut mag) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let x = w(if ta { a[p * m + i] } else { a[i * k + p] });
                    let y = w(if tb { b[j * k + p] } else { b[p * n + j] });
                    want += x * y;
                    mag += (x * y).abs();
                }
                let tol = mag * (k as f64 + 1.0) * f32::EPSILON as f64;
                let got = c[i * n + j] as f64;
                assert!((got - want).abs() <= tol, "{label} {m}x{n}x{k} ta={ta} tb={tb} c[{i},{j}] = {got}, want {want}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn every_native_path_matches_an_f64_reference_on_odd_shapes_and_transposes() {
        for path in [Bf16Path::Amx, Bf16Path::Avx512Bf16] {
            if path.available() {
                check_path(path);
            } else {
                eprintln!("this CPU lacks {}: that path is not tested (the widening path is, in tests/it/amp.rs)", path.name());
            }
        }
        assert!(!gemm_bf16(&[0], &[0], &mut [0.0], 1, 1, 1, false, false, Bf16Path::Widen), "the widening path is the caller's");
    }

    fn check_path(path: Bf16Path) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        // AMX: rows past a block of 32, columns past a pair of 16-wide tiles (an odd last
        // panel), k past steps of 32; the vector kernel: its 6 × 64 tiles.
        for &(m, n, k) in &[
            (1, 1, 1),
            (3, 5, 7),
            (7, 65, 33),
            (25, 64, 2),
            (70, 130, 9),
            (33, 1, 257),
            (5, 200, 0),
            (49, 129, 128),
            (64, 48, 64),
            (97, 17, 95),
            // Row-major a read where it lies: whole blocks with a partial last step of 32 k (a
            // CNN's 144 taps), one block whose k fits one step.
            (65, 40, 144),
            (32, 33, 18),
        ] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let (a, b) = (reference::operand(&mut rng, m * k), reference::operand(&mut rng, k * n));
                let mut c = vec![f32::NAN; m * n]; // poisoned
                assert!(gemm_bf16(&a, &b, &mut c, m, n, k, ta, tb, path));
                reference::check(&a, &b, &c, [m, n, k], ta, tb, &format!("{path:?}"));
            }
        }
    }
}
