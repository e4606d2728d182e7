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
// One workgroup computes a 32×32 block of C as 2×2 cooperative tiles. Each step along K it stages
// a 32×32 slice of op(A) and of op(B) in workgroup memory, zero-padded past M, N and K and read with
// the transposes applied (so any shape and either transpose works, no host-side copy), then loads
// the tiles from there with coopLoadT (row-major). After the last step the four accumulators go to
// workgroup memory (coopStoreT) and each invocation applies the epilogue to its elements.
//
// Cooperative matrices are per subgroup and naga requires workgroup-uniform control flow around
// them, so every subgroup of the workgroup computes the same four tiles (64 invocations: one
// subgroup of 64, or two of 32, ...; they store identical values). The subgroup size is not known
// when the shader is written, and the workgroup must hold whole subgroups.
//
// Template: {{TA}}/{{TB}} transpose flags; the FLOAT16 placeholder (second line) must be f16's.
// Dispatch: (ceil(N / 32), ceil(M / 32), 1).

const TA: bool = {{TA}};
const TB: bool = {{TB}};

const BM: u32 = 32u;
const BN: u32 = 32u;
const BK: u32 = 32u;
const WGS: u32 = 64u;

{{MATMUL16_COMMON}}
@group(0) @binding(1) var<storage, read> a: array<f16>;
@group(0) @binding(2) var<storage, read> b: array<f16>;

// The staged slices, row-major: sa[r * BK + kk] = A(row0 + r, k0 + kk), sb[kk * BN + j] =
// B(k0 + kk, col0 + j); sc[r * BN + j] = the block's sums.
var<workgroup> sa: array<f16, 1024>;
var<workgroup> sb: array<f16, 1024>;
var<workgroup> sc: array<f32, 1024>;

// A(i, kk) of the logical [M, K] matrix and B(kk, j) of [K, N]; zero outside them.
fn la(i: u32, kk: u32) -> f16 {
    if i >= p.m || kk >= p.k { return f16(0.0); }
    return a[select(i * p.k + kk, kk * p.m + i, TA)];
}

fn lb(kk: u32, j: u32) -> f16 {
    if kk >= p.k || j >= p.n { return f16(0.0); }
    return b[select(kk * p.n + j, j * p.k + kk, TB)];
}

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    let steps = (p.k + BK - 1u) / BK;
    for (var t = 0u; t < steps; t += 1u) {
        let k0 = t * BK;
        // 1024 elements of each slice, 16 per invocation; consecutive invocations read
        // consecutive addresses (along K for A, along M for a transposed A; likewise for B).
        for (var q = 0u; q < 16u; q += 1u) {
            let e = li + q * WGS;
            var r = e / BK;
            var ka = e % BK;
            if TA { r = e % BM; ka = e / BM; }
            sa[r * BK + ka] = la(row0 + r, k0 + ka);
            var kb = e / BN;
            var j = e % BN;
            if TB { kb = e % BK; j = e / BK; }
            sb[kb * BN + j] = lb(k0 + kb, col0 + j);
        }
        workgroupBarrier();
        for (var s = 0u; s < BK; s += 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&sa[s], BK);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&sa[16u * BK + s], BK);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&sb[s * BN], BN);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&sb[s * BN + 16u], BN);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
        workgroupBarrier();
    }
    coopStoreT(c00, &sc[0], BN);
    coopStoreT(c01, &sc[16], BN);
    coopStoreT(c10, &sc[16u * BN], BN);
    coopStoreT(c11, &sc[16u * BN + 16u], BN);
    workgroupBarrier();
    let count = p.count != 0u;
    if p.out16 == 0u {
        for (var q = 0u; q < 16u; q += 1u) {
            let e = li + q * WGS;
            let row = row0 + e / BN;
            let col = col0 + e % BN;
            if row < p.m && col < p.n { c_f32[row * p.n + col] = epilogue(sc[e], col, 1.0); }
        }
    } else {
        // N is even and col0 a multiple of 32, so columns (c, c+1), c even, share one word of C.
        for (var q = 0u; q < 8u; q += 1u) {
            let w = li + q * WGS;
            let r = w / (BN / 2u);
            let cl = 2u * (w % (BN / 2u));
            let row = row0 + r;
            let col = col0 + cl;
            if row < p.m && col < p.n {
                let wi = (row * p.n + col) >> 1u;
                var mk = vec2<f32>(1.0);
                if p.epi == 3u { mk = half_unpack2(act[wi]); }
                let v0 = epilogue(sc[r * BN + cl], col, mk.x);
                let v1 = epilogue(sc[r * BN + cl + 1u], col + 1u, mk.y);
                c16[wi] = half_store_pair(bitcast<u32>(v0), bitcast<u32>(v1), count);
            }
        }
    }
    if count { half_flush_counts(li); }
}
