//! The convolution ops on the CPU (`ConvOps`), the reference the WGSL kernels in
//! shaders/conv.wgsl are tested against: each output element is computed by the same formula
//! as one GPU invocation (so col2im sums in the same order), rayon over elements when large.

use super::{CpuBackend, CpuTensor, Storage, ops};
use crate::error::Result;
use crate::tensor::{ConvOps, ImageGeom, checks, float16};

/// cols `[pixels, 9·C]` from the CHW images x, each tap stored as `put(value)`.
fn im2col_into<T: Copy + Send + Sync>(x: &[f32], cols: &mut [T], g: ImageGeom, put: impl Fn(f32) -> T + Sync) {
    let (h, w, c) = (g.height, g.width, g.channels);
    let zero = put(0.0);
    // One row per output pixel (n, py, px): its 3×3 patch of every channel, zero outside.
    ops::chunks(cols, 9 * c, |row, dst| {
        let (px, t) = (row % w, row / w);
        let (py, n) = (t % h, t / h);
        for ch in 0..c {
            let plane = &x[(n * c + ch) * h * w..][..h * w];
            for ky in 0..3 {
                let sy = (py + ky).wrapping_sub(1);
                for kx in 0..3 {
                    let sx = (px + kx).wrapping_sub(1);
                    dst[ch * 9 + ky * 3 + kx] = if sy < h && sx < w { put(plane[sy * w + sx]) } else { zero };
                }
            }
        }
    });
}

impl ConvOps for CpuBackend {
    fn conv_unavailable(&self) -> Option<String> {
        None
    }

    fn im2col(&mut self, x: &CpuTensor, cols: &mut CpuTensor, g: ImageGeom) -> Result<()> {
        checks::im2col(x, cols, g)?;
        let x = x.f32();
        match &mut cols.data {
            Storage::F32(dst) => im2col_into(x, dst, g, |v| v),
            // Autocast's columns: each tap rounded to the 16-bit type as it is gathered.
            Storage::Bits16(dst, dt) => {
                let dt = *dt;
                im2col_into(x, dst, g, |v| float16::round_bits(dt, v))
            }
            _ => return Err(crate::error::Error::Internal("checks::im2col let non-float columns through".into())),
        }
        Ok(())
    }

    fn col2im(&mut self, cols: &CpuTensor, x: &mut CpuTensor, g: ImageGeom) -> Result<()> {
        checks::col2im(cols, x, g)?;
        let cols = cols.f32();
        let (h, w, c) = (g.height, g.width, g.channels);
        // One plane per (n, channel); each pixel sums its 9 taps in the GPU kernel's order.
        ops::chunks(x.f32_mut(), h * w, |plane, out| {
            let (ch, n) = (plane % c, plane / c);
            for py in 0..h {
                for px in 0..w {
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
                    out[py * w + px] = s;
                }
            }
        });
        Ok(())
    }

    fn max_pool(&mut self, x: &CpuTensor, out: &mut CpuTensor, argmax: &mut CpuTensor, g: ImageGeom) -> Result<()> {
        let p = checks::max_pool(x, out, argmax, g)?;
        let x = x.f32();
        let (w, c) = (g.width, g.channels);
        // One pooled plane per (n, channel); the first of equal maxima wins, as on the GPU.
        ops::chunks(argmax.u32_mut(), p.height * p.width, |plane, dst| {
            let (ch, n) = (plane % c, plane / c);
            for oy in 0..p.height {
                for ox in 0..p.width {
                    let at = |dy: usize, dx: usize| ((n * g.height + 2 * oy + dy) * w + 2 * ox + dx) * c + ch;
                    let mut best = at(0, 0);
                    for i in [at(0, 1), at(1, 0), at(1, 1)] {
                        if x[i] > x[best] {
                            best = i;
                        }
                    }
                    dst[oy * p.width + ox] = best as u32;
                }
            }
        });
        let winners = argmax.u32();
        out.f32_mut().iter_mut().zip(winners).for_each(|(o, &i)| *o = x[i as usize]);
        Ok(())
    }

    fn max_pool_backward(&mut self, grad_out: &CpuTensor, argmax: &CpuTensor, grad_in: &mut CpuTensor, g: ImageGeom) -> Result<()> {
        let p = checks::max_pool_backward(grad_out, argmax, grad_in, g)?;
        let (go, winners) = (grad_out.f32(), argmax.u32());
        let (w, c) = (g.width, g.channels);
        // The 2×2 windows do not overlap, so each input is the winner of at most one output:
        // zeros, then each output's gradient written to its winner when the winner lies in its
        // window — the values of the GPU's gather (one invocation per input, which takes the
        // gradient of its window's output if that output chose it), without a search per input.
        let gi = grad_in.f32_mut();
        gi.fill(0.0);
        let planes = go.len() / (p.height * p.width).max(1);
        for plane in 0..planes {
            let (ch, n) = (plane % c, plane / c);
            for oy in 0..p.height {
                for ox in 0..p.width {
                    let o = (plane * p.height + oy) * p.width + ox;
                    let win = winners[o] as usize;
                    let (y, x) = (win / c / w % g.height, win / c % w);
                    let inside = win % c == ch && win / c / w / g.height == n && y / 2 == oy && x / 2 == ox;
                    if inside {
                        gi[win] = go[o];
                    }
                }
            }
        }
        Ok(())
    }
}
