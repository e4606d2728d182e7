//! Host-side conversions between f32 and the 16-bit formats, with the `half` crate. The GPU's
//! cast kernels (`shaders/float16_*.wgsl`) implement the same round-to-nearest-even bit for bit,
//! so a value rounded on the CPU and on the GPU is the same value.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

use super::DType;

/// The 16-bit pattern of `x` rounded to `dt` (F16 or BF16; any other type is a caller bug and
/// yields the f16 pattern).
#[inline]
pub fn round_bits(dt: DType, x: f32) -> u16 {
    match dt {
        DType::BF16 => bf16_bits(x),
        _ => f16::from_f32(x).to_bits(),
    }
}

/// `half`'s bf16 rounding (round to nearest even; a NaN stays a quiet NaN of the same sign),
/// written without a call so loops over slices vectorise. Checked against `half` in the tests.
#[inline(always)]
fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if b & 0x7fff_ffff > 0x7f80_0000 {
        return ((b >> 16) | 0x0040) as u16;
    }
    let up = (b & 0x8000 != 0) && (b & 0x17fff != 0);
    ((b >> 16) + up as u32) as u16
}

/// The f32 value of a 16-bit pattern (exact: every f16 and bf16 value is an f32 value).
#[inline]
pub fn widen(dt: DType, bits: u16) -> f32 {
    match dt {
        DType::BF16 => f32::from_bits((bits as u32) << 16),
        _ => f16::from_bits(bits).to_f32(),
    }
}

/// `src` rounded into `dst` (equal lengths), bit for bit as `round_bits`: one match per slice,
/// F16C for f16 where the CPU has it (through `half`), a vectorised loop for bf16.
pub fn encode_into(dt: DType, src: &[f32], dst: &mut [u16]) {
    match dt {
        DType::BF16 => encode_bf16(src, dst),
        _ => dst.reinterpret_cast_mut::<f16>().convert_from_f32_slice(src),
    }
}

/// The bf16 loop, compiled for AVX-512 or AVX2 where the CPU has them: the baseline build's
/// SSE2 loop rounded 2 values a nanosecond, a sixth of a bf16 training step's time here.
fn encode_bf16(src: &[f32], dst: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if dst.len() >= 16 {
        if std::arch::is_x86_feature_detected!("avx512bw") {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { encode_bf16_avx512(src, dst) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: as above.
            return unsafe { encode_bf16_avx2(src, dst) };
        }
    }
    encode_bf16_loop(src, dst)
}

#[inline(always)]
fn encode_bf16_loop(src: &[f32], dst: &mut [u16]) {
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d = bf16_bits(s))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn encode_bf16_avx512(src: &[f32], dst: &mut [u16]) {
    encode_bf16_loop(src, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn encode_bf16_avx2(src: &[f32], dst: &mut [u16]) {
    encode_bf16_loop(src, dst)
}

/// `src` widened into `dst` (equal lengths), exactly as `widen`.
pub fn decode_into(dt: DType, src: &[u16], dst: &mut [f32]) {
    match dt {
        DType::BF16 => dst.iter_mut().zip(src).for_each(|(d, &s)| *d = f32::from_bits((s as u32) << 16)),
        _ => src.reinterpret_cast::<f16>().convert_to_f32_slice(dst),
    }
}

/// `x` rounded to `dt` and widened back: what a 16-bit tensor would hold.
pub fn round(dt: DType, x: f32) -> f32 {
    widen(dt, round_bits(dt, x))
}

pub fn encode(dt: DType, xs: &[f32]) -> Vec<u16> {
    let mut out = vec![0; xs.len()];
    encode_into(dt, xs, &mut out);
    out
}

pub fn decode(dt: DType, bits: &[u16]) -> Vec<f32> {
    let mut out = vec![0.0; bits.len()];
    decode_into(dt, bits, &mut out);
    out
}

/// True where a 16-bit pattern is ±0 (a value that flushed to zero).
pub fn is_zero_bits(bits: u16) -> bool {
    bits & 0x7fff == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;
    use rand::{Rng, SeedableRng};

    #[test]
    fn fast_conversions_match_half_bit_for_bit() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut xs: Vec<f32> = (0..200_000).map(|_| f32::from_bits(rng.random())).collect();
        // Ties, carries into the exponent, the largest finite values, subnormals, specials.
        xs.extend([
            0.0,
            -0.0,
            1.0,
            1.003_906_3,
            1.011_718_8,
            -1.003_906_3,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            1e-40,
            -1e-45,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
        ]);
        xs.extend((0..1000u32).map(|i| f32::from_bits(0x3f80_8000 + (i << 16))));
        for dt in [DType::BF16, DType::F16] {
            let want: Vec<u16> =
                xs.iter().map(|&x| if dt == DType::BF16 { bf16::from_f32(x).to_bits() } else { f16::from_f32(x).to_bits() }).collect();
            let one: Vec<u16> = xs.iter().map(|&x| round_bits(dt, x)).collect();
            assert_eq!(one, want, "{} round_bits", dt.name());
            assert_eq!(encode(dt, &xs), want, "{} encode", dt.name());
            if dt == DType::BF16 {
                // Every compiled variant, on lengths that leave a vector tail.
                let mut variants: Vec<(&str, fn(&[f32], &mut [u16]))> = vec![("loop", |s, d| encode_bf16_loop(s, d))];
                #[cfg(target_arch = "x86_64")]
                {
                    if std::arch::is_x86_feature_detected!("avx512bw") {
                        variants.push(("avx512", |s, d| unsafe { encode_bf16_avx512(s, d) }));
                    }
                    if std::arch::is_x86_feature_detected!("avx2") {
                        variants.push(("avx2", |s, d| unsafe { encode_bf16_avx2(s, d) }));
                    }
                }
                for (name, f) in variants {
                    for len in [xs.len(), 17, 3] {
                        let mut got = vec![0u16; len];
                        f(&xs[xs.len() - len..], &mut got);
                        assert_eq!(got, want[xs.len() - len..], "bf16 {name} on {len} values");
                    }
                }
            }
            let back = decode(dt, &want);
            for (b, &w) in back.iter().zip(&want) {
                let h = if dt == DType::BF16 { bf16::from_bits(w).to_f32() } else { f16::from_bits(w).to_f32() };
                assert!(b.to_bits() == h.to_bits() || (b.is_nan() && h.is_nan()), "{} decode {w:#06x}: {b} vs {h}", dt.name());
                assert_eq!(widen(dt, w).to_bits(), b.to_bits(), "{} widen {w:#06x}", dt.name());
            }
        }
    }
}
