//! The convolution ops on the CPU (`ConvOps`), the reference the WGSL kernels in
//! shaders/conv.wgsl are tested against: each output element is computed by the same formula
//! as one GPU invocation (so col2im sums in the same order), rayon over elements when large.

use super::{CpuBackend, CpuTensor, Storage, conv_direct, ops};
use crate::error::Result;
use crate::tensor::{ConvOps, ConvStageGrads, ConvStageSaved, DType, ImageGeom, TensorMeta, checks, float16};

/// cols `[pixels, 9·C]` from the CHW images x, each tap stored as `put(value)`. One task per
/// image (`image_cols`).
fn im2col_into<T: Copy + Send + Sync>(x: &[f32], cols: &mut [T], g: ImageGeom, put: impl Fn(f32) -> T + Sync) {
    let (h, w, c) = (g.height, g.width, g.channels);
    ops::chunks(cols, h * w * 9 * c, |n, dst| image_cols(&x[n * c * h * w..][..c * h * w], dst, g, &put));
}

/// One CHW image's columns, its rows in order: no index division per row, and interior pixels
/// skip the padding test.
fn image_cols<T: Copy>(img: &[f32], dst: &mut [T], g: ImageGeom, put: &impl Fn(f32) -> T) {
    let (h, w, c) = (g.height, g.width, g.channels);
    let zero = put(0.0);
    for (pix, row) in dst.chunks_exact_mut(9 * c).enumerate() {
        let (py, px) = (pix / w, pix % w);
        let interior = py >= 1 && py + 1 < h && px >= 1 && px + 1 < w;
        for (plane, taps) in img.chunks_exact(h * w).zip(row.chunks_exact_mut(9)) {
            if interior {
                for ky in 0..3 {
                    let src = &plane[(py + ky - 1) * w + px - 1..][..3];
                    for kx in 0..3 {
                        taps[ky * 3 + kx] = put(src[kx]);
                    }
                }
                continue;
            }
            for ky in 0..3 {
                let sy = (py + ky).wrapping_sub(1);
                for kx in 0..3 {
                    let sx = (px + kx).wrapping_sub(1);
                    taps[ky * 3 + kx] = if sy < h && sx < w { put(plane[sy * w + sx]) } else { zero };
                }
            }
        }
    }
}

/// A fused stage's shapes.
fn stage(g: ImageGeom, cout: usize) -> conv_direct::Stage {
    conv_direct::Stage { batch: g.batch, cin: g.channels, cout, h: g.height, w: g.width }
}

/// A fused stage's weight values and rounding: f32 as is, or autocast's 16-bit copy widened
/// (exactly) with its type, which the stage rounds its other operands to.
fn stage_weight(w: &CpuTensor) -> (std::borrow::Cow<'_, [f32]>, Option<DType>) {
    match &w.data {
        Storage::Bits16(bits, dt) => (float16::decode(*dt, bits).into(), Some(*dt)),
        _ => (w.f32().into(), None),
    }
}

impl CpuBackend {
    /// The fused stage's lanes, or a refusal where `fuses_conv_stage` says no.
    fn fused_path(&self, g: ImageGeom, c_out: usize, input_grad: bool, operands: DType, op: &'static str) -> Result<conv_direct::Path> {
        match conv_direct::Path::fastest() {
            Some(path) if self.fuses_conv_stage(g, c_out, input_grad, operands) => Ok(path),
            _ => Err(crate::tensor::ops::unsupported(
                self,
                op,
                &format!(
                    "the fused stage needs AVX-512, ≤ {} output channels and ≤ {} input channels with an input gradient; fuses_conv_stage says when",
                    conv_direct::MAX_CHANNELS,
                    conv_direct::MAX_INPUT_GRAD_CHANNELS
                ),
            )),
        }
    }
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
            // Autocast's columns: an image's f32 columns, then rounded to the 16-bit type in
            // one vectorised sweep (`encode_into`) while they are in cache.
            Storage::Bits16(dst, dt) => {
                let (dt, per) = (*dt, g.height * g.width * g.channels);
                ops::chunks(dst, 9 * per, |n, d| {
                    let mut f = vec![0f32; d.len()];
                    image_cols(&x[n * per..][..per], &mut f, g, &|v| v);
                    float16::encode_into(dt, &f, d);
                });
            }
            _ => return Err(crate::error::Error::Internal("checks::im2col let non-float columns through".into())),
        }
        Ok(())
    }

    fn col2im(&mut self, cols: &CpuTensor, x: &mut CpuTensor, g: ImageGeom) -> Result<()> {
        checks::col2im(cols, x, g)?;
        let cols = cols.f32();
        let (h, w, c) = (g.height, g.width, g.channels);
        // One task per image; each pixel sums its 9 taps in the GPU kernel's order, every channel
        // at once (each channel's sum sees the same additions in the same order), so each tap
        // reads one contiguous row of columns.
        ops::chunks(x.f32_mut(), c * h * w, |n, out| {
            let mut sums = vec![0f32; c];
            for py in 0..h {
                for px in 0..w {
                    sums.fill(0.0);
                    for ky in 0..3 {
                        let oy = (py + 1).wrapping_sub(ky);
                        if oy >= h {
                            continue;
                        }
                        for kx in 0..3 {
                            let ox = (px + 1).wrapping_sub(kx);
                            if ox < w {
                                let row = &cols[((n * h + oy) * w + ox) * 9 * c..][..9 * c];
                                for (s, taps) in sums.iter_mut().zip(row.chunks_exact(9)) {
                                    *s += taps[ky * 3 + kx];
                                }
                            }
                        }
                    }
                    for (ch, s) in sums.iter().enumerate() {
                        out[ch * h * w + py * w + px] = *s;
                    }
                }
            }
        });
        Ok(())
    }

    /// Fused where the CPU has AVX-512 (conv_direct.rs), f32 or autocast's 16-bit operands
    /// (rounded to and summed in f32, the 16-bit op path's numerics); elsewhere the im2col +
    /// GEMM path is the faster one.
    fn fuses_conv_stage(&self, g: ImageGeom, c_out: usize, input_grad: bool, operands: DType) -> bool {
        conv_direct::Path::fastest().is_some()
            && (operands == DType::F32 || operands.is_16bit())
            && c_out <= conv_direct::MAX_CHANNELS
            && (!input_grad || g.channels <= conv_direct::MAX_INPUT_GRAD_CHANNELS)
    }

    fn conv_relu_pool(
        &mut self,
        x: &CpuTensor,
        weight: &CpuTensor,
        bias: &CpuTensor,
        pooled: &mut CpuTensor,
        argmax: &mut CpuTensor,
        g: ImageGeom,
    ) -> Result<()> {
        let c_out = checks::conv_stage("conv_relu_pool", x, weight, pooled, argmax, g)?;
        checks::vector_out("conv_relu_pool", bias, c_out, DType::F32)?;
        let path = self.fused_path(g, c_out, false, weight.dtype(), "conv_relu_pool")?;
        let (w, round) = stage_weight(weight);
        conv_direct::forward(path, stage(g, c_out), round, x.f32(), &w, bias.f32(), pooled.f32_mut(), argmax.u32_mut());
        Ok(())
    }

    fn conv_relu_pool_backward(
        &mut self,
        saved: ConvStageSaved<'_, CpuTensor>,
        grad_pooled: &CpuTensor,
        grads: ConvStageGrads<'_, CpuTensor>,
        g: ImageGeom,
    ) -> Result<()> {
        const OP: &str = "conv_relu_pool_backward";
        let c_out = checks::conv_stage(OP, saved.x, saved.weight, saved.pooled, saved.argmax, g)?;
        checks::same_shape(OP, grad_pooled, saved.pooled)?;
        checks::f32(OP, grad_pooled)?;
        checks::same_dims(OP, grads.weight, saved.weight)?;
        checks::f32(OP, grads.weight)?;
        checks::vector_out(OP, grads.bias, c_out, DType::F32)?;
        if let Some(gx) = grads.x.as_deref() {
            checks::same_shape(OP, gx, saved.x)?;
            checks::f32(OP, gx)?;
        }
        if let Some(st) = grads.stats.as_deref() {
            checks::acc_index(OP, st, 1, DType::U32)?;
            if !saved.weight.dtype().is_16bit() {
                return Err(crate::error::Error::DType {
                    op: OP,
                    detail: "stats count the roundings of an autocast stage (a 16-bit weight); an f32 stage rounds nothing".into(),
                });
            }
        }
        let path = self.fused_path(g, c_out, grads.x.is_some(), saved.weight.dtype(), OP)?;
        let (w, round) = stage_weight(saved.weight);
        let fwd = conv_direct::Saved { x: saved.x.f32(), weight: &w, pooled: saved.pooled.f32(), argmax: saved.argmax.u32() };
        let out = conv_direct::Grads { weight: grads.weight.f32_mut(), bias: grads.bias.f32_mut(), x: grads.x.map(|t| t.f32_mut()) };
        let f = conv_direct::backward(path, stage(g, c_out), round, fwd, grad_pooled.f32(), out);
        if let Some(st) = grads.stats {
            // As `cast`'s stats: [nonzero values, values rounded to ±0], wrapping u32 counters.
            let v = st.u32_mut();
            v[0] = v[0].wrapping_add(f.nonzero as u32);
            v[1] = v[1].wrapping_add(f.flushed as u32);
        }
        Ok(())
    }

    fn max_pool(&mut self, x: &CpuTensor, out: &mut CpuTensor, argmax: &mut CpuTensor, g: ImageGeom) -> Result<()> {
        let p = checks::max_pool(x, out, argmax, g)?;
        let x = x.f32();
        let (w, c, ph, pw) = (g.width, g.channels, p.height, p.width);
        // One task per image: each window's four rows of C channels are contiguous in the HWC
        // input; the first of equal maxima wins, as on the GPU.
        let per = c * ph * pw;
        ops::chunks_pair(out.f32_mut(), argmax.u32_mut(), per, |n, out, dst| {
            let offs = [c, w * c, w * c + c];
            for oy in 0..ph {
                for ox in 0..pw {
                    let base = ((n * g.height + 2 * oy) * w + 2 * ox) * c;
                    for ch in 0..c {
                        // The best value stays in a register: no load that waits on a compare.
                        let (mut best, mut v) = (base + ch, x[base + ch]);
                        for o in offs {
                            if x[base + o + ch] > v {
                                (best, v) = (base + o + ch, x[base + o + ch]);
                            }
                        }
                        let at = (ch * ph + oy) * pw + ox;
                        dst[at] = best as u32;
                        out[at] = v;
                    }
                }
            }
        });
        Ok(())
    }

    fn max_pool_backward(&mut self, grad_out: &CpuTensor, argmax: &CpuTensor, grad_in: &mut CpuTensor, g: ImageGeom) -> Result<()> {
        let p = checks::max_pool_backward(grad_out, argmax, grad_in, g)?;
        let (go, winners) = (grad_out.f32(), argmax.u32());
        let (h, w, c, ph, pw) = (g.height, g.width, g.channels, p.height, p.width);
        // The 2×2 windows do not overlap, so each input lies in at most one: it gets its
        // window's output gradient when it is that window's winner, else zero (a last odd row
        // or column, in no window, stays zero) — the values of the GPU's gather (one invocation
        // per input, which takes the gradient of its window's output if that output chose it).
        // Every store's address is known before its value: none waits on a loaded index.
        let per_out = c * ph * pw;
        ops::chunks(grad_in.f32_mut(), h * w * c, |n, gi| {
            if h % 2 == 1 || w % 2 == 1 {
                gi.fill(0.0);
            }
            let first = n * h * w * c;
            for oy in 0..ph {
                for ox in 0..pw {
                    let at = ((n * h + 2 * oy) * w + 2 * ox) * c;
                    for ch in 0..c {
                        let o = n * per_out + (ch * ph + oy) * pw + ox;
                        let (win, g) = (winners[o] as usize, go[o]);
                        for q in [at + ch, at + c + ch, at + w * c + ch, at + w * c + c + ch] {
                            gi[q - first] = if win == q { g } else { 0.0 };
                        }
                    }
                }
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{CoreOps, DType, MemCategory};

    /// col2im must give the bits of the GPU kernel's formula: each pixel's 9 taps summed from
    /// zero in (ky, kx) order (written out here one element at a time, as the shader does).
    #[test]
    fn col2im_sums_each_pixel_in_the_gpu_kernels_order() {
        let mut cpu = CpuBackend::new();
        for g in [
            ImageGeom { batch: 2, height: 5, width: 7, channels: 3 },
            ImageGeom { batch: 3, height: 28, width: 28, channels: 16 },
            ImageGeom { batch: 1, height: 1, width: 4, channels: 2 },
        ] {
            let (h, w, c) = (g.height, g.width, g.channels);
            let vals: Vec<f32> = (0..g.pixels() * 9 * c).map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 1.37e-3).collect();
            let cols = cpu.upload_f32(&vals, [g.pixels(), 9 * c], MemCategory::Activations).unwrap();
            let mut x = cpu.zeros([g.batch, c * h * w], DType::F32, MemCategory::Activations).unwrap();
            cpu.col2im(&cols, &mut x, g).unwrap();
            let mut want = vec![0f32; g.numel()];
            for (i, o) in want.iter_mut().enumerate() {
                let (px, py, ch, n) = (i % w, i / w % h, i / (h * w) % c, i / (c * h * w));
                let mut s = 0.0f32;
                for ky in 0..3 {
                    for kx in 0..3 {
                        let (oy, ox) = ((py + 1).wrapping_sub(ky), (px + 1).wrapping_sub(kx));
                        if oy < h && ox < w {
                            s += vals[((n * h + oy) * w + ox) * 9 * c + ch * 9 + ky * 3 + kx];
                        }
                    }
                }
                *o = s;
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(x.f32()), bits(&want), "{g:?}");
        }
    }
}
