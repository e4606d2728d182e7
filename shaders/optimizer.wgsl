// Fused optimizer updates: one pass reads parameter, gradient and state and writes both back,
// instead of a chain of element-wise kernels. The formulas are optimizer_math.wgsl's (the
// OPTIMIZER_MATH placeholder below), shared with the mixed-precision step (amp_optimizer.wgsl).
//
// Template: {{WG}} workgroup size.

{{OPTIMIZER_MATH}}

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
    let r = sgd_update(param[i], grad[i], s1[i], p.lr, p.momentum, p.weight_decay);
    param[i] = r.x;
    s1[i] = r.y;
}

@compute @workgroup_size({{WG}})
fn adamw(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= p.n { return; }
    let r = adamw_update(param[i], grad[i], s1[i], s2[i], p.beta1, p.beta2, p.eps, p.decay, p.step_size, p.bias2_sqrt);
    param[i] = r.x;
    s1[i] = r.y;
    s2[i] = r.z;
}
