// Symmetric int8 quantization: the scales (absmax · 1/127 per tensor or per column, a zero or
// non-finite range gets 1), f32 → i8 packed four per word, and i8 or i32 → f32. The CPU
// backend computes exactly the same numbers (tensor::quantize_value, scale_for_absmax): max
// and one multiply are exact in WGSL; the division v / scale may differ in its last bit,
// which moves a value that sits on a rounding tie by one step at most.
//
// Template: {{WG}} workgroup size.

// n elements, rows × cols; per_channel: one scale per column; inv127: the bits of 1/127 as
// the CPU rounds it; len, slices: the split absmax's slice length and count.
struct Params { n: u32, rows: u32, cols: u32, per_channel: u32, inv127: u32, len: u32, slices: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> q_out: array<u32>;
@group(0) @binding(3) var<storage, read_write> scales_out: array<f32>;
@group(0) @binding(4) var<storage, read> scales: array<f32>;
@group(0) @binding(5) var<storage, read> q_i8: array<u32>;
@group(0) @binding(6) var<storage, read> q_i32: array<i32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;

var<workgroup> partial: array<f32, {{WG}}>;

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * {{WG}}u;
}

fn scale_for(absmax: f32) -> f32 {
    // absmax ≤ f32 max: not infinite (and not NaN, which fails both comparisons).
    if absmax > 0.0 && absmax <= 3.40282347e38 {
        return absmax * bitcast<f32>(p.inv127);
    }
    return 1.0;
}

fn scale_at(e: u32) -> f32 {
    return scales[select(0u, e % p.cols, p.per_channel != 0u)];
}

// One invocation per column: its absmax → its scale.
@compute @workgroup_size({{WG}})
fn absmax_cols(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = index(gid, nwg);
    if j >= p.cols {
        return;
    }
    var m = 0.0;
    for (var r = 0u; r < p.rows; r++) {
        m = max(m, abs(x[r * p.cols + j]));
    }
    scales_out[j] = scale_for(m);
}

// One workgroup: the whole tensor's absmax → scales_out[0].
@compute @workgroup_size({{WG}})
fn absmax_all(@builtin(local_invocation_index) lid: u32) {
    var m = 0.0;
    for (var i = lid; i < p.n; i += {{WG}}u) {
        m = max(m, abs(x[i]));
    }
    partial[lid] = m;
    workgroupBarrier();
    for (var s = {{WG}}u / 2u; s > 0u; s >>= 1u) {
        if lid < s {
            partial[lid] = max(partial[lid], partial[lid + s]);
        }
        workgroupBarrier();
    }
    if lid == 0u {
        scales_out[0] = scale_for(partial[0]);
    }
}

// A long absmax split (then `absmax_finish`), one partial max per workgroup into out. Per
// channel: workgroup (x, s) covers columns x·64 .. x·64+63 over rows [s·len, (s+1)·len), 64
// columns × WG/64 row lanes, out[s·cols + c]. Per tensor: workgroup s covers elements
// [s·len, (s+1)·len) with all WG lanes, out[s]. max is exact and order-free, so the scales
// equal the unsplit kernels' (and the CPU's).
@compute @workgroup_size({{WG}})
fn absmax_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    var m = 0.0;
    let begin = wid.y * p.len;
    if p.per_channel != 0u {
        let c = wid.x * 64u + li % 64u;
        let end = min(begin + p.len, p.rows);
        if c < p.cols {
            for (var r = begin + li / 64u; r < end; r += {{WG}}u / 64u) { m = max(m, abs(x[r * p.cols + c])); }
        }
    } else {
        let end = min(begin + p.len, p.n);
        for (var i = begin + li; i < end; i += {{WG}}u) { m = max(m, abs(x[i])); }
    }
    partial[li] = m;
    workgroupBarrier();
    let stop = select(1u, 64u, p.per_channel != 0u);
    for (var s = {{WG}}u / 2u; s >= stop; s >>= 1u) {
        if li < s { partial[li] = max(partial[li], partial[li + s]); }
        workgroupBarrier();
    }
    if p.per_channel != 0u {
        let c = wid.x * 64u + li;
        if li < 64u && c < p.cols { out[wid.y * p.cols + c] = partial[li]; }
    } else if li == 0u {
        out[wid.y] = partial[0];
    }
}

// The split absmax's second pass: one invocation per scale (column, or the tensor's one), the
// max over the `slices` partials in `scales` → its scale.
@compute @workgroup_size({{WG}})
fn absmax_finish(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = index(gid, nwg);
    let width = select(1u, p.cols, p.per_channel != 0u);
    if j >= width { return; }
    var m = 0.0;
    for (var s = 0u; s < p.slices; s++) { m = max(m, scales[s * width + j]); }
    scales_out[j] = scale_for(m);
}

// One invocation per output word: elements 4w..4w+4.
@compute @workgroup_size({{WG}})
fn quantize(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = index(gid, nwg);
    if 4u * w >= p.n {
        return;
    }
    var word = 0u;
    for (var t = 0u; t < 4u; t++) {
        let e = 4u * w + t;
        if e < p.n {
            // round() rounds half to even, as the CPU does; NaN fails the comparisons → 0.
            var q = round(x[e] / scale_at(e));
            q = select(0.0, clamp(q, -127.0, 127.0), q == q);
            word |= (bitcast<u32>(i32(q)) & 0xffu) << (8u * t);
        }
    }
    q_out[w] = word;
}

@compute @workgroup_size({{WG}})
fn dequantize_i8(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = index(gid, nwg);
    if e < p.n {
        // Sign-extend byte e % 4 of its word.
        let v = (bitcast<i32>(q_i8[e >> 2u] << (24u - 8u * (e & 3u)))) >> 24u;
        out[e] = f32(v) * scale_at(e);
    }
}

@compute @workgroup_size({{WG}})
fn dequantize_i32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = index(gid, nwg);
    if e < p.n {
        out[e] = f32(q_i32[e]) * scale_at(e);
    }
}
