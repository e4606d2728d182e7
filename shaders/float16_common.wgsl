// Helpers over either 16-bit type (appended after float16_f16.wgsl or float16_bf16.wgsl).

// Two 16-bit patterns into one stored word (element 2i low, 2i+1 high).
fn half_pack_bits(even: u32, odd: u32) -> u32 {
    return (even & 0xffffu) | (odd << 16u);
}

// Underflow statistics: [0] nonzero f32 values, [1] of those, how many rounded to ±0.
// Summed per workgroup first, so the global atomics are one per workgroup, not per element.
var<workgroup> wg_nonzero: atomic<u32>;
var<workgroup> wg_flushed: atomic<u32>;

fn half_count(f32_bits: u32, rounded: u32) {
    if (f32_bits & 0x7fffffffu) != 0u {
        atomicAdd(&wg_nonzero, 1u);
        if (rounded & 0x7fffu) == 0u { atomicAdd(&wg_flushed, 1u); }
    }
}

// Two f32 bit patterns rounded to the 16-bit type and packed into one stored word, with their
// underflow counted when `count` is set.
fn half_store_pair(x0: u32, x1: u32, count: bool) -> u32 {
    let r0 = half_round_bits(x0);
    let r1 = half_round_bits(x1);
    if count {
        half_count(x0, r0);
        half_count(x1, r1);
    }
    return half_pack_bits(r0, r1);
}

// Adds the workgroup's underflow counts to the kernel's global `stats` (each kernel that
// includes these helpers binds one). Call from uniform control flow: it holds a barrier.
fn half_flush_counts(lid: u32) {
    workgroupBarrier();
    if lid == 0u {
        atomicAdd(&stats[0], atomicLoad(&wg_nonzero));
        atomicAdd(&stats[1], atomicLoad(&wg_flushed));
    }
}
