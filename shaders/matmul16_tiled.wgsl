{{FLOAT16}}
// C[M,N] = epilogue(op(A)[M,K] · op(B)[K,N]) for 16-bit A and B (f16 or bf16, packed two per u32),
// workgroup-tiled for GPUs: a 16×16 workgroup (256 invocations) stages 64×16 tiles of A and B in
// workgroup memory, widened to f32 once, and each invocation accumulates a 4×4 block of C in
// registers (f32 sums). The 16-bit counterpart of matmul_tiled.wgsl, with the bindings and
// parameters of matmul16_regblock.wgsl: out16 = 0 stores f32, otherwise it rounds to 16 bits and
// stores whole words, so it needs N even (the host runs the plain kernel otherwise).
//
// Split-K, as matmul_tiled.wgsl: workgroup row wid.y covers tile row (wid.y % m_tiles) of slice
// (wid.y / m_tiles), the K range [slice·k_len, (slice+1)·k_len); slice s stores its f32 partial
// product at c_f32[s·M·N ..] (the host splits only an f32 C with no epilogue — a weight
// gradient over batch × height × width — and adds the slices with reduce.wgsl `sum_slices`).
// Unsplit: k_len ≥ K, one slice.
//
// Template: {{TA}}/{{TB}} transpose flags, the FLOAT16 placeholder on the first line.
// Dispatch: ({ceil(N / 64), ceil(M / 64) · slices, 1}).

const TA: bool = {{TA}};
const TB: bool = {{TB}};
const TILE: u32 = 64u;
const TK: u32 = 16u;

{{MATMUL16_COMMON}}
@group(0) @binding(1) var<storage, read> a: array<u32>;
@group(0) @binding(2) var<storage, read> b: array<u32>;

var<workgroup> ta: array<array<f32, 64>, 16>; // [kk][row]
var<workgroup> tb: array<array<f32, 64>, 16>; // [kk][col]

fn load_a(i: u32, kk: u32, k_end: u32) -> f32 {
    if i >= p.m || kk >= k_end { return 0.0; }
    let idx = select(i * p.k + kk, kk * p.m + i, TA);
    return half_word_value(a[idx >> 1u], idx);
}

fn load_b(kk: u32, j: u32, k_end: u32) -> f32 {
    if kk >= k_end || j >= p.n { return 0.0; }
    let idx = select(kk * p.n + j, j * p.k + kk, TB);
    return half_word_value(b[idx >> 1u], idx);
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let slice = wid.y / p.m_tiles;
    let tile_row = (wid.y % p.m_tiles) * TILE;
    let tile_col = wid.x * TILE;
    let k_begin = slice * p.k_len;
    let k_end = min(k_begin + p.k_len, p.k);
    let c_base = slice * p.m * p.n;
    var acc: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i += 1u) { acc[i] = vec4<f32>(0.0); }

    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        // 64×16 = 1024 elements per tile, 4 per invocation.
        for (var e = 0u; e < 4u; e += 1u) {
            let idx = li + e * 256u;
            let kk = idx / TILE;
            let rc = idx % TILE;
            ta[kk][rc] = load_a(tile_row + rc, k0 + kk, k_end);
            tb[kk][rc] = load_b(k0 + kk, tile_col + rc, k_end);
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk += 1u) {
            let bv = vec4<f32>(tb[kk][lid.x * 4u], tb[kk][lid.x * 4u + 1u], tb[kk][lid.x * 4u + 2u], tb[kk][lid.x * 4u + 3u]);
            for (var i = 0u; i < 4u; i += 1u) {
                acc[i] += ta[kk][lid.y * 4u + i] * bv;
            }
        }
        workgroupBarrier();
    }

    let count = p.count != 0u;
    let col0 = tile_col + lid.x * 4u;
    for (var i = 0u; i < 4u; i += 1u) {
        let row = tile_row + lid.y * 4u + i;
        if row >= p.m { break; }
        if p.out16 == 0u {
            for (var j = 0u; j < 4u; j += 1u) {
                let col = col0 + j;
                if col < p.n { c_f32[c_base + row * p.n + col] = epilogue(acc[i][j], col, 1.0); }
            }
        } else {
            // N is even and col even, so (col, col + 1) is one whole word of the row.
            for (var h = 0u; h < 2u; h += 1u) {
                let col = col0 + 2u * h;
                if col < p.n {
                    let w = (row * p.n + col) >> 1u;
                    var m = vec2<f32>(1.0);
                    if p.epi == 3u { m = half_unpack2(act[w]); }
                    let v0 = epilogue(acc[i][2u * h], col, m.x);
                    let v1 = epilogue(acc[i][2u * h + 1u], col + 1u, m.y);
                    c16[w] = half_store_pair(bitcast<u32>(v0), bitcast<u32>(v1), count);
                }
            }
        }
    }
    if count { half_flush_counts(li); }
}
