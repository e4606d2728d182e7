//! One f32 stage of the CNN (3×3 convolution, padding 1, + bias, ReLU, 2×2 max-pool) fused on
//! the CPU: the convolution is computed straight from a zero-padded copy of each image, so no
//! column matrix is written or read, and the convolution's output lives only in a per-image
//! buffer that the pool reads while it is in cache. The backward pass is fused alike: the
//! pool's and ReLU's gradient scattered into a padded per-image buffer, then the weight and
//! bias gradients and the input gradient (a convolution with the flipped kernel) from it.
//!
//! Each image's pixels are walked on the padded grid, flattened: output j = y·(W+2) + x reads
//! input j + ky·(W+2) + kx for tap (ky, kx), the same offset for every pixel, so a block of P
//! neighbouring outputs is P broadcasts times each tap's weight vectors (the two columns per
//! row past the image are computed and dropped). Output channels are vector lanes (`Lanes`).
//!
//! The values equal im2col + GEMM + bias-ReLU + max_pool up to the order of each sum; the
//! winners (`argmax`) have `max_pool`'s meaning. Weight gradients are summed per fixed group of
//! images and the groups in order, so the bits do not depend on the thread count.
//!
//! Under autocast (`round`: the 16-bit type) the stage has the numerics of the 16-bit op path
//! (16-bit columns and weights, f32 sums): the input images and the convolution's output
//! gradient are rounded to the 16-bit type as they are copied, the weights are the 16-bit
//! copy's values, and the f32 kernels sum their exact products (round.rs).

use rayon::prelude::*;

use super::lanes::{LANES, Lanes, Portable};
use crate::tensor::DType;
pub use round::Flushed;

mod round;

/// Images per partial weight gradient (fixed: the sum's order must not follow the threads).
const GROUP: usize = 4;

/// The most output channels fused (four vectors per pixel); wider stages use the op path.
pub const MAX_CHANNELS: usize = 4 * LANES;

/// Which lanes the kernels run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Avx512,
    /// The tests' reference for machines without AVX-512 (the op path runs there).
    #[cfg_attr(not(test), allow(dead_code))]
    Portable,
}

impl Path {
    /// AVX-512 where the CPU has it; None elsewhere (the op path is faster than the portable
    /// lanes there).
    pub fn fastest() -> Option<Path> {
        #[cfg(target_arch = "x86_64")]
        if super::lanes::Avx512::available() {
            return Some(Path::Avx512);
        }
        None
    }
}

/// One stage's shapes, per image.
#[derive(Clone, Copy, Debug)]
pub struct Stage {
    pub batch: usize,
    pub cin: usize,
    pub cout: usize,
    pub h: usize,
    pub w: usize,
}

/// The per-image layout: padded row `wp`, `npad` flattened outputs (a multiple of the block),
/// `plane` padded values per input channel, `cpad` lanes per output pixel.
#[derive(Clone, Copy)]
struct Layout {
    s: Stage,
    wp: usize,
    npad: usize,
    plane: usize,
    cpad: usize,
    cinpad: usize,
    offs: [usize; 9],
    /// Autocast's 16-bit type: inputs and output gradients are rounded to it.
    round: Option<DType>,
}

impl Layout {
    /// `block`: the pixels one kernel call computes (every loop reads at most `block` + 2·wp + 2
    /// past its start).
    fn new(s: Stage, block: usize, round: Option<DType>) -> Self {
        let wp = s.w + 2;
        let npad = (s.h * wp).div_ceil(block) * block;
        let plane = npad + 2 * wp + 3;
        let offs = std::array::from_fn(|t| (t / 3) * wp + t % 3);
        Layout { s, wp, npad, plane, cpad: s.cout.div_ceil(LANES) * LANES, cinpad: s.cin.div_ceil(LANES) * LANES, offs, round }
    }

    fn pooled(&self) -> (usize, usize) {
        (self.s.h / 2, self.s.w / 2)
    }

    /// Image `img` (CHW) into `pad` ([cin][plane], zero border), rounded under autocast.
    fn pad_input(&self, img: &[f32], pad: &mut [f32]) {
        let (h, w) = (self.s.h, self.s.w);
        pad.fill(0.0);
        for (src, dst) in img.chunks_exact(h * w).zip(pad.chunks_exact_mut(self.plane)) {
            for (row, d) in src.chunks_exact(w).zip(dst[self.wp + 1..].chunks_mut(self.wp)) {
                match self.round {
                    None => d[..w].copy_from_slice(row),
                    Some(dt) => round::round_into(dt, row, &mut d[..w]),
                }
            }
        }
    }
}

/// Weights `[9·cin, cout]` with each row padded to `cpad` lanes (and the bias to `cpad`).
fn pad_rows(v: &[f32], cout: usize, cpad: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len() / cout * cpad];
    for (src, dst) in v.chunks_exact(cout).zip(out.chunks_exact_mut(cpad)) {
        dst[..cout].copy_from_slice(src);
    }
    out
}

/// The forward: `pooled` and `argmax` (CHW, `[batch, cout·(h/2)·(w/2)]`) from CHW images `x`,
/// weights `[9·cin, cout]` (under autocast, `round`, the 16-bit copy's values) and bias `[cout]`.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    path: Path,
    s: Stage,
    round: Option<DType>,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    pooled: &mut [f32],
    argmax: &mut [u32],
) {
    assert!(s.cout <= MAX_CHANNELS, "fused stage {s:?}");
    // The pixels per kernel call for `nv` vectors per pixel: as many accumulators as the 32
    // vector registers hold beside the weights.
    let f = Fwd { x, weight, bias, round };
    match s.cout.div_ceil(LANES) {
        1 => f.stage::<1, 16>(path, s, pooled, argmax),
        2 => f.stage::<2, 8>(path, s, pooled, argmax),
        3 => f.stage::<3, 6>(path, s, pooled, argmax),
        _ => f.stage::<4, 4>(path, s, pooled, argmax),
    }
}

/// The forward's inputs.
struct Fwd<'a> {
    x: &'a [f32],
    weight: &'a [f32],
    bias: &'a [f32],
    round: Option<DType>,
}

/// One image's scratch: its padded copy and its convolution's output.
type FwdScratch = (Vec<f32>, Vec<f32>);

/// What every image's forward reads: the layout, the inputs, the padded weights and bias.
type Prepared<'a> = (Layout, &'a [f32], Vec<f32>, Vec<f32>);

impl Fwd<'_> {
    fn stage<const NV: usize, const P: usize>(&self, path: Path, s: Stage, pooled: &mut [f32], argmax: &mut [u32]) {
        assert!(s.cout <= NV * LANES && s.h >= 2 && s.w >= 2, "fused stage {s:?} with {NV} vectors");
        let l = Layout::new(s, P, self.round);
        let prep: Prepared = (l, self.x, pad_rows(self.weight, s.cout, l.cpad), pad_rows(self.bias, s.cout, l.cpad));
        let (ph, pw) = l.pooled();
        let (per_in, per_out) = (s.cin * s.h * s.w, s.cout * ph * pw);
        assert!(self.x.len() == s.batch * per_in && pooled.len() == s.batch * per_out && argmax.len() == pooled.len());
        assert!(prep.2.len() == 9 * s.cin * l.cpad && prep.3.len() == l.cpad);
        let scratch = || (vec![0f32; s.cin * l.plane], vec![0f32; l.npad * l.cpad]);
        let image = |n: usize, sc: &mut FwdScratch, po: &mut [f32], ar: &mut [u32]| match path {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Path::Avx512` is only handed out by `fastest` on a CPU with AVX-512F
            // (and by tests after the same check).
            Path::Avx512 => unsafe { image_avx512::<NV, P>(&prep, n, sc, (po, ar)) },
            _ => image_on::<Portable, NV, P>(&prep, n, sc, (po, ar)),
        };
        if s.batch > 1 && rayon::current_num_threads() > 1 {
            pooled
                .par_chunks_mut(per_out)
                .zip(argmax.par_chunks_mut(per_out))
                .enumerate()
                .for_each_init(scratch, |sc, (n, (po, ar))| image(n, sc, po, ar));
        } else {
            let mut sc = scratch();
            for (n, (po, ar)) in pooled.chunks_mut(per_out).zip(argmax.chunks_mut(per_out)).enumerate() {
                image(n, &mut sc, po, ar);
            }
        }
    }
}

/// One image on AVX-512: a `#[target_feature]` function per image, because the rayon closures
/// that call it are compiled for the baseline target (a closure does not inherit the feature).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn image_avx512<const NV: usize, const P: usize>(prep: &Prepared<'_>, n: usize, sc: &mut FwdScratch, out: (&mut [f32], &mut [u32])) {
    image_on::<super::lanes::Avx512, NV, P>(prep, n, sc, out)
}

/// Image n into its pooled values and winners.
#[inline(always)]
fn image_on<L: Lanes, const NV: usize, const P: usize>(prep: &Prepared<'_>, n: usize, sc: &mut FwdScratch, out: (&mut [f32], &mut [u32])) {
    let (l, x, wv, bv) = prep;
    let per_in = l.s.cin * l.s.h * l.s.w;
    let (pad, conv) = sc;
    l.pad_input(&x[n * per_in..][..per_in], pad);
    conv_image::<L, NV, P>(l, pad, wv, bv, conv);
    pool_image::<L, NV>(l, n, conv, out.0, out.1);
}

/// relu(conv + bias) of one padded image into `conv` ([npad][cpad]).
#[inline(always)]
fn conv_image<L: Lanes, const NV: usize, const P: usize>(l: &Layout, pad: &[f32], wv: &[f32], bv: &[f32], conv: &mut [f32]) {
    assert!(pad.len() >= l.s.cin * l.plane && conv.len() >= l.npad * l.cpad && l.npad.is_multiple_of(P));
    let (pad, wv, bv, out) = (pad.as_ptr(), wv.as_ptr(), bv.as_ptr(), conv.as_mut_ptr());
    // SAFETY: block jb reads pad[c·plane + jb + p + offs[t]] < c·plane + npad + 2·wp + 3 =
    // (c + 1)·plane, weights rows < 9·cin and lanes < cpad, and writes conv rows < npad (the
    // asserts above and in `forward_stage`).
    unsafe {
        for jb in (0..l.npad).step_by(P) {
            let mut acc: [[L; NV]; P] = [std::array::from_fn(|v| L::load(bv.add(v * LANES))); P];
            for c in 0..l.s.cin {
                let src = pad.add(c * l.plane + jb);
                for (t, &off) in l.offs.iter().enumerate() {
                    let row = wv.add((c * 9 + t) * l.cpad);
                    let wt: [L; NV] = std::array::from_fn(|v| L::load(row.add(v * LANES)));
                    for (p, a) in acc.iter_mut().enumerate() {
                        let xv = L::splat(*src.add(off + p));
                        for v in 0..NV {
                            a[v] = xv.mul_add(wt[v], a[v]);
                        }
                    }
                }
            }
            for (p, a) in acc.iter().enumerate() {
                for (v, a) in a.iter().enumerate() {
                    a.relu().store(out.add((jb + p) * l.cpad + v * LANES));
                }
            }
        }
    }
}

/// The 2×2 pool of one image's `conv` into its CHW `pooled` values and `argmax` winners
/// (indices into the stage's HWC output `[pixels, cout]`, as `max_pool` gives).
#[inline(always)]
fn pool_image<L: Lanes, const NV: usize>(l: &Layout, n: usize, conv: &[f32], pooled: &mut [f32], argmax: &mut [u32]) {
    let (ph, pw) = l.pooled();
    let (w, cout, wp) = (l.s.w, l.s.cout, l.wp);
    let tags = [L::splat(0.0), L::splat(1.0), L::splat(2.0), L::splat(3.0)];
    let (mut best, mut tag) = ([0f32; LANES], [0f32; LANES]);
    assert!(conv.len() >= l.npad * l.cpad && 2 * (ph - 1) * wp + 2 * (pw - 1) + wp + 1 < l.npad);
    for oy in 0..ph {
        for ox in 0..pw {
            let j = 2 * oy * wp + 2 * ox;
            let pix = (n * l.s.h + 2 * oy) * w + 2 * ox;
            let steps = [0, 1, w, w + 1];
            for v in 0..NV {
                // SAFETY: j + wp + 1 < npad (asserted) and v·LANES + LANES ≤ cpad.
                let at = |q: usize| unsafe { L::load(conv.as_ptr().add((j + q) * l.cpad + v * LANES)) };
                let mut bt = (at(0), tags[0]);
                for (q, tg) in [1, wp, wp + 1].into_iter().zip(&tags[1..]) {
                    bt = L::take_greater(bt, at(q), *tg);
                }
                // SAFETY: two arrays of LANES values.
                unsafe { bt.0.store(best.as_mut_ptr()) };
                unsafe { bt.1.store(tag.as_mut_ptr()) };
                for lane in 0..LANES.min(cout.saturating_sub(v * LANES)) {
                    let ch = v * LANES + lane;
                    let o = (ch * ph + oy) * pw + ox;
                    pooled[o] = best[lane];
                    argmax[o] = ((pix + steps[tag[lane] as usize]) * cout + ch) as u32;
                }
            }
        }
    }
}

/// The gradients one stage's backward writes.
pub struct Grads<'a> {
    /// `[9·cin, cout]`, overwritten.
    pub weight: &'a mut [f32],
    /// `[cout]`, overwritten.
    pub bias: &'a mut [f32],
    /// The input images' gradient (CHW), overwritten; None for the first stage.
    pub x: Option<&'a mut [f32]>,
}

/// The forward's saved values the backward reads.
pub struct Saved<'a> {
    pub x: &'a [f32],
    pub weight: &'a [f32],
    pub pooled: &'a [f32],
    pub argmax: &'a [u32],
}

/// The backward from `grad_pooled` (CHW, the pooled maps' gradient). Under autocast (`round`;
/// `saved.weight` holds the 16-bit copy's values) the convolution's output gradient is rounded
/// before the weight and input gradients read it; returns the underflow counts of that rounding
/// (zero without it).
pub fn backward(path: Path, s: Stage, round: Option<DType>, saved: Saved<'_>, grad_pooled: &[f32], grads: Grads<'_>) -> Flushed {
    assert!(s.cout <= MAX_CHANNELS && (grads.x.is_none() || s.cin <= MAX_INPUT_GRAD_CHANNELS), "fused stage {s:?}");
    // The input gradient's block: one or two vectors of input channels per pixel.
    match (s.cout.div_ceil(LANES), s.cin.div_ceil(LANES)) {
        (1, 1) => backward_stage::<1, 1, 12>(path, s, round, saved, grad_pooled, grads),
        (2, 1) => backward_stage::<2, 1, 12>(path, s, round, saved, grad_pooled, grads),
        (3, 1) => backward_stage::<3, 1, 12>(path, s, round, saved, grad_pooled, grads),
        (_, 1) => backward_stage::<4, 1, 12>(path, s, round, saved, grad_pooled, grads),
        (1, _) => backward_stage::<1, 2, 8>(path, s, round, saved, grad_pooled, grads),
        (2, _) => backward_stage::<2, 2, 8>(path, s, round, saved, grad_pooled, grads),
        (3, _) => backward_stage::<3, 2, 8>(path, s, round, saved, grad_pooled, grads),
        _ => backward_stage::<4, 2, 8>(path, s, round, saved, grad_pooled, grads),
    }
}

/// The most input channels whose gradient is fused (two vectors per pixel).
pub const MAX_INPUT_GRAD_CHANNELS: usize = 2 * LANES;

/// What every group of images' backward reads.
struct Bwd<'a> {
    l: Layout,
    saved: Saved<'a>,
    grad_pooled: &'a [f32],
    /// The flipped kernel, transposed: wt[t][o][c] = w[c·9 + t][o], input channels as lanes.
    wt: Vec<f32>,
}

/// Group g's partial weight gradient on AVX-512 (a `#[target_feature]` function per group, as
/// `image_avx512`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn group_avx512<const NV: usize, const NVI: usize, const P: usize>(b: &Bwd<'_>, g: usize, gx: Option<&mut [f32]>) -> Part {
    group_on::<super::lanes::Avx512, NV, NVI, P>(b, g, gx)
}

/// A group's partial weight gradient (`[9·cin][cpad]`, then the bias's `[cpad]`) and the
/// underflows of its output gradient's rounding.
type Part = (Vec<f32>, Flushed);

/// Group g's partial gradients, and its images' input gradient into `gx` when given.
#[inline(always)]
fn group_on<L: Lanes, const NV: usize, const NVI: usize, const P: usize>(b: &Bwd<'_>, g: usize, mut gx: Option<&mut [f32]>) -> Part {
    let (l, s) = (&b.l, b.l.s);
    let (ph, pw) = l.pooled();
    let (per_in, per_out) = (s.cin * s.h * s.w, s.cout * ph * pw);
    let mut pad = vec![0f32; s.cin * l.plane];
    let mut gpad = vec![0f32; l.plane * l.cpad];
    let mut gin = if gx.is_some() { vec![0f32; l.npad * l.cinpad] } else { Vec::new() };
    let mut part = vec![0f32; 9 * s.cin * l.cpad + l.cpad];
    let mut rounded = vec![0f32; if l.round.is_some() { per_out } else { 0 }];
    let mut flushed = Flushed::default();
    for (k, n) in (g * GROUP..s.batch.min(g * GROUP + GROUP)).enumerate() {
        l.pad_input(&b.saved.x[n * per_in..][..per_in], &mut pad);
        let o = n * per_out..(n + 1) * per_out;
        let (pooled, argmax) = (&b.saved.pooled[o.clone()], &b.saved.argmax[o.clone()]);
        let grad = &b.grad_pooled[o];
        match l.round {
            Some(dt) => {
                round::round_into(dt, grad, &mut rounded);
                flushed = flushed.add(Flushed::of(pooled, grad, &rounded));
                scatter::<true>(l, n, (pooled, argmax), (grad, &rounded), &mut gpad, &mut part);
            }
            None => scatter::<false>(l, n, (pooled, argmax), (grad, grad), &mut gpad, &mut part),
        }
        weight_grad::<L, NV>(l, &pad, &gpad, &mut part);
        if let Some(gx) = gx.as_deref_mut() {
            input_grad::<L, NVI, P>(l, &gpad, &b.wt, &mut gin);
            // The flattened grid's HWC rows into the CHW gradient, its two extra columns dropped.
            let dst = &mut gx[k * per_in..][..per_in];
            for (c, plane) in dst.chunks_exact_mut(s.h * s.w).enumerate() {
                for (y, row) in plane.chunks_exact_mut(s.w).enumerate() {
                    for (x, v) in row.iter_mut().enumerate() {
                        *v = gin[(y * l.wp + x) * l.cinpad + c];
                    }
                }
            }
        }
    }
    (part, flushed)
}

fn backward_stage<const NV: usize, const NVI: usize, const P: usize>(
    path: Path,
    s: Stage,
    round: Option<DType>,
    saved: Saved<'_>,
    grad_pooled: &[f32],
    grads: Grads<'_>,
) -> Flushed {
    assert!(s.cout <= NV * LANES && s.h >= 2 && s.w >= 2, "fused stage {s:?} with {NV} vectors");
    let l = Layout::new(s, P, round);
    let (ph, pw) = l.pooled();
    let (per_in, per_out) = (s.cin * s.h * s.w, s.cout * ph * pw);
    assert!(saved.x.len() == s.batch * per_in && saved.weight.len() == 9 * s.cin * s.cout);
    assert!(saved.pooled.len() == s.batch * per_out && saved.argmax.len() == saved.pooled.len() && grad_pooled.len() == saved.pooled.len());
    assert!(grads.weight.len() == saved.weight.len() && grads.bias.len() == s.cout);
    assert!(grads.x.as_ref().is_none_or(|gx| gx.len() == s.batch * per_in));
    let mut wt = vec![0f32; 9 * s.cout * l.cinpad];
    for c in 0..s.cin {
        for t in 0..9 {
            for o in 0..s.cout {
                wt[(t * s.cout + o) * l.cinpad + c] = saved.weight[(c * 9 + t) * s.cout + o];
            }
        }
    }
    let b = Bwd { l, saved, grad_pooled, wt };
    let group = |g: usize, gx: Option<&mut [f32]>| match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `Fwd::stage`.
        Path::Avx512 => unsafe { group_avx512::<NV, NVI, P>(&b, g, gx) },
        _ => group_on::<Portable, NV, NVI, P>(&b, g, gx),
    };
    let groups = s.batch.div_ceil(GROUP);
    let par = groups > 1 && rayon::current_num_threads() > 1;
    let parts: Vec<Part> = match (grads.x, par) {
        (Some(gx), true) => gx.par_chunks_mut(GROUP * per_in).enumerate().map(|(g, c)| group(g, Some(c))).collect(),
        (Some(gx), false) => gx.chunks_mut(GROUP * per_in).enumerate().map(|(g, c)| group(g, Some(c))).collect(),
        (None, true) => (0..groups).into_par_iter().map(|g| group(g, None)).collect(),
        (None, false) => (0..groups).map(|g| group(g, None)).collect(),
    };
    // The groups' partial sums in group order.
    grads.weight.fill(0.0);
    grads.bias.fill(0.0);
    let mut flushed = Flushed::default();
    for (part, f) in &parts {
        flushed = flushed.add(*f);
        let (pw_, pb) = part.split_at(9 * s.cin * l.cpad);
        for (dst, src) in grads.weight.chunks_exact_mut(s.cout).zip(pw_.chunks_exact(l.cpad)) {
            dst.iter_mut().zip(src).for_each(|(d, v)| *d += v);
        }
        grads.bias.iter_mut().zip(pb).for_each(|(d, v)| *d += v);
    }
    flushed
}

/// The pool's and ReLU's gradient of one image into `gpad` (the output grid with a zero
/// border, [plane][cpad]): each window's winner gets its output's gradient when the pooled
/// value is positive (the winner's ReLU passed it), every other pixel 0. Adds the bias
/// gradient to the end of `part` (from `grad`; with `ROUND`, `gpad` gets `grad_r`, its rounding
/// under autocast). Branch-free: which of the four pixels won, and whether the
/// ReLU passed, are as good as random, and mispredicted branches made this loop the stage's
/// slowest.
fn scatter<const ROUND: bool>(
    l: &Layout,
    n: usize,
    (pooled, argmax): (&[f32], &[u32]),
    (grad, grad_r): (&[f32], &[f32]),
    gpad: &mut [f32],
    part: &mut [f32],
) {
    let (ph, pw) = l.pooled();
    let (w, cout, wp, cpad) = (l.s.w, l.s.cout, l.wp, l.cpad);
    let row = w * cout;
    gpad.fill(0.0);
    let bias = &mut part[9 * l.s.cin * cpad..];
    for ch in 0..cout {
        let mut sum = 0f32;
        for oy in 0..ph {
            let o = (ch * ph + oy) * pw;
            let (ps, args, gs, rs) = (&pooled[o..][..pw], &argmax[o..][..pw], &grad[o..][..pw], &grad_r[o..][..pw]);
            let first = (n * l.s.h + 2 * oy) * row + ch;
            for ox in 0..pw {
                // The winner's offset in its window: 0 or 1 in the top row, wp or wp + 1 below.
                let d = (args[ox] as usize).wrapping_sub(first + 2 * ox * cout);
                let lower = (d >= row) as usize;
                let step = lower * wp + (d != lower * row) as usize;
                let pass = ((ps[ox] > 0.0) as u32).wrapping_neg();
                let g = f32::from_bits(gs[ox].to_bits() & pass);
                let r = if ROUND { f32::from_bits(rs[ox].to_bits() & pass) } else { g };
                // The output (y, x) sits at (y + 1)·wp + x + 1 of the padded grid.
                gpad[(2 * oy * wp + 2 * ox + step + wp + 1) * cpad + ch] = r;
                sum += g;
            }
        }
        bias[ch] += sum;
    }
}

/// Adds one image's weight gradient to `part`: Σ over outputs j of the padded input at
/// j + offs[t] times the output gradient at j (which sits at j + wp + 1 of `gpad`).
#[inline(always)]
fn weight_grad<L: Lanes, const NV: usize>(l: &Layout, pad: &[f32], gpad: &[f32], part: &mut [f32]) {
    let rows = l.s.h * l.wp;
    assert!(pad.len() >= l.s.cin * l.plane && gpad.len() >= l.plane * l.cpad && part.len() >= 9 * l.s.cin * l.cpad);
    assert!(rows + 2 * l.wp + 2 < l.plane);
    for c in 0..l.s.cin {
        let mut acc = [[L::zero(); NV]; 9];
        // SAFETY: j + offs[t] < rows + 2·wp + 3 ≤ plane per channel, j + wp + 1 < plane rows of
        // gpad, lanes < cpad (asserted above).
        unsafe {
            let src = pad.as_ptr().add(c * l.plane);
            for j in 0..rows {
                let g = gpad.as_ptr().add((j + l.wp + 1) * l.cpad);
                let gv: [L; NV] = std::array::from_fn(|v| L::load(g.add(v * LANES)));
                for (t, a) in acc.iter_mut().enumerate() {
                    let xv = L::splat(*src.add(j + l.offs[t]));
                    for v in 0..NV {
                        a[v] = xv.mul_add(gv[v], a[v]);
                    }
                }
            }
            for (t, a) in acc.iter().enumerate() {
                for (v, a) in a.iter().enumerate() {
                    let p = part.as_mut_ptr().add((c * 9 + t) * l.cpad + v * LANES);
                    L::load(p).add(*a).store(p);
                }
            }
        }
    }
}

/// One image's input gradient on the flattened grid, `gin` [npad][cinpad]: at j, Σ over taps t
/// and output channels o of the output gradient at j + (2 − ky)·wp + (2 − kx) of `gpad` times
/// wt[t][o] (the kernel flipped, input channels as lanes).
#[inline(always)]
fn input_grad<L: Lanes, const NVI: usize, const P: usize>(l: &Layout, gpad: &[f32], wt: &[f32], gin: &mut [f32]) {
    let cout = l.s.cout;
    assert!(l.cinpad == NVI * LANES, "input gradient of {} channels with {NVI} vectors", l.s.cin);
    assert!(gpad.len() >= l.plane * l.cpad && gin.len() >= l.npad * l.cinpad && wt.len() >= 9 * cout * l.cinpad);
    let flip: [usize; 9] = std::array::from_fn(|t| (2 - t / 3) * l.wp + 2 - t % 3);
    // SAFETY: jb + p + flip[t] < npad + 2·wp + 3 = plane rows of gpad, o < cout ≤ cpad; wt rows
    // < 9·cout; gin rows < npad (asserted above).
    unsafe {
        for jb in (0..l.npad).step_by(P) {
            let mut acc = [[L::zero(); NVI]; P];
            for (t, &off) in flip.iter().enumerate() {
                let g = gpad.as_ptr().add((jb + off) * l.cpad);
                for o in 0..cout {
                    let row = wt.as_ptr().add((t * cout + o) * l.cinpad);
                    let wv: [L; NVI] = std::array::from_fn(|v| L::load(row.add(v * LANES)));
                    for (p, a) in acc.iter_mut().enumerate() {
                        let gv = L::splat(*g.add(p * l.cpad + o));
                        for v in 0..NVI {
                            a[v] = gv.mul_add(wv[v], a[v]);
                        }
                    }
                }
            }
            for (p, a) in acc.iter().enumerate() {
                for (v, a) in a.iter().enumerate() {
                    a.store(gin.as_mut_ptr().add((jb + p) * l.cinpad + v * LANES));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
