//! Host-side conversions between f32 and the 16-bit formats, with the `half` crate. The GPU's
//! cast kernels (`shaders/float16_*.wgsl`) implement the same round-to-nearest-even bit for bit,
//! so a value rounded on the CPU and on the GPU is the same value.

use half::{bf16, f16};

use super::DType;

/// The 16-bit pattern of `x` rounded to `dt` (F16 or BF16; any other type is a caller bug and
/// yields the f16 pattern).
pub fn round_bits(dt: DType, x: f32) -> u16 {
    match dt {
        DType::BF16 => bf16::from_f32(x).to_bits(),
        _ => f16::from_f32(x).to_bits(),
    }
}

/// The f32 value of a 16-bit pattern (exact: every f16 and bf16 value is an f32 value).
pub fn widen(dt: DType, bits: u16) -> f32 {
    match dt {
        DType::BF16 => bf16::from_bits(bits).to_f32(),
        _ => f16::from_bits(bits).to_f32(),
    }
}

/// `x` rounded to `dt` and widened back: what a 16-bit tensor would hold.
pub fn round(dt: DType, x: f32) -> f32 {
    widen(dt, round_bits(dt, x))
}

pub fn encode(dt: DType, xs: &[f32]) -> Vec<u16> {
    xs.iter().map(|&x| round_bits(dt, x)).collect()
}

pub fn decode(dt: DType, bits: &[u16]) -> Vec<f32> {
    bits.iter().map(|&b| widen(dt, b)).collect()
}

/// True where a 16-bit pattern is ±0 (a value that flushed to zero).
pub fn is_zero_bits(bits: u16) -> bool {
    bits & 0x7fff == 0
}
