{{FLOAT16}}
// C = epilogue(op(A)·op(B)) for 16-bit A and B: products and sums in f32 (as tensor cores
// accumulate), the epilogue fused, and the result stored as f32 (`main_f32`, e.g. weight
// gradients for the f32 master weights) or rounded to 16 bits (`main16`, activations and
// their gradients).
//
// One invocation computes one 32-bit word of C: two consecutive row-major elements, which may
// sit on two rows. 16-bit outputs are packed two per word, so one writer per word keeps the
// stores race-free. This is a plain kernel with no shared-memory tiling — simpler than the
// tuned f32 kernels, which the exercise's report says when it compares speeds.
//
// Template: the FLOAT16 placeholder on the first line (the 16-bit type's helpers), {{WG}}, {{TA}}/{{TB}} transpose flags.

const TA: bool = {{TA}};
const TB: bool = {{TB}};

// epi: 0 none, 1 + bias, 2 + bias then ReLU, 3 ReLU mask from `act`; count: underflow stats.
struct Params { m: u32, n: u32, k: u32, epi: u32, count: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<half_elems>;
@group(0) @binding(2) var<storage, read> b: array<half_elems>;
@group(0) @binding(3) var<storage, read_write> c16: array<u32>;
@group(0) @binding(4) var<storage, read_write> c_f32: array<f32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read> act: array<half_elems>;
@group(0) @binding(7) var<storage, read_write> stats: array<atomic<u32>>;

fn load_a(row: u32, kk: u32) -> f32 {
    let i = select(row * p.k + kk, kk * p.m + row, TA);
    return half_value(a[half_index(i)], i);
}

fn load_b(kk: u32, col: u32) -> f32 {
    let i = select(kk * p.n + col, col * p.k + kk, TB);
    return half_value(b[half_index(i)], i);
}

// Element e of C (e < m·n), epilogue applied.
fn element(e: u32, mask: f32) -> f32 {
    let row = e / p.n;
    let col = e % p.n;
    var v = 0.0;
    for (var kk = 0u; kk < p.k; kk += 1u) {
        v += load_a(row, kk) * load_b(kk, col);
    }
    if p.epi == 1u || p.epi == 2u { v += bias[col]; }
    if p.epi == 2u { v = max(v, 0.0); }
    if p.epi == 3u { v = select(0.0, v, mask > 0.0); }
    return v;
}

fn word(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * {{WG}}u;
}

@compute @workgroup_size({{WG}})
fn main16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let w = word(gid, nwg);
    let e = 2u * w;
    let total = p.m * p.n;
    if e < total {
        var v0 = 0.0;
        var v1 = 0.0;
        if p.epi == 3u {
            v0 = element(e, half_value(act[half_index(e)], e));
            if e + 1u < total { v1 = element(e + 1u, half_value(act[half_index(e + 1u)], e + 1u)); }
        } else {
            v0 = element(e, 1.0);
            if e + 1u < total { v1 = element(e + 1u, 1.0); }
        }
        c16[w] = half_store_pair(bitcast<u32>(v0), bitcast<u32>(v1), p.count != 0u);
    }
    if p.count != 0u { half_flush_counts(lid); }
}

@compute @workgroup_size({{WG}})
fn main_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = 2u * word(gid, nwg);
    let total = p.m * p.n;
    if e < total { c_f32[e] = element(e, 1.0); }
    if e + 1u < total { c_f32[e + 1u] = element(e + 1u, 1.0); }
}
