// Int8 GEMM: c (i32) = op(a)·op(b), with a and b i8 packed four per u32 word (element e is
// byte e % 4 of word e / 4, two's complement). Four k values of a row of op(a) and of a column
// of op(b) are gathered into one word each and multiplied-and-summed by dot4I8Packed (lowered
// to SPIR-V OpSDot where the driver has integer dot product, emulated elsewhere); sums are i32
// and wrap like the CPU's. Each invocation computes a 4×4 block of c from registers; there is
// no shared-memory tiling yet.
//
// Two entry points share that block: `main` stores the i32 sums into c; `main_dequant` finishes
// each into f32 (`finish`: · scale, + bias, ReLU, as flags say) and stores that into out, so an
// int8 layer writes no i32 tensor.
//
// Template: {{TA}}/{{TB}} transposes; {{VA}}: a is [m, k] with k % 4 == 0, so each row's four
// k values are already one word; {{VB}}: b is [k, n] with n % 4 == 0, so one word holds four
// neighbouring columns of one k, and four such words are transposed byte-wise in registers.

const TA: bool = {{TA}};
const TB: bool = {{TB}};
const VA: bool = {{VA}};
const VB: bool = {{VB}};

// flags (main_dequant): 1 = one scale per column, 2 = add bias, 4 = ReLU, 8 = multiply each
// scale by act[0] (a dynamic activation scale left on the device by quantize). zero is 0,
// passed in so that the compiler cannot see through the XOR with it (see finish).
struct Params { m: u32, n: u32, k: u32, flags: u32, zero: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<u32>;
@group(0) @binding(2) var<storage, read> b: array<u32>;
@group(0) @binding(3) var<storage, read_write> c: array<i32>;
@group(0) @binding(4) var<storage, read> scales: array<f32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read> act: array<f32>;

fn byte_of(word: u32, e: u32) -> u32 {
    return (word >> ((e & 3u) * 8u)) & 0xffu;
}

fn a_byte(i: u32, kk: u32) -> u32 {
    if kk >= p.k {
        return 0u;
    }
    let e = select(i * p.k + kk, kk * p.m + i, TA);
    return byte_of(a[e >> 2u], e);
}

fn b_byte(kk: u32, j: u32) -> u32 {
    if kk >= p.k || j >= p.n {
        return 0u;
    }
    let e = select(kk * p.n + j, j * p.k + kk, TB);
    return byte_of(b[e >> 2u], e);
}

// Row i of op(a), k = 4g..4g+4, as one packed word (zero past k).
fn a_word(i: u32, g: u32) -> u32 {
    if VA {
        return a[i * (p.k >> 2u) + g];
    }
    let k0 = 4u * g;
    return a_byte(i, k0) | (a_byte(i, k0 + 1u) << 8u) | (a_byte(i, k0 + 2u) << 16u) | (a_byte(i, k0 + 3u) << 24u);
}

// Columns j0..j0+4 of op(b), k = 4g..4g+4: one packed word per column.
fn b_words(g: u32, j0: u32) -> vec4<u32> {
    let k0 = 4u * g;
    if VB {
        // w[t] holds columns j0..j0+4 of row k0 + t; column c of the result is byte c of each.
        var w = vec4<u32>(0u);
        for (var t = 0u; t < 4u; t++) {
            if k0 + t < p.k {
                w[t] = b[((k0 + t) * p.n + j0) >> 2u];
            }
        }
        var out = vec4<u32>(0u);
        for (var col = 0u; col < 4u; col++) {
            let s = col * 8u;
            out[col] = ((w.x >> s) & 0xffu) | (((w.y >> s) & 0xffu) << 8u) | (((w.z >> s) & 0xffu) << 16u) | (((w.w >> s) & 0xffu) << 24u);
        }
        return out;
    }
    var out = vec4<u32>(0u);
    for (var col = 0u; col < 4u; col++) {
        let j = j0 + col;
        out[col] = b_byte(k0, j) | (b_byte(k0 + 1u, j) << 8u) | (b_byte(k0 + 2u, j) << 16u) | (b_byte(k0 + 3u, j) << 24u);
    }
    return out;
}

// The 4×4 block of sums of invocation gid: rows 4·gid.y.., columns 4·gid.x.. (zeros, read from
// nothing, for a block wholly outside c).
fn block(gid: vec3<u32>) -> array<vec4<i32>, 4> {
    let j0 = gid.x * 4u;
    let i0 = gid.y * 4u;
    var acc: array<vec4<i32>, 4>;
    if j0 >= p.n || i0 >= p.m {
        return acc;
    }
    // Rows past m repeat the last row (in bounds); their sums are not stored.
    let rows = vec4<u32>(i0, min(i0 + 1u, p.m - 1u), min(i0 + 2u, p.m - 1u), min(i0 + 3u, p.m - 1u));
    let groups = (p.k + 3u) / 4u;
    for (var g = 0u; g < groups; g++) {
        let bw = b_words(g, j0);
        for (var r = 0u; r < 4u; r++) {
            let aw = a_word(rows[r], g);
            acc[r] += vec4<i32>(dot4I8Packed(aw, bw.x), dot4I8Packed(aw, bw.y), dot4I8Packed(aw, bw.z), dot4I8Packed(aw, bw.w));
        }
    }
    return acc;
}

const NONE: u32 = 0xffffffffu;

// Where element e (row e / 4, column e % 4) of gid's block goes in c or out; NONE past m or n.
fn slot(gid: vec3<u32>, e: u32) -> u32 {
    let i = gid.y * 4u + e / 4u;
    let j = gid.x * 4u + e % 4u;
    return select(NONE, i * p.n + j, i < p.m && j < p.n);
}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    var acc = block(gid);
    for (var e = 0u; e < 16u; e++) {
        let at = slot(gid, e);
        if at != NONE {
            c[at] = acc[e / 4u][e % 4u];
        }
    }
}

// f32(acc) · scale (· act[0] formed first), then + bias[j], then max(·, 0): the CPU's operations in its order
// (dequantize, bias_add, relu). The product is rounded to f32 before the bias is added, as it
// is when dequantize stores it: the XOR with p.zero (0, unknown to the compiler) keeps a
// driver from contracting the multiply and the add into one fma, which rounds once.
fn finish(acc: i32, j: u32) -> f32 {
    var s = scales[select(0u, j, (p.flags & 1u) != 0u)];
    if (p.flags & 8u) != 0u {
        s = act[0] * s;
    }
    var v = bitcast<f32>(bitcast<u32>(f32(acc) * s) ^ p.zero);
    if (p.flags & 2u) != 0u {
        v = v + bias[j];
    }
    if (p.flags & 4u) != 0u {
        v = max(v, 0.0);
    }
    return v;
}

@compute @workgroup_size(8, 8)
fn main_dequant(@builtin(global_invocation_id) gid: vec3<u32>) {
    var acc = block(gid);
    for (var e = 0u; e < 16u; e++) {
        let at = slot(gid, e);
        if at != NONE {
            out[at] = finish(acc[e / 4u][e % 4u], gid.x * 4u + e % 4u);
        }
    }
}
