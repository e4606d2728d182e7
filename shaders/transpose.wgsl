// out[cols, rows] = in[rows, cols]ᵀ, one invocation per element. The host uses it to
// spare the register-blocked matmul a transposed A: on llvmpipe reading A transposed costs far
// more than this pass.
//
// Template: {{WG}} workgroup size.

struct Params { rows: u32, cols: u32, pad0: u32, pad1: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * {{WG}}u;
    if i >= p.rows * p.cols { return; }
    // i walks the output row-major, so writes are contiguous.
    let r = i % p.rows;
    let c = i / p.rows;
    dst[i] = src[r * p.cols + c];
}
