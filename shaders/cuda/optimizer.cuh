// The optimizer formulas, once for every CUDA kernel that updates weights (core.cu's f32 steps,
// amp.cu's mixed-precision step), as the CPU reference computes them (src/device/cpu/optim.rs)
// and the WGSL kernels (shaders/optimizer_math.wgsl). src/device/cuda/kernels.rs puts this file
// in front of core.cu and amp.cu. PyTorch semantics:
//   SGD:   v = momentum·v + (g + wd·p);  p -= lr·v
//   AdamW: p *= 1 − lr·wd;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
//          p -= step_size · m / (√v / √(1−β2^t) + ε),  step_size = lr / (1−β1^t)
// The bias-correction factors (decay, step_size, bias2_sqrt) come from the host (tensor/hyper.rs
// AdamW::factors, or the factor table the mixed-precision step indexes by its step count).
// NVRTC's default --fmad=true may contract a multiply-add into one FMA, so a result can differ
// from the CPU's by the product's rounding (tests/it/optimizer.rs states the bound).

// SGD with momentum and weight decay on one element: updates *v, returns the new p.
__device__ __forceinline__ float sgd_update(float p, float g, float* v, float lr, float momentum, float wd) {
    float d = g + wd * p;
    float v1 = momentum * *v + d;
    *v = v1;
    return p - lr * v1;
}

// AdamW on one element: updates *m and *v, returns the new p.
__device__ __forceinline__ float adamw_update(float p, float g, float* m, float* v, float beta1, float beta2, float eps,
                                              float decay, float step_size, float bias2_sqrt) {
    float w = p * decay;
    float m1 = beta1 * *m + (1.0f - beta1) * g;
    float v1 = beta2 * *v + (1.0f - beta2) * g * g;
    *m = m1;
    *v = v1;
    return w - step_size * m1 / (sqrtf(v1) / bias2_sqrt + eps);
}
