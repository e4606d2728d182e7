// The f32 ops of the CUDA backend (CoreOps), compiled by NVRTC at first use
// (src/device/cuda/kernels.rs) behind optimizer.cuh (the optimizer formulas). Each kernel computes what the CPU reference in
// src/device/cpu/ops.rs computes; element-wise kernels use grid-stride loops, so any launch
// size covers any tensor. Sizes are unsigned long long (u64 on the Rust side) or unsigned int.

typedef unsigned long long u64;
typedef unsigned int u32;

#define GRID_STRIDE(i, n) for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

extern "C" __global__ void bias_add(float* y, const float* bias, u64 n, u32 cols) {
    GRID_STRIDE(i, n) { y[i] += bias[i % cols]; }
}

extern "C" __global__ void relu(float* x, u64 n) {
    GRID_STRIDE(i, n) { x[i] = fmaxf(x[i], 0.0f); }
}

extern "C" __global__ void relu_backward(float* grad, const float* act, u64 n) {
    GRID_STRIDE(i, n) { if (!(act[i] > 0.0f)) grad[i] = 0.0f; }
}

extern "C" __global__ void scale(float* x, u64 n, float alpha) {
    GRID_STRIDE(i, n) { x[i] *= alpha; }
}

// acc += x (gradients summed over micro-batches).
extern "C" __global__ void add_to(float* acc, const float* x, u64 n) {
    GRID_STRIDE(i, n) { acc[i] += x[i]; }
}

extern "C" __global__ void fill_u32(u32* x, u64 n, u32 bits) {
    GRID_STRIDE(i, n) { x[i] = bits; }
}

extern "C" __global__ void fill_u16(unsigned short* x, u64 n, unsigned short bits) {
    GRID_STRIDE(i, n) { x[i] = bits; }
}

// optimizer.cuh's SGD (PyTorch's, momentum and weight decay) on every element.
extern "C" __global__ void sgd_step(float* p, const float* g, float* v, u64 n, float lr, float momentum, float wd) {
    GRID_STRIDE(i, n) { p[i] = sgd_update(p[i], g[i], &v[i], lr, momentum, wd); }
}

// optimizer.cuh's AdamW with the per-step factors computed on the host (tensor/hyper.rs AdamW::factors).
extern "C" __global__ void adamw_step(float* p, const float* g, float* m, float* v, u64 n,
                                      float beta1, float beta2, float eps,
                                      float decay, float step_size, float bias2_sqrt) {
    GRID_STRIDE(i, n) { p[i] = adamw_update(p[i], g[i], &m[i], &v[i], beta1, beta2, eps, decay, step_size, bias2_sqrt); }
}

// One thread per row: loss = logsumexp(x) − x[label] (NaN for a label out of range);
// grad = (softmax(x) − onehot(label)) · scale when `grad` is not null.
extern "C" __global__ void softmax_xent(const float* logits, const u32* labels, float* loss, float* grad,
                                        u32 rows, u32 cols, float scale) {
    u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = logits + (u64)r * cols;
    float mx = __int_as_float(0xff800000);  // -inf
    for (u32 j = 0; j < cols; ++j) mx = fmaxf(mx, row[j]);
    float sum = 0.0f;
    for (u32 j = 0; j < cols; ++j) sum += expf(row[j] - mx);
    u32 label = labels[r];
    loss[r] = label < cols ? mx + logf(sum) - row[label] : __int_as_float(0x7fc00000);
    if (grad) {
        float* g = grad + (u64)r * cols;
        for (u32 j = 0; j < cols; ++j) g[j] = (expf(row[j] - mx) / sum - (j == label ? 1.0f : 0.0f)) * scale;
    }
}

// out[c] = Σ_r x[r, c], rows summed in order (one thread per column).
extern "C" __global__ void sum_cols(const float* x, float* out, u32 rows, u32 cols) {
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (u32 r = 0; r < rows; ++r) s += x[(u64)r * cols + c];
    out[c] = s;
}

// out[r] = Σ_c x[r, c] (one thread per row).
extern "C" __global__ void sum_rows(const float* x, float* out, u32 rows, u32 cols) {
    u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (u32 c = 0; c < cols; ++c) s += x[(u64)r * cols + c];
    out[r] = s;
}

__device__ u32 argmax_row(const float* row, u32 cols) {
    u32 best = 0;
    for (u32 j = 1; j < cols; ++j) if (row[j] > row[best]) best = j;  // first maximum wins
    return best;
}

extern "C" __global__ void argmax_rows(const float* x, u32* out, u32 rows, u32 cols) {
    u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = argmax_row(x + (u64)r * cols, cols);
}

#define REDUCE_THREADS 256

// The sum of each thread's `v` over a block of REDUCE_THREADS threads, in a fixed tree order
// (the result does not depend on scheduling); the total is valid in thread 0.
template <typename T>
__device__ T block_sum(T v) {
    __shared__ T part[REDUCE_THREADS];
    part[threadIdx.x] = v;
    __syncthreads();
    for (u32 w = REDUCE_THREADS / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    return part[0];
}

// acc[index] += Σ x, launched as ONE block of REDUCE_THREADS threads.
extern "C" __global__ void accumulate_sum(const float* x, float* acc, u64 n, u32 index) {
    float s = 0.0f;
    for (u64 i = threadIdx.x; i < n; i += REDUCE_THREADS) s += x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) acc[index] += s;
}

// acc[index] += #{r : argmax(logits[r]) == labels[r]}, one block of REDUCE_THREADS threads.
extern "C" __global__ void count_correct(const float* logits, const u32* labels, u32* acc, u32 rows, u32 cols, u32 index) {
    u32 hits = 0;
    for (u32 r = threadIdx.x; r < rows; r += REDUCE_THREADS) hits += argmax_row(logits + (u64)r * cols, cols) == labels[r];
    hits = block_sum(hits);
    if (threadIdx.x == 0) acc[index] += hits;
}
