// The part every 16-bit GEMM shares (matmul16_regblock, matmul16_tiled, matmul16_coop): the
// parameters, the bindings other than A and B (1 and 2, whose element types differ), and the
// epilogue, so amp.rs dispatches them alike. Included where a kernel names MATMUL16_COMMON.

// epi: 0 none, 1 + bias, 2 + bias then ReLU, 3 ReLU mask from `act`; count: underflow stats;
// out16: C is 16-bit (c16) rather than f32 (c_f32); k_len, m_tiles: the tiled kernel's split-K
// (the others ignore them).
struct Params { m: u32, n: u32, k: u32, epi: u32, count: u32, out16: u32, k_len: u32, m_tiles: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(3) var<storage, read_write> c16: array<u32>;
@group(0) @binding(4) var<storage, read_write> c_f32: array<f32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read> act: array<u32>;
@group(0) @binding(7) var<storage, read_write> stats: array<atomic<u32>>;

fn epilogue(v: f32, col: u32, mask: f32) -> f32 {
    var x = v;
    if p.epi == 1u || p.epi == 2u { x += bias[col]; }
    if p.epi == 2u { x = max(x, 0.0); }
    if p.epi == 3u { x = select(0.0, x, mask > 0.0); }
    return x;
}
