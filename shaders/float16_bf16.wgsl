// BF16 storage (prepended to the 16-bit kernels). WGSL has no bf16 type, so two values are
// packed in one u32 (element 2i in the low half, the host's little-endian order). A bf16 is
// the top 16 bits of an f32, so unpacking is a shift and all arithmetic is done in f32; it
// needs no SHADER_F16 and runs on every adapter.

alias half_elems = u32;

// Element i lives in word i/2; its f32 value is its 16 bits followed by 16 zero bits.
fn half_index(i: u32) -> u32 { return i / 2u; }
fn half_value(w: u32, i: u32) -> f32 {
    return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));
}

// f32 bits -> bf16 bits, round to nearest even, as the `half` crate does; NaN stays NaN.
fn half_round_bits(x: u32) -> u32 {
    if (x & 0x7fffffffu) > 0x7f800000u { return (x >> 16u) | 0x0040u; }
    let r = x >> 16u;
    if (x & 0x8000u) != 0u && (x & 0x17fffu) != 0u { return r + 1u; }
    return r;
}

// bf16 bits -> f32 bits, exactly (NaN quieted as `half` does).
fn half_widen_bits(h: u32) -> u32 {
    if (h & 0x7fffu) > 0x7f80u { return (h | 0x0040u) << 16u; }
    return h << 16u;
}

// A packed word's two values (element 2i in .x), for kernels that load words.
fn half_unpack2(w: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u)); }
fn half_word_value(w: u32, i: u32) -> f32 { return half_value(w, i); }
