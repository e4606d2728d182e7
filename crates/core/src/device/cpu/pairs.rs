//! Operands packed in pairs of adjacent k for the CPU's pair-dot-product GEMMs: AVX-512 BF16's
//! `vdpbf16ps` (two bf16 products per f32 lane) and AVX2's `vpmaddwd` (two i16 products per
//! i32 lane, the int8 GEMM's path without VNNI). Each 32-bit word holds the 16-bit values of k
//! = 2p (low half) and 2p + 1 (high half); an odd k is padded with zero, which adds nothing.

#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use rayon::prelude::*;

/// Below this many packed words, packing runs on the calling thread.
const PAR_WORDS: usize = 1 << 15;
/// Rows of a transposed a packed together (`pack_a`).
const TA_ROWS: usize = 16;

/// A packed operand in a buffer this thread reuses: a fresh zeroed Vec per GEMM call faulted its
/// pages in every time (an MLP's bf16 step packed ~2 MB a step, and its page faults cost more
/// than its AMX products' loads).
pub struct Packed(Vec<u32>);

/// Buffers kept per thread, and the largest kept (16 MiB): a CNN's huge columns are freed.
const SPARE_MAX: usize = 4;
const SPARE_WORDS: usize = 1 << 22;

thread_local! {
    static SPARE: std::cell::RefCell<Vec<Vec<u32>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Packed {
    /// `len` zero words, in the smallest spare buffer that holds them (else a new one).
    fn zeroed(len: usize) -> Packed {
        let spare = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            let fits = (0..s.len()).filter(|&i| s[i].capacity() >= len).min_by_key(|&i| s[i].capacity());
            fits.map(|i| s.swap_remove(i))
        });
        let mut v = spare.ok().flatten().unwrap_or_default();
        v.clear();
        v.resize(len, 0);
        Packed(v)
    }

    /// The words as a Vec of their own (a packed form kept with its tensor).
    pub fn into_vec(mut self) -> Vec<u32> {
        std::mem::take(&mut self.0)
    }
}

impl std::ops::Deref for Packed {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        &self.0
    }
}

impl std::ops::DerefMut for Packed {
    fn deref_mut(&mut self) -> &mut [u32] {
        &mut self.0
    }
}

impl Drop for Packed {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        if v.capacity() == 0 || v.capacity() > SPARE_WORDS {
            return;
        }
        // At thread exit the spares are gone already: the buffer is simply freed.
        let _ = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_MAX {
                s.push(v);
            }
        });
    }
}

fn word(lo: u16, hi: u16) -> u32 {
    lo as u32 | ((hi as u32) << 16)
}

/// Zero padding a kernel that reads whole tiles wants: rows (of a) and words per row (of a, and
/// per panel column of b) rounded up to these multiples.
#[derive(Clone, Copy)]
pub struct Pad {
    pub rows: usize,
    pub words: usize,
}

impl Pad {
    pub const NONE: Pad = Pad { rows: 1, words: 1 };

    /// Words per row for k values.
    pub fn words(self, k: usize) -> usize {
        k.div_ceil(2).next_multiple_of(self.words)
    }
}

/// op(a) ([m, k], or [k, m] when `ta`) as m rows of k.div_ceil(2) words, each value mapped to
/// 16 bits by `bits`, then zero rows and words up to `pad`'s multiples (`pad.words(k)` words
/// per row). Rows in parallel for large operands.
pub fn pack_a<T: Copy + Sync>(a: &[T], m: usize, k: usize, ta: bool, pad: Pad, bits: impl Fn(T) -> u16 + Sync) -> Packed {
    let (kp, stride) = (k.div_ceil(2), pad.words(k));
    let mut out = Packed::zeroed(m.next_multiple_of(pad.rows) * stride);
    if kp == 0 {
        return out;
    }
    if ta {
        // a is [k, m]: a block of TA_ROWS rows at a time reads each pair of a's rows where they
        // lie (contiguous) rather than one column of a per row, which re-read the whole
        // operand from memory once per row (a weight gradient's k is the batch's pixels).
        let block = |(bi, dst): (usize, &mut [u32])| {
            let i0 = bi * TA_ROWS;
            let rows = TA_ROWS.min(m.saturating_sub(i0));
            if rows == 0 {
                return; // padding rows: zero
            }
            for p in 0..kp {
                let lo = &a[2 * p * m + i0..][..rows];
                let hi = (2 * p + 1 < k).then(|| &a[(2 * p + 1) * m + i0..][..rows]);
                for (r, &l) in lo.iter().enumerate() {
                    dst[r * stride + p] = word(bits(l), hi.map_or(0, |h| bits(h[r])));
                }
            }
        };
        if out.len() >= PAR_WORDS {
            out.par_chunks_mut(TA_ROWS * stride).enumerate().for_each(block);
        } else {
            out.chunks_mut(TA_ROWS * stride).enumerate().for_each(block);
        }
        return out;
    }
    let row = |(i, dst): (usize, &mut [u32])| {
        if i >= m {
            return;
        }
        // Whole pairs in a loop the compiler vectorises, then the odd k's last value.
        let dst = &mut dst[..kp];
        let src = &a[i * k..][..k];
        for (w, pair) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *w = word(bits(pair[0]), bits(pair[1]));
        }
        if k % 2 == 1 {
            dst[kp - 1] = word(bits(src[k - 1]), 0);
        }
    };
    if out.len() >= PAR_WORDS {
        out.par_chunks_mut(stride).enumerate().for_each(row);
    } else {
        out.chunks_mut(stride).enumerate().for_each(row);
    }
    out
}

/// `pack_a` of 16-bit values as they are: a transposed a (a weight gradient's, stored [k, m])
/// goes 16 rows × 16 pairs at a time through an AVX-512 transpose in registers where the CPU
/// has it; the scalar gather wrote one word per store, strided, and was a tenth of an MLP's
/// bf16 step.
pub fn pack_a_16(a: &[u16], m: usize, k: usize, ta: bool, pad: Pad) -> Packed {
    #[cfg(target_arch = "x86_64")]
    if ta && k >= 32 && super::gemm_bf16_narrow::available() {
        let stride = pad.words(k);
        let mut out = Packed::zeroed(m.next_multiple_of(pad.rows) * stride);
        let block = |(bi, dst): (usize, &mut [u32])| {
            let i0 = bi * TA_ROWS;
            let rows = TA_ROWS.min(m.saturating_sub(i0));
            if rows == 0 {
                return;
            }
            // Whole blocks of 16 pairs with both values in registers, the rest one word at a time.
            let vec_pairs = k / 2 / 16 * 16;
            for p0 in (0..vec_pairs).step_by(16) {
                // SAFETY: the CPU has AVX-512F/BW/VL; rows 2·p0.. 2·p0 + 31 < k of a hold m
                // values from i0 + rows ≤ m; dst holds `rows` rows of `stride` ≥ p0 + 16 words.
                unsafe { avx512::transpose_pairs(a, m, i0, rows, p0, dst, stride) };
            }
            for p in vec_pairs..k.div_ceil(2) {
                for r in 0..rows {
                    let hi = if 2 * p + 1 < k { a[(2 * p + 1) * m + i0 + r] } else { 0 };
                    dst[r * stride + p] = word(a[2 * p * m + i0 + r], hi);
                }
            }
        };
        if out.len() >= PAR_WORDS {
            out.par_chunks_mut(TA_ROWS * stride).enumerate().for_each(block);
        } else {
            out.chunks_mut(TA_ROWS * stride).enumerate().for_each(block);
        }
        return out;
    }
    pack_a(a, m, k, ta, pad, |v| v)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// dst[r·stride + p0 + q] = (a[2(p0+q)][i0+r], a[2(p0+q)+1][i0+r]) for r < rows, q < 16: the
    /// 16 pairs' words built one vector per pair (16 rows wide), then transposed 16 × 16.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub unsafe fn transpose_pairs(a: &[u16], m: usize, i0: usize, rows: usize, p0: usize, dst: &mut [u32], stride: usize) {
        let mask: __mmask16 = ((1u32 << rows) - 1) as u16;
        let load = |kx: usize| {
            // SAFETY: (caller) row kx of a holds i0 + rows ≤ m values past i0; the mask reads those.
            let v = unsafe { _mm256_maskz_loadu_epi16(mask, a.as_ptr().add(kx * m + i0) as *const i16) };
            _mm512_cvtepu16_epi32(v)
        };
        let r: [__m512i; 16] = std::array::from_fn(|q| {
            let p = p0 + q;
            _mm512_or_si512(load(2 * p), _mm512_slli_epi32::<16>(load(2 * p + 1)))
        });
        // 32-bit, then 64-bit interleaves within 128-bit lanes: u[4g + c] holds, in lane L,
        // column 4L + c of rows 4g..4g + 4.
        let t: [__m512i; 16] =
            std::array::from_fn(|i| if i % 2 == 0 { _mm512_unpacklo_epi32(r[i], r[i + 1]) } else { _mm512_unpackhi_epi32(r[i - 1], r[i]) });
        let u: [__m512i; 16] = std::array::from_fn(|i| {
            let (g, c) = (i / 4, i % 4);
            let (x, y) = (t[4 * g + c / 2], t[4 * g + c / 2 + 2]);
            if c % 2 == 0 { _mm512_unpacklo_epi64(x, y) } else { _mm512_unpackhi_epi64(x, y) }
        });
        for c in 0..4 {
            let v = _mm512_shuffle_i32x4::<0x88>(u[c], u[4 + c]);
            let w = _mm512_shuffle_i32x4::<0xdd>(u[c], u[4 + c]);
            let x = _mm512_shuffle_i32x4::<0x88>(u[8 + c], u[12 + c]);
            let y = _mm512_shuffle_i32x4::<0xdd>(u[8 + c], u[12 + c]);
            let cols = [
                _mm512_shuffle_i32x4::<0x88>(v, x),
                _mm512_shuffle_i32x4::<0x88>(w, y),
                _mm512_shuffle_i32x4::<0xdd>(v, x),
                _mm512_shuffle_i32x4::<0xdd>(w, y),
            ];
            for (l, col) in cols.into_iter().enumerate() {
                let row = 4 * l + c;
                if row < rows {
                    // SAFETY: (caller) dst holds row `row`'s words p0..p0 + 16.
                    unsafe { _mm512_storeu_si512(dst.as_mut_ptr().add(row * stride + p0) as *mut __m512i, col) };
                }
            }
        }
    }
}

/// op(b) ([k, n], or [n, k] when `tb`) packed panel by panel (`nr` columns each, the last
/// padded with zero columns), then pair by pair of k: word p·nr + j of a panel holds column j's
/// values for k = 2p, 2p+1, so one vector load feeds nr consecutive columns; each panel has
/// `pad.words(k)` rows of words (`pad.rows` is a's alone). Panels in parallel for large
/// operands; the inner loops run over contiguous memory on at least one side.
pub fn pack_b<T: Copy + Sync>(b: &[T], n: usize, k: usize, tb: bool, nr: usize, pad: Pad, bits: impl Fn(T) -> u16 + Sync) -> Packed {
    let (kp, words) = (k.div_ceil(2), pad.words(k));
    let mut out = Packed::zeroed(n.div_ceil(nr) * words * nr);
    if out.is_empty() || kp == 0 {
        return out;
    }
    let panel = |(pi, dst): (usize, &mut [u32])| {
        let j0 = pi * nr;
        let cols = nr.min(n - j0);
        if tb {
            // b is [n, k]: row j's pairs are its words already; scatter them down the panel.
            for jj in 0..cols {
                for (p, pair) in b[(j0 + jj) * k..][..k].chunks(2).enumerate() {
                    dst[p * nr + jj] = word(bits(pair[0]), pair.get(1).map_or(0, |&v| bits(v)));
                }
            }
        } else {
            // b is [k, n]: interleave two rows, a panel's columns at a time.
            for p in 0..kp {
                let d = &mut dst[p * nr..][..cols];
                let lo = &b[2 * p * n + j0..][..cols];
                if 2 * p + 1 < k {
                    let hi = &b[(2 * p + 1) * n + j0..][..cols];
                    d.iter_mut().zip(lo).zip(hi).for_each(|((w, &l), &h)| *w = word(bits(l), bits(h)));
                } else {
                    d.iter_mut().zip(lo).for_each(|(w, &l)| *w = bits(l) as u32);
                }
            }
        }
    };
    if out.len() >= PAR_WORDS {
        out.par_chunks_mut(words * nr).enumerate().for_each(panel);
    } else {
        out.chunks_mut(words * nr).enumerate().for_each(panel);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word a packed operand must hold for (row or column i, pair p), from the plain
    /// definition: value (i, 2p) low, (i, 2p+1) high, zero beyond k.
    fn want(get: impl Fn(usize, usize) -> u16, i: usize, p: usize, k: usize) -> u32 {
        let v = |kx: usize| if kx < k { get(i, kx) } else { 0 };
        v(2 * p) as u32 | ((v(2 * p + 1) as u32) << 16)
    }

    /// The transposing AVX-512 path packs what the generic one does: rows past a block of 16, an
    /// odd k, pairs past blocks of 16, both padded layouts, the parallel arm.
    #[test]
    fn the_16_bit_transposing_pack_matches_the_generic_one() {
        for &(m, k) in &[(16, 32), (37, 71), (5, 33), (200, 333), (784, 64)] {
            let a: Vec<u16> = (0..m * k).map(|i| (i * 7919 % 65521) as u16).collect();
            for pad in [Pad::NONE, Pad { rows: 32, words: 16 }] {
                assert_eq!(&pack_a_16(&a, m, k, true, pad)[..], &pack_a(&a, m, k, true, pad, |v| v)[..], "{m}x{k} pad {}", pad.rows);
            }
        }
    }

    #[test]
    fn both_packers_hold_every_pair_where_the_kernels_read_it() {
        // 200 × 333 crosses PAR_WORDS, so the parallel arm is checked too.
        for &(rows, k) in &[(1, 1), (3, 7), (5, 8), (17, 0), (200, 333)] {
            let vals: Vec<i8> = (0..rows * k).map(|i| (i * 37 % 255) as i8).collect();
            let bits = |v: i8| v as i16 as u16;
            for t in [false, true] {
                // Stored [rows, k] (a, or b with tb) or [k, rows] (a with ta, or b).
                let get = |i: usize, kx: usize| bits(if t { vals[kx * rows + i] } else { vals[i * k + kx] });
                // Unpadded (the AVX-512 and AVX2 kernels) and padded to AMX's whole tiles.
                for pad in [Pad::NONE, Pad { rows: 32, words: 16 }] {
                    let a = pack_a(&vals, rows, k, t, pad, bits);
                    let kp = pad.words(k);
                    assert_eq!(a.len(), rows.next_multiple_of(pad.rows) * kp);
                    for i in 0..rows.next_multiple_of(pad.rows) {
                        for p in 0..kp {
                            let expect = if i < rows { want(get, i, p, k) } else { 0 };
                            assert_eq!(a[i * kp + p], expect, "pack_a {rows}x{k} ta={t} row {i} pair {p} pad {}", pad.rows);
                        }
                    }
                    for nr in [8, 16, 64] {
                        let b = pack_b(&vals, rows, k, !t, nr, pad, bits);
                        assert_eq!(b.len(), rows.div_ceil(nr) * kp * nr);
                        for j in 0..rows.div_ceil(nr) * nr {
                            for p in 0..kp {
                                let w = b[(j / nr * kp + p) * nr + j % nr];
                                let expect = if j < rows { want(get, j, p, k) } else { 0 };
                                assert_eq!(w, expect, "pack_b nr={nr} {rows}x{k} tb={} column {j} pair {p} pad {}", !t, pad.words);
                            }
                        }
                    }
                }
            }
        }
    }
}
