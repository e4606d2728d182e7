{{FLOAT16}}
// The mixed-precision optimizer step: optimizer_math.wgsl's SGD and AdamW (the formulas of the f32
// step, optimizer.wgsl) on the f32 master weights, (1) skipped when the scaler state's FOUND_INF
// word is set (PyTorch's fused path: no host decision, no read-back), (2) AdamW's bias correction
// from the table row at the state's step count (skipped steps do not count), and (3) the updated
// weights rounded into their 16-bit working copy in the same pass, so no separate cast runs. One
// invocation per 16-bit word: two elements, as cast_to16 (amp.wgsl) handles them.
//
// Template: the FLOAT16 placeholder on the first line (the 16-bit type's helpers), OPTIMIZER_MATH
// below, {{WG}} workgroup size.

{{OPTIMIZER_MATH}}

struct Params { n: u32, lr: f32, momentum: f32, weight_decay: f32, beta1: f32, beta2: f32, eps: f32, decay: f32, write16: u32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> param: array<f32>;
@group(0) @binding(2) var<storage, read> grad: array<f32>;
@group(0) @binding(3) var<storage, read_write> s1: array<f32>;
@group(0) @binding(4) var<storage, read_write> s2: array<f32>;
@group(0) @binding(5) var<storage, read> state: array<u32>;
@group(0) @binding(6) var<storage, read> table: array<f32>;
@group(0) @binding(7) var<storage, read_write> w16: array<u32>;
// Declared for the float16 helpers' underflow counts, which these kernels never take.
@group(0) @binding(8) var<storage, read_write> stats: array<atomic<u32>>;

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * {{WG}}u;
}

fn sgd_one(i: u32) -> f32 {
    let r = sgd_update(param[i], grad[i], s1[i], p.lr, p.momentum, p.weight_decay);
    param[i] = r.x;
    s1[i] = r.y;
    return r.x;
}

fn adamw_one(i: u32, step_size: f32, bias2_sqrt: f32) -> f32 {
    let r = adamw_update(param[i], grad[i], s1[i], s2[i], p.beta1, p.beta2, p.eps, p.decay, step_size, bias2_sqrt);
    param[i] = r.x;
    s1[i] = r.y;
    s2[i] = r.z;
    return r.x;
}

// The word's two updated weights (a missing odd element is +0, as cast_to16 stores it).
fn store16(w: u32, x0: f32, x1: f32) {
    if p.write16 != 0u { w16[w] = half_store_pair(bitcast<u32>(x0), bitcast<u32>(x1), false); }
}

@compute @workgroup_size({{WG}})
fn amp_sgd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = flat(gid, nwg);
    let i = 2u * w;
    if i >= p.n || state[5] != 0u { return; }
    let x0 = sgd_one(i);
    var x1 = 0.0;
    if i + 1u < p.n { x1 = sgd_one(i + 1u); }
    store16(w, x0, x1);
}

@compute @workgroup_size({{WG}})
fn amp_adamw(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = flat(gid, nwg);
    let i = 2u * w;
    if i >= p.n || state[5] != 0u { return; }
    let row = state[4];
    let step_size = table[2u * row];
    let bias2_sqrt = table[2u * row + 1u];
    let x0 = adamw_one(i, step_size, bias2_sqrt);
    var x1 = 0.0;
    if i + 1u < p.n { x1 = adamw_one(i + 1u, step_size, bias2_sqrt); }
    store16(w, x0, x1);
}
