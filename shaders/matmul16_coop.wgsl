enable wgpu_cooperative_matrix;
{{FLOAT16}}
// C[M,N] = epilogue(op(A)[M,K] · op(B)[K,N]) for f16 A and B on cooperative matrices (tensor cores
// on NVIDIA, WMMA on AMD RDNA3+, XMX on Intel Arc, simdgroup matrices on Apple): 16×16×16 products
// of f16 with f32 sums (`coopMultiplyAdd`), the configuration the host checks the adapter lists
// (AB = f16, CR = f32, M = N = K = 16). f16 only: WGSL's cooperative matrices have no bf16.
//
// Same bind group layout and parameters as matmul16_regblock.wgsl, so amp.rs dispatches it the same
// way: with out16 = 0 it stores f32 (c_f32), otherwise it rounds to 16 bits and stores whole words
// (c16), so it needs N even (the host uses the plain kernel otherwise: a word would span two rows).
// Every epilogue (bias, bias + ReLU, ReLU mask) and the underflow counts are applied on the store.
//
// Work split. A cooperative matrix belongs to one subgroup, so each subgroup owns its own tiles:
// one workgroup of 64 invocations computes a BM×BN = 128×32 block of C in passes; in a pass each of
// its S subgroups computes one 16-row strip of the block (two 16×16 tiles: columns 0–15 and 16–31),
// so a pass covers 16·S rows and the block takes 8 / S passes. Nothing is computed or stored twice.
// S (num_subgroups) is known only when the shader runs: the subgroup size may be anything from the
// adapter's minimum to its maximum (Vulkan lets it vary per dispatch), so the host offers this kernel
// only where every size from 8 to 64 divides the 64 invocations into 1, 2, 4 or 8 whole subgroups.
//
// Uniformity. Cooperative operations need control flow uniform across the workgroup in naga's
// analysis, which treats subgroup builtins as per-invocation. So no branch or loop bound depends on
// the subgroup: S reaches the loops through workgroupUniformLoad (it is one value per workgroup),
// and the subgroup's index only selects addresses (its strip of the staged A and of the epilogue's
// tile buffer), which is uniform across that subgroup as cooperative loads and stores require.
//
// Each step along K the whole workgroup stages the pass's 16·S×16 slice of op(A) and the 16×32 slice
// of op(B) in workgroup memory, zero-padded past M, N and K and read with the transposes applied
// (any shape, either transpose, no host-side copy); each subgroup loads its A tile and the two B
// tiles from there (coopLoadT, row-major). For the epilogue each subgroup stores one tile at a time
// to its own 16×16 slot of `sc`, and all 64 invocations apply the epilogue to the S slots.
//
// Template: {{TA}}/{{TB}} transpose flags; the FLOAT16 placeholder (second line) must be f16's.
// Dispatch: (ceil(N / 32), ceil(M / 128), 1).

const TA: bool = {{TA}};
const TB: bool = {{TB}};

const BM: u32 = 128u;
const BN: u32 = 32u;
const BK: u32 = 16u;
const WGS: u32 = 64u;

{{MATMUL16_COMMON}}
@group(0) @binding(1) var<storage, read> a: array<f16>;
@group(0) @binding(2) var<storage, read> b: array<f16>;

// The staged slices, row-major: sa[r * BK + kk] = A(base + r, k0 + kk) for the pass's 16·S rows
// (S ≤ 8), sb[kk * BN + j] = B(k0 + kk, col0 + j); sc[s * 256 + r * 16 + c]: subgroup s's tile.
var<workgroup> sa: array<f16, 2048>;
var<workgroup> sb: array<f16, 512>;
var<workgroup> sc: array<f32, 2048>;
var<workgroup> nsg: u32;

// A(i, kk) of the logical [M, K] matrix and B(kk, j) of [K, N]; zero outside them.
fn la(i: u32, kk: u32) -> f16 {
    if i >= p.m || kk >= p.k { return f16(0.0); }
    return a[select(i * p.k + kk, kk * p.m + i, TA)];
}

fn lb(kk: u32, j: u32) -> f16 {
    if kk >= p.k || j >= p.n { return f16(0.0); }
    return b[select(kk * p.n + j, j * p.k + kk, TB)];
}

// Applies the epilogue to the S tiles in `sc` (tile column `tj` of the pass starting at row
// `base`) and stores them: f32, or pairs of columns rounded into one 16-bit word.
fn store_tiles(base: u32, col0: u32, tj: u32, s: u32, li: u32, count: bool) {
    if p.out16 == 0u {
        for (var q = 0u; q < 4u * s; q += 1u) {
            let e = li + q * WGS;
            let row = base + e / 16u;
            let col = col0 + 16u * tj + e % 16u;
            if row < p.m && col < p.n { c_f32[row * p.n + col] = epilogue(sc[e], col, 1.0); }
        }
    } else {
        // N is even and every tile starts at an even column, so columns (c, c+1), c even, share
        // one word of C. 128 words per tile.
        for (var q = 0u; q < 2u * s; q += 1u) {
            let w = li + q * WGS;
            let e = 2u * w;
            let row = base + e / 16u;
            let col = col0 + 16u * tj + e % 16u;
            if row < p.m && col < p.n {
                let wi = (row * p.n + col) >> 1u;
                var mk = vec2<f32>(1.0);
                if p.epi == 3u { mk = half_unpack2(act[wi]); }
                let v0 = epilogue(sc[e], col, mk.x);
                let v1 = epilogue(sc[e + 1u], col + 1u, mk.y);
                c16[wi] = half_store_pair(bitcast<u32>(v0), bitcast<u32>(v1), count);
            }
        }
    }
}

@compute @workgroup_size(64, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) ns: u32,
) {
    if li == 0u { nsg = ns; }
    let s = workgroupUniformLoad(&nsg);
    let rows = 16u * s;
    let passes = BM / rows;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let steps = (p.k + BK - 1u) / BK;
    let count = p.count != 0u;
    // This subgroup's strip of the staged A and its slot in sc.
    let mine = sg * 16u;
    for (var ps = 0u; ps < passes; ps += 1u) {
        let base = row0 + ps * rows;
        if base >= p.m { break; }
        var c0 = coop_mat16x16<f32, C>();
        var c1 = coop_mat16x16<f32, C>();
        for (var t = 0u; t < steps; t += 1u) {
            let k0 = t * BK;
            // 16·S·16 elements of A (4·S per invocation) and 512 of B (8 per invocation);
            // consecutive invocations read consecutive addresses (along K for A, along M for a
            // transposed A; likewise for B).
            for (var q = 0u; q < 4u * s; q += 1u) {
                let e = li + q * WGS;
                var r = e / BK;
                var ka = e % BK;
                if TA { r = e % rows; ka = e / rows; }
                sa[r * BK + ka] = la(base + r, k0 + ka);
            }
            for (var q = 0u; q < 8u; q += 1u) {
                let e = li + q * WGS;
                var kb = e / BN;
                var j = e % BN;
                if TB { kb = e % BK; j = e / BK; }
                sb[kb * BN + j] = lb(k0 + kb, col0 + j);
            }
            workgroupBarrier();
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&sa[mine * BK], BK);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&sb[0], BN);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&sb[16], BN);
            c0 = coopMultiplyAdd(a0, b0, c0);
            c1 = coopMultiplyAdd(a0, b1, c1);
            workgroupBarrier();
        }
        coopStoreT(c0, &sc[mine * 16u], 16u);
        workgroupBarrier();
        store_tiles(base, col0, 0u, s, li, count);
        workgroupBarrier();
        coopStoreT(c1, &sc[mine * 16u], 16u);
        workgroupBarrier();
        store_tiles(base, col0, 1u, s, li, count);
        workgroupBarrier();
    }
    if count { half_flush_counts(li); }
}
