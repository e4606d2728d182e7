//! The convolution ops on the CPU (`ConvOps`), the reference the WGSL kernels in
//! shaders/conv.wgsl are tested against: each output element is computed by the same formula
//! as one GPU invocation (so col2im sums in the same order), rayon over elements when large.

use rayon::prelude::*;

use super::{CpuBackend, CpuTensor, ops::PAR_THRESHOLD};
use crate::error::Result;
use crate::tensor::{ConvOps, ImageGeom, checks};

/// out[e] = f(e) for every element, on all cores when there are many.
fn each<T: Send>(out: &mut [T], f: impl Fn(usize) -> T + Sync) {
    if out.len() >= PAR_THRESHOLD {
        out.par_iter_mut().enumerate().for_each(|(e, o)| *o = f(e));
    } else {
        out.iter_mut().enumerate().for_each(|(e, o)| *o = f(e));
    }
}

impl ConvOps for CpuBackend {
    fn conv_unavailable(&self) -> Option<String> {
        None
    }

    fn im2col(&mut self, x: &CpuTensor, cols: &mut CpuTensor, g: ImageGeom) -> Result<()> {
        checks::im2col(x, cols, g)?;
        let x = x.f32();
        let (h, w, c) = (g.height, g.width, g.channels);
        each(cols.f32_mut(), |e| {
            let (row, col) = (e / (9 * c), e % (9 * c));
            let (ch, ky, kx) = (col / 9, col % 9 / 3, col % 3);
            let (px, t) = (row % w, row / w);
            let (py, n) = (t % h, t / h);
            let (sy, sx) = ((py + ky).wrapping_sub(1), (px + kx).wrapping_sub(1));
            if sy < h && sx < w { x[((n * c + ch) * h + sy) * w + sx] } else { 0.0 }
        });
        Ok(())
    }

    fn col2im(&mut self, cols: &CpuTensor, x: &mut CpuTensor, g: ImageGeom) -> Result<()> {
        checks::col2im(cols, x, g)?;
        let cols = cols.f32();
        let (h, w, c) = (g.height, g.width, g.channels);
        each(x.f32_mut(), |e| {
            let (px, t) = (e % w, e / w);
            let (py, t) = (t % h, t / h);
            let (ch, n) = (t % c, t / c);
            let mut s = 0.0f32;
            for ky in 0..3 {
                let oy = (py + 1).wrapping_sub(ky);
                if oy >= h {
                    continue;
                }
                for kx in 0..3 {
                    let ox = (px + 1).wrapping_sub(kx);
                    if ox < w {
                        s += cols[((n * h + oy) * w + ox) * 9 * c + ch * 9 + ky * 3 + kx];
                    }
                }
            }
            s
        });
        Ok(())
    }

    fn max_pool(&mut self, x: &CpuTensor, out: &mut CpuTensor, argmax: &mut CpuTensor, g: ImageGeom) -> Result<()> {
        let p = checks::max_pool(x, out, argmax, g)?;
        let x = x.f32();
        let (w, c) = (g.width, g.channels);
        each(argmax.u32_mut(), |e| {
            let (ox, t) = (e % p.width, e / p.width);
            let (oy, t) = (t % p.height, t / p.height);
            let (ch, n) = (t % c, t / c);
            let at = |dy: usize, dx: usize| ((n * g.height + 2 * oy + dy) * w + 2 * ox + dx) * c + ch;
            let mut best = at(0, 0);
            for i in [at(0, 1), at(1, 0), at(1, 1)] {
                if x[i] > x[best] {
                    best = i;
                }
            }
            best as u32
        });
        let winners = argmax.u32();
        each(out.f32_mut(), |e| x[winners[e] as usize]);
        Ok(())
    }

    fn max_pool_backward(&mut self, grad_out: &CpuTensor, argmax: &CpuTensor, grad_in: &mut CpuTensor, g: ImageGeom) -> Result<()> {
        let p = checks::max_pool_backward(grad_out, argmax, grad_in, g)?;
        let (go, winners) = (grad_out.f32(), argmax.u32());
        let (w, c) = (g.width, g.channels);
        each(grad_in.f32_mut(), |e| {
            let (ch, t) = (e % c, e / c);
            let (px, t) = (t % w, t / w);
            let (py, n) = (t % g.height, t / g.height);
            let (oy, ox) = (py / 2, px / 2);
            if oy >= p.height || ox >= p.width {
                return 0.0;
            }
            let o = ((n * c + ch) * p.height + oy) * p.width + ox;
            if winners[o] as usize == e { go[o] } else { 0.0 }
        });
        Ok(())
    }
}
