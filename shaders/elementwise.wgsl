// Element-wise ops over a flat array of `n` elements. One invocation per element; large
// arrays spill into the y dimension of the dispatch (65535 workgroups per dimension).
//
// Template: {{WG}} workgroup size.

struct Params { n: u32, cols: u32, value: f32, bits: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
// Raw 32-bit views for copies and integer fills, so bits pass through untouched.
@group(0) @binding(3) var<storage, read_write> dst_bits: array<u32>;
@group(0) @binding(4) var<storage, read> src_bits: array<u32>;

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * {{WG}}u;
}

@compute @workgroup_size({{WG}})
fn relu(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i < p.n { x[i] = max(x[i], 0.0); }
}

// x is the incoming gradient, y the ReLU's output.
@compute @workgroup_size({{WG}})
fn relu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i < p.n { x[i] = select(0.0, x[i], y[i] > 0.0); }
}

// x is [rows, cols] row-major, y the [cols] bias; bits = 1 fuses the ReLU (the dense layer's
// epilogue in one pass).
@compute @workgroup_size({{WG}})
fn bias_add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i < p.n {
        let v = x[i] + y[i % p.cols];
        x[i] = select(v, max(v, 0.0), p.bits != 0u);
    }
}

@compute @workgroup_size({{WG}})
fn fill(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i < p.n { x[i] = p.value; }
}

@compute @workgroup_size({{WG}})
fn fill_bits(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i < p.n { dst_bits[i] = p.bits; }
}

@compute @workgroup_size({{WG}})
fn scale(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i < p.n { x[i] *= p.value; }
}

@compute @workgroup_size({{WG}})
fn copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i < p.n { dst_bits[i] = src_bits[i]; }
}

// x += y (gradients summed over micro-batches).
@compute @workgroup_size({{WG}})
fn add_to(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i < p.n { x[i] += y[i]; }
}
