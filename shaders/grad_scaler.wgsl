// GradScaler's unscale, fused with its overflow check: one pass over each f32 gradient that
// multiplies it by 1/scale and raises found_inf if any value was inf or NaN (PyTorch's
// `_amp_foreach_non_finite_check_and_unscale_`).
//
// Template: {{WG}} workgroup size.

struct Params { n: u32, pad: u32, inv_scale: f32, pad2: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> grad: array<u32>;
@group(0) @binding(2) var<storage, read_write> found_inf: array<atomic<u32>>;

@compute @workgroup_size({{WG}})
fn unscale_check(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * {{WG}}u;
    if i >= p.n { return; }
    let bits = grad[i];
    if (bits & 0x7f800000u) == 0x7f800000u { atomicStore(&found_inf[0], 1u); }
    grad[i] = bitcast<u32>(bitcast<f32>(bits) * p.inv_scale);
}
