// The optimizer formulas, once for every WGSL kernel that updates weights (optimizer.wgsl, the
// f32 step; amp_optimizer.wgsl, the mixed-precision step), as the CPU reference computes them
// (device/cpu/optim.rs) and the CUDA kernels (cuda/optimizer.cuh). PyTorch semantics:
//   SGD:   v = μ·v + (g + wd·p);  p -= lr·v
//   AdamW: p *= 1 − lr·wd;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
//          p -= step_size · m / (√v / √(1−β2^t) + ε),  step_size = lr / (1−β1^t)
// The bias-correction factors (decay, step_size, bias2_sqrt) come from the host, so every
// backend uses the same values. The kernels include this file through their OPTIMIZER_MATH
// placeholder (device/gpu/kernels.rs); it declares no bindings.

// SGD with momentum and weight decay on one element: (new p, new v).
fn sgd_update(p: f32, g: f32, v: f32, lr: f32, momentum: f32, weight_decay: f32) -> vec2<f32> {
    let d = g + weight_decay * p;
    let v1 = momentum * v + d;
    return vec2<f32>(p - lr * v1, v1);
}

// AdamW on one element: (new p, new m, new v).
fn adamw_update(p: f32, g: f32, m: f32, v: f32, beta1: f32, beta2: f32, eps: f32, decay: f32, step_size: f32, bias2_sqrt: f32) -> vec3<f32> {
    let w = p * decay;
    let m1 = beta1 * m + (1.0 - beta1) * g;
    let v1 = beta2 * v + (1.0 - beta2) * g * g;
    return vec3<f32>(w - step_size * m1 / (sqrt(v1) / bias2_sqrt + eps), m1, v1);
}
