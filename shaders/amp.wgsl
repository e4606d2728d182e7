{{FLOAT16}}
// Casts between f32 and a 16-bit type, the transpose of a 16-bit matrix, and the column sums of a 16-bit matrix (bias
// gradients). f32 values are moved as raw bits so nothing is flushed or canonicalised.
//
// Template: the FLOAT16 placeholder on the first line (the 16-bit type's helpers), {{WG}} workgroup size.

// len: the row slice of sum_cols16_part.
struct Params { n: u32, cols: u32, count: u32, len: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src_bits: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst_bits: array<u32>;
// 16-bit data as packed words (for exact bit handling) and as elements (for arithmetic).
@group(0) @binding(3) var<storage, read> src_words: array<u32>;
@group(0) @binding(4) var<storage, read_write> dst_words: array<u32>;
@group(0) @binding(5) var<storage, read_write> stats: array<atomic<u32>>;
@group(0) @binding(6) var<storage, read_write> sums: array<f32>;
@group(0) @binding(7) var<storage, read> src16: array<half_elems>;

var<workgroup> red: array<f32, {{WG}}>;

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * {{WG}}u;
}

// One invocation per output word: elements 2w and 2w+1 of `n`.
@compute @workgroup_size({{WG}})
fn cast_to16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let w = index(gid, nwg);
    let i = 2u * w;
    if i < p.n {
        // A missing odd element is +0: it rounds to 0 and counts as nothing.
        var x1 = 0u;
        if i + 1u < p.n { x1 = src_bits[i + 1u]; }
        dst_words[w] = half_store_pair(src_bits[i], x1, p.count != 0u);
    }
    if p.count != 0u { half_flush_counts(lid); }
}

@compute @workgroup_size({{WG}})
fn cast_to_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i < p.n {
        let w = src_words[i / 2u];
        let h = select(w & 0xffffu, w >> 16u, (i & 1u) == 1u);
        dst_bits[i] = half_widen_bits(h);
    }
}

// dst = srcᵀ for a 16-bit src of n elements in rows of `cols`: one invocation per output word
// (two elements, which may come from two source columns), moved as bits.
@compute @workgroup_size({{WG}})
fn transpose16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = index(gid, nwg);
    let e = 2u * w;
    if e >= p.n { return; }
    let rows = p.n / p.cols;
    var bits = 0u;
    for (var h = 0u; h < 2u; h += 1u) {
        if e + h < p.n {
            // dst element e + h sits at (row, col) = ((e+h) / rows, (e+h) % rows) of [cols, rows].
            let i = ((e + h) % rows) * p.cols + (e + h) / rows;
            let sw = src_words[i / 2u];
            bits |= select(sw & 0xffffu, sw >> 16u, (i & 1u) == 1u) << (16u * h);
        }
    }
    dst_words[w] = bits;
}

// sums[c] = Σ_r x[r, c] in f32, rows in order (as the CPU reference sums them); n = rows.
@compute @workgroup_size({{WG}})
fn sum_cols16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let c = index(gid, nwg);
    if c >= p.cols { return; }
    var s = 0.0;
    for (var r = 0u; r < p.n; r += 1u) {
        let e = r * p.cols + c;
        s += half_value(src16[half_index(e)], e);
    }
    sums[c] = s;
}

// sum_cols16 split over row slices (reduce.wgsl `sum_cols_part` for a 16-bit x, n = rows):
// workgroup (x, s) sums columns x·64 .. x·64+63 over rows [s·len, (s+1)·len), 64 columns ×
// WG/64 row lanes added in workgroup memory by halving; sums[s·cols + c] = its sum, and
// `sum_slices` adds the slices in order.
@compute @workgroup_size({{WG}})
fn sum_cols16_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let c = wid.x * 64u + li % 64u;
    let lane = li / 64u;
    let begin = wid.y * p.len;
    let end = min(begin + p.len, p.n);
    var s = 0.0;
    if c < p.cols {
        for (var r = begin + lane; r < end; r += {{WG}}u / 64u) {
            let e = r * p.cols + c;
            s += half_value(src16[half_index(e)], e);
        }
    }
    red[li] = s;
    workgroupBarrier();
    for (var w = {{WG}}u / 2u; w >= 64u; w /= 2u) {
        if li < w { red[li] += red[li + w]; }
        workgroupBarrier();
    }
    if lane == 0u && c < p.cols {
        sums[wid.y * p.cols + c] = red[li];
    }
}
