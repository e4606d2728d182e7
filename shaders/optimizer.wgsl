// Fused optimizer updates: one pass reads parameter, gradient and state and writes both back,
// instead of a chain of element-wise kernels. PyTorch semantics:
//   SGD:   v = μ·v + (g + wd·p);  p -= lr·v
//   AdamW: p *= 1 − lr·wd;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
//          p -= step_size · m / (√v / √(1−β2^t) + ε),  step_size = lr / (1−β1^t)
// The bias-correction factors come from the host so every backend uses the same values.
//
// Template: {{WG}} workgroup size.

struct Params { n: u32, lr: f32, momentum: f32, weight_decay: f32, beta1: f32, beta2: f32, eps: f32, decay: f32, step_size: f32, bias2_sqrt: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> param: array<f32>;
@group(0) @binding(2) var<storage, read> grad: array<f32>;
@group(0) @binding(3) var<storage, read_write> s1: array<f32>;
@group(0) @binding(4) var<storage, read_write> s2: array<f32>;

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * {{WG}}u;
}

@compute @workgroup_size({{WG}})
fn sgd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= p.n { return; }
    let d = grad[i] + p.weight_decay * param[i];
    let v = p.momentum * s1[i] + d;
    s1[i] = v;
    param[i] -= p.lr * v;
}

@compute @workgroup_size({{WG}})
fn adamw(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= p.n { return; }
    let g = grad[i];
    var w = param[i] * p.decay;
    let m = p.beta1 * s1[i] + (1.0 - p.beta1) * g;
    let v = p.beta2 * s2[i] + (1.0 - p.beta2) * g * g;
    s1[i] = m;
    s2[i] = v;
    w -= p.step_size * m / (sqrt(v) / p.bias2_sqrt + p.eps);
    param[i] = w;
}
