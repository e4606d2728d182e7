// C[M,N] = op(A)[M,K] · op(B)[K,N] (+ C), workgroup-tiled: a 16×16 workgroup stages 64×16
// tiles of A and B in workgroup memory, and each invocation accumulates a 4×4 block of C.
// Discrete GPUs win from the shared tiles; on software adapters the barriers dominate.
//
// Split-K: workgroup row wid.y covers tile row (wid.y % m_tiles) of slice (wid.y / m_tiles),
// the K range [slice·k_len, (slice+1)·k_len). With split = 0 there is one slice (k_len ≥ K)
// and C is written (or accumulated); with split = 1 each slice writes its partial product to
// c[slice·M·N ..], and a second pass (reduce.wgsl `sum_slices`) adds the slices in order — a
// long, narrow product (a weight gradient over batch × height × width) fills the GPU.
//
// Template: {{DT}} element type, {{TA}}/{{TB}} transpose flags.

const TA: bool = {{TA}};
const TB: bool = {{TB}};
const TILE: u32 = 64u;
const TK: u32 = 16u;

struct Params { m: u32, n: u32, k: u32, accumulate: u32, k_len: u32, m_tiles: u32, split: u32, pad: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<{{DT}}>;
@group(0) @binding(2) var<storage, read> b: array<{{DT}}>;
@group(0) @binding(3) var<storage, read_write> c: array<{{DT}}>;

var<workgroup> ta: array<array<{{DT}}, 64>, 16>; // [kk][row]
var<workgroup> tb: array<array<{{DT}}, 64>, 16>; // [kk][col]

fn load_a(i: u32, kk: u32, k_end: u32) -> {{DT}} {
    if i >= p.m || kk >= k_end { return 0.0; }
    if TA { return a[kk * p.m + i]; }
    return a[i * p.k + kk];
}

fn load_b(kk: u32, j: u32, k_end: u32) -> {{DT}} {
    if kk >= k_end || j >= p.n { return 0.0; }
    if TB { return b[j * p.k + kk]; }
    return b[kk * p.n + j];
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let slice = wid.y / p.m_tiles;
    let tile_row = (wid.y % p.m_tiles) * TILE;
    let tile_col = wid.x * TILE;
    let k_begin = slice * p.k_len;
    let k_end = min(k_begin + p.k_len, p.k);
    let flat = lid.y * 16u + lid.x; // 0..256
    var acc: array<vec4<{{DT}}>, 4>;
    for (var i = 0u; i < 4u; i += 1u) { acc[i] = vec4<{{DT}}>(0.0); }

    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        // 64×16 = 1024 elements per tile, 4 per invocation.
        for (var e = 0u; e < 4u; e += 1u) {
            let idx = flat + e * 256u;
            let kk = idx / TILE;
            let rc = idx % TILE;
            ta[kk][rc] = load_a(tile_row + rc, k0 + kk, k_end);
            tb[kk][rc] = load_b(k0 + kk, tile_col + rc, k_end);
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk += 1u) {
            let bv = vec4<{{DT}}>(tb[kk][lid.x * 4u], tb[kk][lid.x * 4u + 1u], tb[kk][lid.x * 4u + 2u], tb[kk][lid.x * 4u + 3u]);
            for (var i = 0u; i < 4u; i += 1u) {
                acc[i] += ta[kk][lid.y * 4u + i] * bv;
            }
        }
        workgroupBarrier();
    }

    for (var i = 0u; i < 4u; i += 1u) {
        let row = tile_row + lid.y * 4u + i;
        if row >= p.m { break; }
        for (var j = 0u; j < 4u; j += 1u) {
            let col = tile_col + lid.x * 4u + j;
            if col >= p.n { break; }
            let idx = row * p.n + col;
            var v = acc[i][j];
            if p.split != 0u {
                c[slice * p.m * p.n + idx] = v;
                continue;
            }
            if p.accumulate != 0u { v += c[idx]; }
            c[idx] = v;
        }
    }
}
