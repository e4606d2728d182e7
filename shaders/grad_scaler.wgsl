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

// 1/s correctly rounded (to nearest even), as bits, in integers only: WGSL lets f32 division be
// 2.5 ulp off, and lets a driver flush a subnormal result to zero (SwiftShader does for
// s ≥ 2^126), while the host's `inv_scale` is the correctly rounded reciprocal. s is positive.
fn recip_bits(s: f32) -> u32 {
    let b = bitcast<u32>(s);
    var e = i32((b >> 23u) & 0xffu);
    var m = b & 0x7fffffu;
    if e == 255 { return 0u; } // 1/inf (a NaN scale never reaches here: growth keeps it finite)
    if e == 0 {
        if m == 0u { return 0x7f800000u; }
        // A subnormal s, normalized: m·2^(1-150) = (m << k)·2^(1-k-150).
        e = 1;
        while (m & 0x800000u) == 0u {
            m = m << 1u;
            e -= 1;
        }
    } else {
        m |= 0x800000u;
    }
    // 1/s = (2^48 / m)·2^(102-e); q = floor(2^48 / m) has 25 or 26 bits, rem != 0 is sticky.
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
    // A normal result keeps 24 bits of q (drop 1) under exponent 253 - e; a subnormal one
    // (e ≥ 253) keeps q·2^(251-e) units of 2^-149. Adding the kept bits to the exponent field
    // lets a rounding carry move into the exponent, as IEEE bit patterns allow.
    if 252 - e >= 255 { return 0x7f800000u; }
    let d = u32(max(1, e - 251));
    let exp_field = u32(max(0, 252 - e)) << 23u;
    let kept = q >> d;
    let dropped = q & ((1u << d) - 1u);
    let half = 1u << (d - 1u);
    let up = dropped > half || (dropped == half && (rem != 0u || (kept & 1u) == 1u));
    return min(exp_field + kept + select(0u, 1u, up), 0x7f800000u);
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
        atomicStore(&state[INV_SCALE], recip_bits(scale));
    }
    if !found { atomicAdd(&state[STEPS], 1u); }
    atomicStore(&state[FOUND_INF], 0u);
}
