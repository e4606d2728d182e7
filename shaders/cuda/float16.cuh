// 16-bit helpers shared by amp.cu and conv.cu (src/device/cuda/kernels.rs puts this file in
// front of each). 16-bit values travel as their bit patterns (unsigned short); the conversions
// round to nearest even exactly as the host's `half` crate does (src/tensor/float16.rs), so a
// value rounded here and on the CPU is the same value. `bf16` flags pick bfloat16 over IEEE half.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

#define GRID_STRIDE(i, n) for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

__device__ float widen(u16 bits, u32 bf16) {
    if (bf16) return __uint_as_float(((u32)bits) << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
}

__device__ u16 round_bits(float x, u32 bf16) {
    if (bf16) {
        u32 u = __float_as_uint(x);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x0040u);  // quiet NaN
        // Round half to even: up when the dropped half is over 0x8000, or exactly 0x8000 and odd.
        u32 round_up = (u & 0x8000u) && (u & 0x17fffu);
        return (u16)((u >> 16) + round_up);
    }
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}

