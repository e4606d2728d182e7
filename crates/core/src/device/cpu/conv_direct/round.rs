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
    /// Counts one value `g` and its rounding `r` (branch-free: called per pooled output).
    #[inline(always)]
    pub fn count(&mut self, g: f32, r: f32) {
        let nz = g != 0.0;
        self.nonzero += nz as u64;
        self.flushed += (nz && r == 0.0) as u64;
    }

    pub fn add(self, o: Flushed) -> Flushed {
        Flushed { nonzero: self.nonzero + o.nonzero, flushed: self.flushed + o.flushed }
    }
}
