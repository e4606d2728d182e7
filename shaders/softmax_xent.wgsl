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

var<workgroup> red: array<f32, {{WG}}>;

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
    let base = row * p.cols;
    var row_max = -3.4028235e38;
    for (var j = 0u; j < p.cols; j += 1u) { row_max = max(row_max, logits[base + j]); }
    var sum = 0.0;
    for (var j = 0u; j < p.cols; j += 1u) { sum += exp(logits[base + j] - row_max); }
    let label = labels[row];
    if label < p.cols {
        loss[row] = row_max + log(sum) - logits[base + label];
    } else {
        loss[row] = bitcast<f32>(0x7fc00000u);
    }
    if p.write_grad != 0u {
        for (var j = 0u; j < p.cols; j += 1u) {
            let prob = exp(logits[base + j] - row_max) / sum;
            grad[base + j] = (prob - select(0.0, 1.0, j == label)) * p.scale;
        }
    }
}
