{{FLOAT16}}
// Multi-tensor optimizer steps: one dispatch updates (or unscales) up to 16 parameters, each
// with its own buffers, instead of a dispatch per parameter. Slot j's workgroups follow slot
// j−1's: slot j covers workgroups [ends[j−1], ends[j]) and its counts[j] elements (16-bit
// copies: words of two). Per element the formulas are those of the per-parameter kernels
// (optimizer.wgsl, amp_optimizer.wgsl, grad_scaler.wgsl's unscale_check), so each result is
// the same bits.
//
// Template: the FLOAT16 placeholder on the first line (the mixed-precision steps' 16-bit type;
// empty for f32), OPTIMIZER_MATH, {{WG}} workgroup size, and what device/gpu/multi_optim.rs
// generates for the kernel and slot count: MULTI_BINDINGS (each slot's buffers), MULTI_FNS
// (each slot's update of one element) and MULTI_BODY (the entry point's slot dispatch).

{{OPTIMIZER_MATH}}

struct Params {
    n: u32, lr: f32, momentum: f32, weight_decay: f32, beta1: f32, beta2: f32, eps: f32, decay: f32,
    step_size: f32, bias2_sqrt: f32, pad0: u32, pad1: u32, pad2: u32, pad3: u32, pad4: u32, pad5: u32,
    ends: array<vec4<u32>, 4>,
    counts: array<vec4<u32>, 4>,
}

@group(0) @binding(0) var<uniform> p: Params;
{{MULTI_BINDINGS}}
{{MULTI_FNS}}
@compute @workgroup_size({{WG}})
fn multi_step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let w = wid.x + wid.y * nwg.x;
{{MULTI_BODY}}
}
