// Mixed precision on the CUDA backend (AmpOps), compiled by NVRTC at first use like core.cu,
// behind float16.cuh (the types, GRID_STRIDE, widen and round_bits) and optimizer.cuh (the
// optimizer formulas core.cu's steps use too).

// Adds this thread's counts of [nonzero inputs, of those that rounded to zero] to stats[0..2].
__device__ void stats_add(u32* stats, u32 nonzero, u32 flushed) {
    if (stats && nonzero) {
        atomicAdd(stats, nonzero);
        if (flushed) atomicAdd(stats + 1, flushed);
    }
}

extern "C" __global__ void cast_to16(const float* x, u16* out, u32* stats, u64 n, u32 bf16) {
    u32 nonzero = 0, flushed = 0;
    GRID_STRIDE(i, n) {
        float v = x[i];
        u16 b = round_bits(v, bf16);
        out[i] = b;
        if (v != 0.0f) { nonzero++; flushed += (b & 0x7fffu) == 0; }
    }
    stats_add(stats, nonzero, flushed);
}

extern "C" __global__ void cast_from16(const u16* x, float* out, u64 n, u32 bf16) {
    GRID_STRIDE(i, n) { out[i] = widen(x[i], bf16); }
}

// The matmul16 epilogue over the f32 product `acc` [rows, cols]: + bias[col] (then ReLU when
// `relu`), or × (mask > 0) for a ReLU's backward; stored as f32 (out16 == 0) or rounded to the
// 16-bit type, counting values that rounded to zero into `stats`.
extern "C" __global__ void epilogue16(const float* acc, const float* bias, u32 relu, const u16* mask,
                                      float* out32, u16* out16, u32* stats, u64 n, u32 cols, u32 bf16) {
    u32 nonzero = 0, flushed = 0;
    GRID_STRIDE(i, n) {
        float v = acc[i];
        if (bias) { v += bias[i % cols]; if (relu) v = fmaxf(v, 0.0f); }
        if (mask && !(widen(mask[i], bf16) > 0.0f)) v = 0.0f;
        if (out16) {
            u16 b = round_bits(v, bf16);
            out16[i] = b;
            if (v != 0.0f) { nonzero++; flushed += (b & 0x7fffu) == 0; }
        } else {
            out32[i] = v;
        }
    }
    stats_add(stats, nonzero, flushed);
}

// The loss scaler's state words (src/tensor/scaler.rs `word`): the device keeps scale, growth
// tracker, skipped and optimizer step counts and the overflow flag, so a step reads nothing back.
#define SCALE 0
#define INV_SCALE 1
#define TRACKER 2
#define SKIPPED 3
#define STEPS 4
#define FOUND_INF 5

// g *= the state's scale (the loss gradient).
extern "C" __global__ void scale_by_loss_scale(float* g, const u32* state, u64 n) {
    float s = __uint_as_float(state[SCALE]);
    GRID_STRIDE(i, n) g[i] *= s;
}

// g *= the state's inv_scale; its FOUND_INF word = 1 when any g was inf or NaN.
extern "C" __global__ void unscale_check(float* g, u32* state, u64 n) {
    float inv_scale = __uint_as_float(state[INV_SCALE]);
    bool bad = false;
    GRID_STRIDE(i, n) {
        float v = g[i];
        bad |= (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u;  // inf or NaN
        g[i] = v * inv_scale;
    }
    if (bad) state[FOUND_INF] = 1u;
}

// optimizer.cuh's SGD or AdamW step (adam != 0), as core.cu's steps, a no-op when FOUND_INF is
// set; AdamW's factors from the table row at the on-device step count; the updated weight rounded
// into w16 when given.
extern "C" __global__ void amp_update(float* p, const float* g, float* s1, float* s2, const u32* state,
                                      const float* table, u16* w16, u64 n, u32 adam, float lr,
                                      float momentum, float wd, float beta1, float beta2, float eps,
                                      float decay, u32 bf16) {
    if (state[FOUND_INF]) return;
    u32 row = state[STEPS];
    float step_size = adam ? table[2 * (u64)row] : 0.0f;
    float bias2_sqrt = adam ? table[2 * (u64)row + 1] : 1.0f;
    GRID_STRIDE(i, n) {
        float w = adam ? adamw_update(p[i], g[i], &s1[i], &s2[i], beta1, beta2, eps, decay, step_size, bias2_sqrt)
                       : sgd_update(p[i], g[i], &s1[i], lr, momentum, wd);
        p[i] = w;
        if (w16) w16[i] = round_bits(w, bf16);
    }
}

// One thread: tensor::scaler::update_words (PyTorch's _amp_update_scale_, the step count, the
// log entry). The reciprocal is computed in double, as the host does.
extern "C" __global__ void scaler_update(u32* state, u32* log, u32 slot, u32 scaling, u32 interval,
                                         float growth, float backoff, float min_scale) {
    bool found = state[FOUND_INF] != 0u;
    log[slot] = state[SCALE] | (found ? 0x80000000u : 0u);
    if (scaling) {
        float scale = __uint_as_float(state[SCALE]);
        if (found) {
            scale = fmaxf(scale * backoff, min_scale);
            state[TRACKER] = 0u;
            state[SKIPPED] += 1u;
        } else {
            u32 tracker = state[TRACKER] + 1u;
            if (tracker >= interval) {
                tracker = 0u;
                float grown = scale * growth;
                if ((__float_as_uint(grown) & 0x7f800000u) != 0x7f800000u) scale = grown;
            }
            state[TRACKER] = tracker;
        }
        state[SCALE] = __float_as_uint(scale);
        state[INV_SCALE] = __float_as_uint((float)(1.0 / (double)scale));
    }
    if (!found) state[STEPS] += 1u;
    state[FOUND_INF] = 0u;
}

// out[c] = Σ_r widen(x[r, c]) in row order (one thread per column): bias gradients of 16-bit
// activations' gradients.
extern "C" __global__ void sum_cols16(const u16* x, float* out, u32 rows, u32 cols, u32 bf16) {
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (u32 r = 0; r < rows; ++r) s += widen(x[(u64)r * cols + c], bf16);
    out[c] = s;
}
