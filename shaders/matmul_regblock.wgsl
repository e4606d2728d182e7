// C[M,N] = op(A)[M,K] · op(B)[K,N] (+ C), register-blocked: each invocation keeps a 4×4 block
// of C in registers and reads A and B straight from global memory — no workgroup memory and no
// barriers. Software adapters (llvmpipe) run barriers slowly and have big caches, so this
// variant wins there; discrete GPUs prefer the workgroup-tiled one.
//
// Template: {{DT}} element type, {{WG}} workgroup edge, {{TA}}/{{TB}} transpose flags
// (baked in as constants so the compiler drops the unused index math).

const TA: bool = {{TA}};
const TB: bool = {{TB}};

struct Params { m: u32, n: u32, k: u32, accumulate: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<{{DT}}>;
@group(0) @binding(2) var<storage, read> b: array<{{DT}}>;
@group(0) @binding(3) var<storage, read_write> c: array<{{DT}}>;

// A(i, kk) of the logical [M, K] matrix; the caller clamps i to the matrix.
fn load_a(i: u32, kk: u32) -> {{DT}} {
    if TA { return a[kk * p.m + i]; }
    return a[i * p.k + kk];
}

fn load_b(kk: u32, j: u32) -> {{DT}} {
    if TB { return b[j * p.k + kk]; }
    return b[kk * p.n + j];
}

@compute @workgroup_size({{WG}}, {{WG}}, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    // Rows are consecutive per invocation; columns are strided by the workgroup width, so
    // neighbouring invocations (the SIMD lanes of a software rasterizer) read neighbouring
    // elements of B — one vector load instead of a gather.
    let row0 = wid.y * 4u * {{WG}}u + lid.y * 4u;
    let colb = wid.x * 4u * {{WG}}u + lid.x;
    if row0 >= p.m || colb >= p.n {
        return;
    }
    // Clamp edge rows/columns instead of branching in the inner loop; their results are
    // simply not written.
    let r = vec4<u32>(row0, min(row0 + 1u, p.m - 1u), min(row0 + 2u, p.m - 1u), min(row0 + 3u, p.m - 1u));
    let cj = vec4<u32>(colb, min(colb + {{WG}}u, p.n - 1u), min(colb + 2u * {{WG}}u, p.n - 1u), min(colb + 3u * {{WG}}u, p.n - 1u));
    var acc0 = vec4<{{DT}}>(0.0);
    var acc1 = vec4<{{DT}}>(0.0);
    var acc2 = vec4<{{DT}}>(0.0);
    var acc3 = vec4<{{DT}}>(0.0);
    for (var kk = 0u; kk < p.k; kk += 1u) {
        let bv = vec4<{{DT}}>(load_b(kk, cj.x), load_b(kk, cj.y), load_b(kk, cj.z), load_b(kk, cj.w));
        acc0 += load_a(r.x, kk) * bv;
        acc1 += load_a(r.y, kk) * bv;
        acc2 += load_a(r.z, kk) * bv;
        acc3 += load_a(r.w, kk) * bv;
    }
    let accs = array<vec4<{{DT}}>, 4>(acc0, acc1, acc2, acc3);
    for (var i = 0u; i < 4u; i += 1u) {
        let row = row0 + i;
        if row >= p.m { break; }
        for (var j = 0u; j < 4u; j += 1u) {
            let col = colb + j * {{WG}}u;
            if col >= p.n { break; }
            let idx = row * p.n + col;
            var v = accs[i][j];
            if p.accumulate != 0u { v += c[idx]; }
            c[idx] = v;
        }
    }
}
