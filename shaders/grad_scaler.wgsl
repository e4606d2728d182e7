// GradScaler on the device, so a mixed-precision step reads nothing back (tensor/scaler.rs has
// the state layout and the host reference, `update_words`):
// - scale_by_loss_scale: the loss gradient times the state's scale;
// - unscale_check: one pass over each f32 gradient that multiplies it by the state's inv_scale
//   and raises its FOUND_INF word if any value was inf or NaN (PyTorch's
//   `_amp_foreach_non_finite_check_and_unscale_`);
// - scaler_update: one thread, PyTorch's `_amp_update_scale_` plus the optimizer step count and
//   the step's log entry.
//
// Template: {{WG}} workgroup size.

struct Params { n: u32, slot: u32, scaling: u32, interval: u32, growth: f32, backoff: f32, min_scale: f32, pad: u32 }

// State words (tensor::scaler::word).
const SCALE = 0u;
const INV_SCALE = 1u;
const TRACKER = 2u;
const SKIPPED = 3u;
const STEPS = 4u;
const FOUND_INF = 5u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> grad: array<u32>;
@group(0) @binding(2) var<storage, read_write> state: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> scale_log: array<u32>;

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * {{WG}}u;
}

@compute @workgroup_size({{WG}})
fn scale_by_loss_scale(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= p.n { return; }
    let scale = bitcast<f32>(atomicLoad(&state[SCALE]));
    grad[i] = bitcast<u32>(bitcast<f32>(grad[i]) * scale);
}

@compute @workgroup_size({{WG}})
fn unscale_check(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= p.n { return; }
    let bits = grad[i];
    if (bits & 0x7f800000u) == 0x7f800000u { atomicStore(&state[FOUND_INF], 1u); }
    grad[i] = bitcast<u32>(bitcast<f32>(bits) * bitcast<f32>(atomicLoad(&state[INV_SCALE])));
}

// 1/s correctly rounded, in integers: WGSL lets f32 division be 2.5 ulp off, and the host's
// `inv_scale` is the correctly rounded reciprocal. s is positive; a result that would be
// subnormal (s ≥ 2^126) falls back to the division.
fn recip(s: f32) -> f32 {
    let b = bitcast<u32>(s);
    let e = (b >> 23u) & 0xffu;
    if e == 0u || e >= 253u { return 1.0 / s; }
    let m = (b & 0x7fffffu) | 0x800000u;
    if m == 0x800000u { return bitcast<f32>((254u - e) << 23u); }
    // q = floor(2^48 / m) has 25 bits, 24 of significand and a guard bit; rem != 0 is sticky.
    var rem = 1u;
    var q = 0u;
    for (var i = 0u; i < 48u; i += 1u) {
        rem = rem << 1u;
        q = q << 1u;
        if rem >= m {
            rem -= m;
            q |= 1u;
        }
    }
    var sig = q >> 1u;
    var biased = 253u - e;
    if (q & 1u) == 1u && (rem != 0u || (sig & 1u) == 1u) { sig += 1u; }
    if sig == 0x1000000u {
        sig = 0x800000u;
        biased += 1u;
    }
    return bitcast<f32>((biased << 23u) | (sig & 0x7fffffu));
}

@compute @workgroup_size(1)
fn scaler_update() {
    let found = atomicLoad(&state[FOUND_INF]) != 0u;
    let scale_bits = atomicLoad(&state[SCALE]);
    scale_log[p.slot] = scale_bits | select(0u, 0x80000000u, found);
    if p.scaling != 0u {
        var scale = bitcast<f32>(scale_bits);
        if found {
            scale = max(scale * p.backoff, p.min_scale);
            atomicStore(&state[TRACKER], 0u);
            atomicAdd(&state[SKIPPED], 1u);
        } else {
            var tracker = atomicLoad(&state[TRACKER]) + 1u;
            if tracker >= p.interval {
                tracker = 0u;
                let grown = scale * p.growth;
                // PyTorch keeps the old scale when growing would overflow f32.
                if (bitcast<u32>(grown) & 0x7f800000u) != 0x7f800000u { scale = grown; }
            }
            atomicStore(&state[TRACKER], tracker);
        }
        atomicStore(&state[SCALE], bitcast<u32>(scale));
        atomicStore(&state[INV_SCALE], bitcast<u32>(recip(scale)));
    }
    if !found { atomicAdd(&state[STEPS], 1u); }
    atomicStore(&state[FOUND_INF], 0u);
}
