// The convolution ops of the small CNN (nn/cnn.rs): a 3×3 convolution (stride 1, zero padding 1)
// is im2col + the GEMM; col2im is its adjoint (the input gradient); a 2×2 max-pool (stride 2)
// keeps each winner's index for its backward. One invocation per output element, no atomics:
// col2im and the pool's backward gather instead of scattering.
//
// Layouts for geometry p (batch N, height H, width W, channels C):
//   CHW images [N, C·H·W]: (n, c, y, x) at ((n·C + c)·H + y)·W + x  (the data sets, pooled maps)
//   HWC rows [N·H·W, C]:   (n, y, x, c) at ((n·H + y)·W + x)·C + c  (what the GEMM writes)
//   cols [N·H·W, 9·C]:     row (n, y, x), column c·9 + ky·3 + kx
// The CPU backend (device/cpu/conv.rs) computes each element by the same formula.
//
// Template: {{WG}} workgroup size, the IM2COL_TAP placeholder (im2col_tap.wgsl: the im2col index).

// n: invocations (output elements); the geometry is the op's input images (for the pool: its
// HWC input, before pooling).
struct Params { n: u32, batch: u32, height: u32, width: u32, channels: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@group(0) @binding(3) var<storage, read_write> winners_out: array<u32>;
@group(0) @binding(4) var<storage, read> winners: array<u32>;

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * {{WG}}u;
}

{{IM2COL_TAP}}

// dst = cols [N·H·W, 9·C] from src = CHW images.
@compute @workgroup_size({{WG}})
fn im2col(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = index(gid, nwg);
    if e >= p.n {
        return;
    }
    let s = tap_source(e);
    var v = 0.0;
    if s != NO_TAP {
        v = src[s];
    }
    dst[e] = v;
}

// dst = CHW images: each pixel's sum over the column entries im2col copied from it, in the
// order ky, kx.
@compute @workgroup_size({{WG}})
fn col2im(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = index(gid, nwg);
    if e >= p.n {
        return;
    }
    let px = e % p.width;
    var t = e / p.width;
    let py = t % p.height;
    t = t / p.height;
    let c = t % p.channels;
    let n = t / p.channels;
    let k9 = 9u * p.channels;
    var s = 0.0;
    for (var ky = 0u; ky < 3u; ky++) {
        let oy = py + 1u - ky;
        if oy >= p.height {
            continue;
        }
        for (var kx = 0u; kx < 3u; kx++) {
            let ox = px + 1u - kx;
            if ox < p.width {
                s += src[((n * p.height + oy) * p.width + ox) * k9 + c * 9u + ky * 3u + kx];
            }
        }
    }
    dst[e] = s;
}

// dst = pooled CHW images, winners_out = each winner's index into src (HWC rows of p).
@compute @workgroup_size({{WG}})
fn max_pool(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = index(gid, nwg);
    if e >= p.n {
        return;
    }
    let ho = p.height / 2u;
    let wo = p.width / 2u;
    let ox = e % wo;
    var t = e / wo;
    let oy = t % ho;
    t = t / ho;
    let c = t % p.channels;
    let n = t / p.channels;
    let y0 = n * p.height + 2u * oy;
    var best_i = (y0 * p.width + 2u * ox) * p.channels + c;
    var best = src[best_i];
    for (var k = 1u; k < 4u; k++) {
        let i = ((y0 + k / 2u) * p.width + 2u * ox + k % 2u) * p.channels + c;
        let v = src[i];
        if v > best {
            best = v;
            best_i = i;
        }
    }
    dst[e] = best;
    winners_out[e] = best_i;
}

// dst = HWC gradient of the pool's input: the output gradient (src) at each winner, else 0.
@compute @workgroup_size({{WG}})
fn max_pool_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = index(gid, nwg);
    if e >= p.n {
        return;
    }
    let c = e % p.channels;
    var t = e / p.channels;
    let px = t % p.width;
    t = t / p.width;
    let py = t % p.height;
    let n = t / p.height;
    let ho = p.height / 2u;
    let wo = p.width / 2u;
    var g = 0.0;
    if py / 2u < ho && px / 2u < wo {
        let o = ((n * p.channels + c) * ho + py / 2u) * wo + px / 2u;
        if winners[o] == e {
            g = src[o];
        }
    }
    dst[e] = g;
}
