//! Autocast's roundings inside the fused stage: the values a 16-bit operand holds, kept as
//! f32 (every bf16 and f16 value is one, and the product of two is exact in f32, so the f32
//! kernels sum the same products the 16-bit GEMM does).

use crate::tensor::{DType, float16};

/// `src` rounded to `dt` (round-to-nearest-even, as `cast` and im2col's 16-bit columns do)
/// and widened back into `dst`.
pub fn round_into(dt: DType, src: &[f32], dst: &mut [f32]) {
    let mut bits = [0u16; 64];
    for (s, d) in src.chunks(64).zip(dst.chunks_mut(64)) {
        let b = &mut bits[..s.len()];
        float16::encode_into(dt, s, b);
        float16::decode_into(dt, b, d);
    }
}

/// Underflow counts as `cast`'s stats: nonzero values, and those whose rounding is ±0.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Flushed {
    pub nonzero: u64,
    pub flushed: u64,
}

impl Flushed {
    /// The counts of one image's rounded output gradient: the pooled outputs' gradients `grad`
    /// that reach the convolution (their pooled value positive: the winner's ReLU passed) and
    /// their roundings `rounded`. A separate sweep over contiguous values, so it vectorises (in
    /// the scatter's loop it doubled the scatter's time).
    pub fn of(pooled: &[f32], grad: &[f32], rounded: &[f32]) -> Flushed {
        let (mut nonzero, mut flushed) = (0u32, 0u32);
        for ((&p, &g), &r) in pooled.iter().zip(grad).zip(rounded) {
            let nz = p > 0.0 && g != 0.0;
            nonzero += nz as u32;
            flushed += (nz && r == 0.0) as u32;
        }
        Flushed { nonzero: nonzero as u64, flushed: flushed as u64 }
    }

    pub fn add(self, o: Flushed) -> Flushed {
        Flushed { nonzero: self.nonzero + o.nonzero, flushed: self.flushed + o.flushed }
    }
}
