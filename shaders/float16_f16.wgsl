enable f16;
// FP16 helpers (prepended to the 16-bit kernels). Operands are read through WGSL's native
// f16 type, which needs the adapter feature SHADER_F16, and widened with the hardware
// conversion (exact: every f16 is an f32). Outputs are written as packed u32 words (element 2i
// in the low half, the host's little-endian order) with the bit-exact rounding below, so two
// invocations never write halves of one word.

alias half_elems = f16;

fn half_index(i: u32) -> u32 { return i; }
fn half_value(x: f16, i: u32) -> f32 { return f32(x); }

// f32 bits -> f16 bits, round to nearest even; a port of the `half` crate's conversion, so the
// GPU and the CPU round every value identically (WGSL leaves the rounding of f16(x) to the
// implementation). Overflow gives ±inf; NaN stays NaN.
fn half_round_bits(x: u32) -> u32 {
    let sign = x & 0x80000000u;
    let exp = x & 0x7f800000u;
    let man = x & 0x007fffffu;
    let hs = sign >> 16u;
    if exp == 0x7f800000u {
        return hs | 0x7c00u | select(0u, 0x0200u, man != 0u) | (man >> 13u);
    }
    let half_exp = i32(exp >> 23u) - 112;
    if half_exp >= 31 { return hs | 0x7c00u; }
    if half_exp <= 0 {
        if 14 - half_exp > 24 { return hs; }
        let m = man | 0x00800000u;
        let shift = u32(14 - half_exp);
        var hm = m >> shift;
        let round_bit = 1u << (shift - 1u);
        if (m & round_bit) != 0u && (m & (3u * round_bit - 1u)) != 0u { hm += 1u; }
        return hs | hm;
    }
    let r = hs | (u32(half_exp) << 10u) | (man >> 13u);
    if (man & 0x1000u) != 0u && (man & 0x2fffu) != 0u { return r + 1u; }
    return r;
}

// f16 bits -> f32 bits, exactly (subnormals included, NaN quieted as `half` does).
fn half_widen_bits(h: u32) -> u32 {
    let sign = (h & 0x8000u) << 16u;
    let e = h & 0x7c00u;
    let m = h & 0x03ffu;
    if (h & 0x7fffu) == 0u { return sign; }
    if e == 0x7c00u {
        if m == 0u { return sign | 0x7f800000u; }
        return sign | 0x7fc00000u | (m << 13u);
    }
    if e == 0u {
        let z = countLeadingZeros(m) - 22u;
        return sign | ((112u - z) << 23u) | ((m << (14u + z)) & 0x007fffffu);
    }
    return sign | (((e >> 10u) + 112u) << 23u) | (m << 13u);
}

// A packed word's two values (element 2i in .x), widened exactly, for kernels that load words.
fn half_unpack2(w: u32) -> vec2<f32> { return unpack2x16float(w); }
fn half_word_value(w: u32, i: u32) -> f32 { return half_unpack2(w)[i & 1u]; }
