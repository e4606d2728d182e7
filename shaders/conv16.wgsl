{{FLOAT16}}
// im2col into 16-bit columns, for the mixed-precision CNN (train/amp_step.rs): the convolution's
// GEMM then takes 16-bit operands, and the f32 columns are never stored. The same formula as
// conv.wgsl's im2col (whose comment gives the layouts), with each tap rounded to the 16-bit type.
//
// Template: the FLOAT16 placeholder on the first line (the 16-bit type's helpers), {{WG}}
// workgroup size, the IM2COL_TAP placeholder (im2col_tap.wgsl: the im2col index).

// n: elements of the columns; the geometry is the input images'.
struct Params { n: u32, batch: u32, height: u32, width: u32, channels: u32 }

@group(0) @binding(0) var<uniform> p: Params;
// f32 values moved as raw bits, so the rounding sees exactly what the CPU's does.
@group(0) @binding(1) var<storage, read> src_bits: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst_words: array<u32>;
// Named by float16_common's underflow helpers; im2col counts nothing, so it is never bound.
@group(0) @binding(3) var<storage, read_write> stats: array<atomic<u32>>;

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * {{WG}}u;
}

{{IM2COL_TAP}}

// The f32 bits of column element e (0 outside the image).
fn tap(e: u32) -> u32 {
    let s = tap_source(e);
    if s == NO_TAP {
        return 0u;
    }
    return src_bits[s];
}

// One invocation per stored word: column elements 2w and 2w + 1 (which may be in two rows).
@compute @workgroup_size({{WG}})
fn im2col16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = index(gid, nwg);
    let i = 2u * w;
    if i >= p.n {
        return;
    }
    var x1 = 0u;
    if i + 1u < p.n { x1 = tap(i + 1u); }
    dst_words[w] = half_store_pair(tap(i), x1, false);
}
