// Symmetric int8 on the CUDA backend (QuantOps), compiled by NVRTC at first use behind
// float16.cuh (for its types and GRID_STRIDE): the scales (absmax · 1/127 per tensor or per
// column; a zero or non-finite range gets 1), f32 → i8, i8 or i32 → f32, and the int8 GEMM with
// i32 accumulators. The CPU (src/tensor/ops/quant.rs `quantize_value`, `scale_for_absmax`) is
// the reference: max, the IEEE division (NVRTC's default -prec-div=true), rintf (half to even)
// and one multiply give its numbers exactly. I8 tensors hold one signed byte per element.

typedef signed char i8;

__device__ float scale_for(float absmax, float inv127) {
    return (absmax > 0.0f && absmax <= 3.40282347e38f) ? absmax * inv127 : 1.0f;
}

// One thread per column: its absmax (fmaxf skips NaN, as the CPU's f32::max does) → its scale.
extern "C" __global__ void absmax_cols(const float* x, float* scales, u32 rows, u32 cols, float inv127) {
    GRID_STRIDE(j, cols) {
        float m = 0.0f;
        for (u32 r = 0; r < rows; r++) m = fmaxf(m, fabsf(x[(u64)r * cols + j]));
        scales[j] = scale_for(m, inv127);
    }
}

// One block of REDUCE_THREADS (256): the whole tensor's absmax → scales[0].
extern "C" __global__ void absmax_all(const float* x, float* scales, u64 n, float inv127) {
    __shared__ float partial[256];
    float m = 0.0f;
    for (u64 i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, fabsf(x[i]));
    partial[threadIdx.x] = m;
    __syncthreads();
    for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) scales[0] = scale_for(partial[0], inv127);
}

// q = clamp(round_half_even(x / scale), −127, 127); NaN → 0. One scale, or one per column.
extern "C" __global__ void quantize(const float* x, const float* scales, i8* q, u64 n, u32 cols, u32 per_channel) {
    GRID_STRIDE(e, n) {
        float v = rintf(x[e] / scales[per_channel ? e % cols : 0]);
        q[e] = (i8)(v == v ? fminf(fmaxf(v, -127.0f), 127.0f) : 0.0f);
    }
}

extern "C" __global__ void dequantize_i8(const i8* q, const float* scales, float* out, u64 n, u32 cols, u32 per_channel) {
    GRID_STRIDE(e, n) { out[e] = (float)q[e] * scales[per_channel ? e % cols : 0]; }
}

extern "C" __global__ void dequantize_i32(const int* q, const float* scales, float* out, u64 n, u32 cols, u32 per_channel) {
    GRID_STRIDE(e, n) { out[e] = (float)q[e] * scales[per_channel ? e % cols : 0]; }
}

// Four i8 products added to acc, wrapping in 32 bits like the CPU's i32 sums: the dp4a
// instruction where the module was compiled for compute capability 6.1 or newer.
__device__ int dot4(int a, int b, int acc) {
#if __CUDA_ARCH__ >= 610
    return __dp4a(a, b, acc);
#else
    unsigned s = (unsigned)acc;
    for (int t = 0; t < 4; t++) s += (unsigned)((int)(i8)(a >> (8 * t)) * (int)(i8)(b >> (8 * t)));
    return (int)s;
#endif
}

#define TILE 16
#define TK 32

// c [m, n] (i32) = op(a) · op(b), a [m, k] (or [k, m] when ta), b [k, n] (or [n, k] when tb),
// row-major. A 16×16 block per 16×16 tile of c; each TK-deep slab of a's rows and b's columns
// is staged in shared memory with k contiguous (zero beyond k, m, n), so four products are one
// 32-bit word each.
extern "C" __global__ void matmul_i8(const i8* a, const i8* b, int* c, u32 m, u32 n, u32 k, u32 ta, u32 tb) {
    __shared__ __align__(4) i8 as[TILE][TK];
    __shared__ __align__(4) i8 bs[TILE][TK];
    u32 tx = threadIdx.x, ty = threadIdx.y;
    u32 row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    int acc = 0;
    for (u32 k0 = 0; k0 < k; k0 += TK) {
        // 16×16 threads fill 16×32 bytes of each slab: two each, thread (tx, ty) row/column ty.
        for (u32 t = 0; t < 2; t++) {
            u32 kk = 2 * tx + t, kg = k0 + kk;
            u32 r = row0 + ty, j = col0 + ty;
            as[ty][kk] = (r < m && kg < k) ? (ta ? a[(u64)kg * m + r] : a[(u64)r * k + kg]) : (i8)0;
            bs[ty][kk] = (j < n && kg < k) ? (tb ? b[(u64)j * k + kg] : b[(u64)kg * n + j]) : (i8)0;
        }
        __syncthreads();
#pragma unroll
        for (u32 kk = 0; kk < TK; kk += 4) acc = dot4(*(const int*)&as[ty][kk], *(const int*)&bs[tx][kk], acc);
        __syncthreads();
    }
    u32 r = row0 + ty, j = col0 + tx;
    if (r < m && j < n) c[(u64)r * n + j] = acc;
}
