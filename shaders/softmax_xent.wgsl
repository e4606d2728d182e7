// Fused softmax + cross-entropy, forward and backward, one workgroup per row: the row's max and
// sum of exponentials are reduced in workgroup memory, then each invocation writes its share of
// the gradient (softmax − onehot) · scale. Doing both in one pass saves two round trips through
// memory compared with separate softmax, loss and gradient kernels.
//
// Template: {{WG}} workgroup size (a power of two).

struct Params { rows: u32, cols: u32, scale: f32, write_grad: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> labels: array<u32>;
@group(0) @binding(3) var<storage, read_write> loss: array<f32>;
@group(0) @binding(4) var<storage, read_write> grad: array<f32>;

// The loss step's running totals (`totals`): loss_sum[0] += Σ loss, correct[0] += #hits.
@group(0) @binding(5) var<storage, read_write> loss_sum: array<f32>;
@group(0) @binding(6) var<storage, read_write> correct: array<u32>;

var<workgroup> red: array<f32, {{WG}}>;
var<workgroup> red_u: array<u32, {{WG}}>;

fn reduce_max(lid: u32) -> f32 {
    workgroupBarrier();
    for (var s = {{WG}}u / 2u; s > 0u; s /= 2u) {
        if lid < s { red[lid] = max(red[lid], red[lid + s]); }
        workgroupBarrier();
    }
    let v = red[0];
    workgroupBarrier();
    return v;
}

fn reduce_sum(lid: u32) -> f32 {
    workgroupBarrier();
    for (var s = {{WG}}u / 2u; s > 0u; s /= 2u) {
        if lid < s { red[lid] = red[lid] + red[lid + s]; }
        workgroupBarrier();
    }
    let v = red[0];
    workgroupBarrier();
    return v;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let row = wid.x + wid.y * nwg.x;
    // The whole workgroup leaves together, so the barriers below stay uniform.
    if row >= p.rows { return; }
    let lid = lid3.x;
    let base = row * p.cols;

    var m = -3.4028235e38;
    for (var j = lid; j < p.cols; j += {{WG}}u) { m = max(m, logits[base + j]); }
    red[lid] = m;
    let row_max = reduce_max(lid);

    var s = 0.0;
    for (var j = lid; j < p.cols; j += {{WG}}u) { s += exp(logits[base + j] - row_max); }
    red[lid] = s;
    let sum = reduce_sum(lid);

    let label = labels[row];
    if lid == 0u {
        if label < p.cols {
            loss[row] = row_max + log(sum) - logits[base + label];
        } else {
            loss[row] = bitcast<f32>(0x7fc00000u); // NaN: the label is out of range
        }
    }
    if p.write_grad != 0u {
        for (var j = lid; j < p.cols; j += {{WG}}u) {
            let prob = exp(logits[base + j] - row_max) / sum;
            grad[base + j] = (prob - select(0.0, 1.0, j == label)) * p.scale;
        }
    }
}

// The same for narrow rows (e.g. 10 classes): one invocation per row, no workgroup memory and
// no barriers, which cost far more than the arithmetic on software adapters.
@compute @workgroup_size({{WG}})
fn rowwise(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = gid.x + gid.y * nwg.x * {{WG}}u;
    if row >= p.rows { return; }
    row_loss(row);
}

// `rowwise` for a batch of at most WG rows, with the running totals in the same dispatch (one
// instead of three): each invocation's row loss and hit, then both summed in workgroup memory
// in reduce.wgsl's order (`accumulate_sum`, `count_correct`), so the sums are the same bits.
@compute @workgroup_size({{WG}})
fn totals(@builtin(local_invocation_index) li: u32) {
    var l = 0.0;
    var hit = 0u;
    if li < p.rows {
        l = row_loss(li);
        // The first maximum wins, as in reduce.wgsl's row_argmax.
        let base = li * p.cols;
        var best = 0u;
        var best_v = logits[base];
        for (var j = 1u; j < p.cols; j += 1u) {
            let v = logits[base + j];
            if v > best_v { best_v = v; best = j; }
        }
        hit = select(0u, 1u, best == labels[li]);
    }
    red[li] = l;
    red_u[li] = hit;
    workgroupBarrier();
    for (var w = {{WG}}u / 2u; w > 0u; w /= 2u) {
        if li < w {
            red[li] += red[li + w];
            red_u[li] += red_u[li + w];
        }
        workgroupBarrier();
    }
    if li == 0u {
        loss_sum[0] += red[0];
        correct[0] += red_u[0];
    }
}

// One row's loss into loss[row] (NaN for a label out of range), and its gradient when asked;
// returns the loss.
fn row_loss(row: u32) -> f32 {
    let base = row * p.cols;
    var row_max = -3.4028235e38;
    for (var j = 0u; j < p.cols; j += 1u) { row_max = max(row_max, logits[base + j]); }
    var sum = 0.0;
    for (var j = 0u; j < p.cols; j += 1u) { sum += exp(logits[base + j] - row_max); }
    let label = labels[row];
    var l = bitcast<f32>(0x7fc00000u);
    if label < p.cols {
        l = row_max + log(sum) - logits[base + label];
    }
    loss[row] = l;
    if p.write_grad != 0u {
        for (var j = 0u; j < p.cols; j += 1u) {
            let prob = exp(logits[base + j] - row_max) / sum;
            grad[base + j] = (prob - select(0.0, 1.0, j == label)) * p.scale;
        }
    }
    return l;
}
