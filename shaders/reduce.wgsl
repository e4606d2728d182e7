// Reductions over a [rows, cols] row-major matrix: column sums (bias gradients), row sums,
// whole-array sums accumulated into a running total (the loss, read back only now and then),
// per-row argmax and the count of correct predictions. Every reduction runs in a fixed order,
// so results are deterministic; the long ones split over workgroups (parts, then a finish pass
// that adds the parts in order).
//
// Template: {{WG}} workgroup size (a power of two).

struct Params { rows: u32, cols: u32, index: u32, pad: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> labels: array<u32>;
@group(0) @binding(4) var<storage, read_write> out_u32: array<u32>;

var<workgroup> red_f: array<f32, {{WG}}>;
var<workgroup> red_u: array<u32, {{WG}}>;

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * {{WG}}u;
}

fn row_argmax(r: u32) -> u32 {
    let base = r * p.cols;
    var best = 0u;
    var best_v = x[base];
    for (var j = 1u; j < p.cols; j += 1u) {
        let v = x[base + j];
        if v > best_v { best_v = v; best = j; }
    }
    return best;
}

// out[c] = Σ_r x[r, c]: one invocation per column, neighbours read neighbouring addresses.
@compute @workgroup_size({{WG}})
fn sum_cols(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let c = flat(gid, nwg);
    if c >= p.cols { return; }
    var s = 0.0;
    for (var r = 0u; r < p.rows; r += 1u) { s += x[r * p.cols + c]; }
    out[c] = s;
}

// Split reductions, pass 1: partial column sums of a long [rows, cols] matrix. Workgroup
// (x, s) sums columns x·64 .. x·64+63 over rows [s·index, (s+1)·index): 64 columns × WG/64
// row lanes (WG ≥ 64; 4 lanes at 256, 2 on GLES's 128), the lanes added in workgroup memory
// by halving, a fixed order; part[s, c] = its sum.
@compute @workgroup_size({{WG}})
fn sum_cols_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let c = wid.x * 64u + li % 64u;
    let lane = li / 64u;
    let begin = wid.y * p.index;
    let end = min(begin + p.index, p.rows);
    var s = 0.0;
    if c < p.cols {
        for (var r = begin + lane; r < end; r += {{WG}}u / 64u) { s += x[r * p.cols + c]; }
    }
    red_f[li] = s;
    workgroupBarrier();
    for (var w = {{WG}}u / 2u; w >= 64u; w /= 2u) {
        if li < w { red_f[li] += red_f[li + w]; }
        workgroupBarrier();
    }
    if lane == 0u && c < p.cols {
        out[wid.y * p.cols + c] = red_f[li];
    }
}

// Split reductions, pass 2: out[i] = (out[i] if pad != 0) + Σ_s x[s, i] over the `rows`
// slices, in order (the split-K GEMM's partial products, or sum_cols_part's partial sums).
@compute @workgroup_size({{WG}})
fn sum_slices(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= p.cols { return; }
    var s = 0.0;
    for (var r = 0u; r < p.rows; r += 1u) { s += x[r * p.cols + i]; }
    if p.pad != 0u { s += out[i]; }
    out[i] = s;
}

@compute @workgroup_size({{WG}})
fn sum_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = flat(gid, nwg);
    if r >= p.rows { return; }
    var s = 0.0;
    for (var j = 0u; j < p.cols; j += 1u) { s += x[r * p.cols + j]; }
    out[r] = s;
}

@compute @workgroup_size({{WG}})
fn argmax_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = flat(gid, nwg);
    if r >= p.rows { return; }
    out_u32[r] = row_argmax(r);
}

// out[index] += Σ x, dispatched as a single workgroup.
@compute @workgroup_size({{WG}})
fn accumulate_sum(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let n = p.rows * p.cols;
    var s = 0.0;
    for (var i = lid; i < n; i += {{WG}}u) { s += x[i]; }
    red_f[lid] = s;
    workgroupBarrier();
    for (var w = {{WG}}u / 2u; w > 0u; w /= 2u) {
        if lid < w { red_f[lid] += red_f[lid + w]; }
        workgroupBarrier();
    }
    if lid == 0u { out[p.index] += red_f[0]; }
}

// out_u32[index] += #rows whose argmax equals the label, dispatched as a single workgroup.
@compute @workgroup_size({{WG}})
fn count_correct(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    var hits = 0u;
    for (var r = lid; r < p.rows; r += {{WG}}u) {
        hits += select(0u, 1u, row_argmax(r) == labels[r]);
    }
    red_u[lid] = hits;
    workgroupBarrier();
    for (var w = {{WG}}u / 2u; w > 0u; w /= 2u) {
        if lid < w { red_u[lid] += red_u[lid + w]; }
        workgroupBarrier();
    }
    if lid == 0u { out_u32[p.index] += red_u[0]; }
}

// Split sums, pass 1 (`accumulate_sum` of a long array): workgroup s sums x[s·pad, (s+1)·pad)
// by halving in workgroup memory, a fixed order, into out[s]; `accumulate_finish` adds them.
@compute @workgroup_size({{WG}})
fn accumulate_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let n = p.rows * p.cols;
    let begin = wid.x * p.pad;
    let end = min(begin + p.pad, n);
    var s = 0.0;
    for (var i = begin + li; i < end; i += {{WG}}u) { s += x[i]; }
    red_f[li] = s;
    workgroupBarrier();
    for (var w = {{WG}}u / 2u; w > 0u; w /= 2u) {
        if li < w { red_f[li] += red_f[li + w]; }
        workgroupBarrier();
    }
    if li == 0u && begin < n { out[wid.x] = red_f[0]; }
}

// Split sums, pass 2: out[index] += Σ_s x[s] over the `rows` parts, in order (one invocation).
@compute @workgroup_size(1)
fn accumulate_finish() {
    var s = 0.0;
    for (var k = 0u; k < p.rows; k += 1u) { s += x[k]; }
    out[p.index] += s;
}

// Split counts, pass 1 (`count_correct` of a large batch): workgroup s counts the hits of rows
// [s·pad, (s+1)·pad) into out_u32[s]; `count_finish` adds them.
@compute @workgroup_size({{WG}})
fn count_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let begin = wid.x * p.pad;
    let end = min(begin + p.pad, p.rows);
    var hits = 0u;
    for (var r = begin + li; r < end; r += {{WG}}u) {
        hits += select(0u, 1u, row_argmax(r) == labels[r]);
    }
    red_u[li] = hits;
    workgroupBarrier();
    for (var w = {{WG}}u / 2u; w > 0u; w /= 2u) {
        if li < w { red_u[li] += red_u[li + w]; }
        workgroupBarrier();
    }
    if li == 0u && begin < p.rows { out_u32[wid.x] = red_u[0]; }
}

// Split counts, pass 2: out_u32[index] += Σ_s parts[s] over the `rows` parts (bound where the
// labels are), in order (one invocation).
@compute @workgroup_size(1)
fn count_finish() {
    var hits = 0u;
    for (var k = 0u; k < p.rows; k += 1u) { hits += labels[k]; }
    out_u32[p.index] += hits;
}

// Split row sums (a few long rows): workgroup (r, s) sums x[r, s·pad .. (s+1)·pad) by halving
// into out[s·rows + r]; with more than one slice `sum_slices` adds them in order.
@compute @workgroup_size({{WG}})
fn sum_rows_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let r = wid.x;
    let begin = wid.y * p.pad;
    let end = min(begin + p.pad, p.cols);
    var s = 0.0;
    for (var j = begin + li; j < end; j += {{WG}}u) { s += x[r * p.cols + j]; }
    red_f[li] = s;
    workgroupBarrier();
    for (var w = {{WG}}u / 2u; w > 0u; w /= 2u) {
        if li < w { red_f[li] += red_f[li + w]; }
        workgroupBarrier();
    }
    if li == 0u { out[wid.y * p.rows + r] = red_f[0]; }
}
