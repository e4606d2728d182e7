//! Generates the register-blocked GEMMs, `shaders/matmul_regblock.wgsl` (f32) and
//! `shaders/matmul16_regblock.wgsl` (f16/bf16 packed two per u32, f32 sums, matmul16's fused
//! epilogues): a fully unrolled R×C register block per invocation is too long to write by hand.
//! One generator with the operand type as its parameter (`Operand`): the block, the K loop and
//! the tail are shared; the type decides how many values one vec4 load brings, how they are
//! unpacked, and the bindings and store section. The tests below keep the committed shaders
//! equal to the generator's output; `GPULAB_REGEN_SHADERS=1 cargo test --release -p gpulab-core
//! --lib` rewrites them.

/// The operand type of a register-blocked GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// f32 (`{{DT}}`): a vec4 load brings 4 values; C = A·B (+ C).
    F32,
    /// f16 or bf16 packed two per u32 (`{{FLOAT16}}`): a vec4<u32> load brings 8 values, widened
    /// to f32; C = epilogue(A·B), stored as f32 or rounded to 16 bits.
    Packed16,
}

impl Operand {
    /// Values one vec4 load brings, and the shift from an element index to its vec4.
    fn lanes(self) -> u32 {
        match self {
            Operand::F32 => 4,
            Operand::Packed16 => 8,
        }
    }

    fn shift(self) -> u32 {
        self.lanes().trailing_zeros()
    }

    /// The type of one unpacked value in the shader.
    fn value_type(self) -> &'static str {
        match self {
            Operand::F32 => "{{DT}}",
            Operand::Packed16 => "f32",
        }
    }

    /// `{ let t = LOAD; dst(0) = …; … }`: one vec4 load unpacked into `lanes()` variables.
    fn unpack(self, s: &mut String, load: &str, dst: &dyn Fn(u32) -> String) {
        *s += &format!("                {{ let t = {load};");
        match self {
            Operand::F32 => {
                for q in 0..4 {
                    *s += &format!(" {} = t[{q}];", dst(q));
                }
            }
            Operand::Packed16 => {
                for w in 0..4 {
                    *s += &format!(" let u{w} = half_unpack2(t[{w}]); {} = u{w}.x; {} = u{w}.y;", dst(2 * w), dst(2 * w + 1));
                }
            }
        }
        *s += " }\n";
    }
}

/// The shader for `op` with R = `rr` rows × C = `cc` columns of C per invocation, 8 invocations
/// side by side.
pub fn gen_regblock(op: Operand, rr: u32, cc: u32) -> String {
    let l = op.lanes();
    assert!(rr.is_multiple_of(l) && cc.is_multiple_of(l));
    let nt = cc * 8;
    let mut s = header(op, rr, cc);
    s += "    let m1 = p.m - 1u;\n    let n1 = p.n - 1u;\n";
    s += &format!("    // Rows depend on the workgroup only (shared by all 8 lanes); each lane owns {cc} consecutive columns.\n");
    s += &format!("    let row0 = wid.y * {rr}u;\n    let col0 = wid.x * {nt}u + lid.x * {cc}u;\n");
    for r in 0..rr {
        s += &format!("    let ri{r} = min(row0 + {r}u, m1);\n");
    }
    for c in 0..cc {
        s += &format!("    let cj{c} = min(col0 + {c}u, n1);\n");
    }
    s += &format!("    // Start of each aligned group of {l} rows/columns (only used when VA / VB).\n");
    for g in 0..rr / l {
        s += &format!("    let rg{g} = min(row0 + {}u, max(p.m, {l}u) - {l}u);\n", l * g);
    }
    for g in 0..cc / l {
        s += &format!("    let cg{g} = min(col0 + {}u, max(p.n, {l}u) - {l}u);\n", l * g);
    }
    for r in 0..rr {
        s += "   ";
        for c in 0..cc {
            s += &format!(" var s{r}_{c} = 0.0;");
        }
        s += "\n";
    }
    s += &format!("    let kend = p.k & ~{}u;\n    for (var k = 0u; k < kend; k += {l}u) {{\n", l - 1);
    let ty = op.value_type();
    for kk in 0..l {
        s += "       ";
        for r in 0..rr {
            s += &format!(" var a{r}_{kk}: {ty};");
        }
        s += "\n";
    }
    for kk in 0..l {
        s += "       ";
        for c in 0..cc {
            s += &format!(" var b{kk}_{c}: {ty};");
        }
        s += "\n";
    }
    let sh = op.shift();
    s += "        if VA {\n            if TA {\n";
    for g in 0..rr / l {
        for kk in 0..l {
            op.unpack(&mut s, &format!("a[((k + {kk}u) * p.m + rg{g}) >> {sh}u]"), &|q| format!("a{}_{kk}", l * g + q));
        }
    }
    s += "            } else {\n";
    for r in 0..rr {
        op.unpack(&mut s, &format!("a[(ri{r} * p.k + k) >> {sh}u]"), &|q| format!("a{r}_{q}"));
    }
    s += "            }\n        } else {\n";
    for kk in 0..l {
        s += "           ";
        for r in 0..rr {
            s += &format!(" a{r}_{kk} = la(ri{r}, k + {kk}u);");
        }
        s += "\n";
    }
    s += "        }\n        if VB {\n            if TB {\n";
    for c in 0..cc {
        op.unpack(&mut s, &format!("b[(cj{c} * p.k + k) >> {sh}u]"), &|q| format!("b{q}_{c}"));
    }
    s += "            } else {\n";
    for g in 0..cc / l {
        for kk in 0..l {
            op.unpack(&mut s, &format!("b[((k + {kk}u) * p.n + cg{g}) >> {sh}u]"), &|q| format!("b{kk}_{}", l * g + q));
        }
    }
    s += "            }\n        } else {\n";
    for kk in 0..l {
        s += "           ";
        for c in 0..cc {
            s += &format!(" b{kk}_{c} = lb(k + {kk}u, cj{c});");
        }
        s += "\n";
    }
    s += "        }\n";
    for kk in 0..l {
        for r in 0..rr {
            s += "       ";
            for c in 0..cc {
                s += &format!(" s{r}_{c} = fma(a{r}_{kk}, b{kk}_{c}, s{r}_{c});");
            }
            s += "\n";
        }
    }
    s += &format!("    }}\n    // K % {l} tail (scalar loads).\n    for (var k = kend; k < p.k; k += 1u) {{\n");
    s += "       ";
    for r in 0..rr {
        s += &format!(" let a{r} = la(ri{r}, k);");
    }
    s += "\n       ";
    for c in 0..cc {
        s += &format!(" let b{c} = lb(k, cj{c});");
    }
    s += "\n";
    for r in 0..rr {
        s += "       ";
        for c in 0..cc {
            s += &format!(" s{r}_{c} = fma(a{r}, b{c}, s{r}_{c});");
        }
        s += "\n";
    }
    s += "    }\n";
    for c in 0..cc {
        s += &format!("    let ok{c} = col0 + {c}u < p.n;\n");
    }
    s += &stores(op, rr, cc);
    s += "}\n";
    s
}

/// Everything before the body: the description, bindings, scalar loads and the entry point.
fn header(op: Operand, rr: u32, cc: u32) -> String {
    let l = op.lanes();
    let nt = cc * 8;
    let common = format!(
        r#"// Template: {{{{TA}}}}/{{{{TB}}}} transpose flags, {{{{VA}}}}/{{{{VB}}}} vector-load flags{extra}.
// Host: VA = if TA {{ M % {l} == 0 }} else {{ K % {l} == 0 }};  VB = if TB {{ K % {l} == 0 }} else {{ N % {l} == 0 }}.
// Dispatch: ({{ceil(N / {nt}), ceil(M / {rr}), 1}}). A and B are bound as arrays of vec4, so each of their
// buffers must be at least 16 bytes and a multiple of 16 bytes (the pool rounds to 256).
// Every load index is clamped into the logical matrix; stores are guarded by row < M && col < N.

const TA: bool = {{{{TA}}}};
const TB: bool = {{{{TB}}}};
const VA: bool = {{{{VA}}}};
const VB: bool = {{{{VB}}}};
"#,
        extra = match op {
            Operand::F32 => ", {{DT}} element type (f32)",
            Operand::Packed16 => ", the FLOAT16 placeholder on the first line",
        }
    );
    let intro =
        format!("Generated by crates/core/src/device/gpu/matmul_gen.rs: R={rr} rows × C={cc} columns per invocation, workgroup (8,1,1).");
    match op {
        Operand::F32 => format!(
            r#"// C[M,N] = op(A)[M,K] · op(B)[K,N] (+ C), register-blocked for software adapters (llvmpipe).
// {intro}
// No workgroup memory, no barriers. llvmpipe runs the 8 invocations of a workgroup as one 8-lane SIMD
// vector and turns every storage load into a per-lane scalar loop, so the kernel minimises the NUMBER
// of load instructions: vec4 loads (4 floats per per-lane loop) and a big register block.
//
{common}
struct Params {{ m: u32, n: u32, k: u32, accumulate: u32 }}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<vec4<{{{{DT}}}}>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<{{{{DT}}}}>>;
@group(0) @binding(3) var<storage, read_write> c: array<{{{{DT}}}}>;

// A(i, kk) of the logical [M, K] matrix, scalar; the caller clamps i and kk.
fn la(i: u32, kk: u32) -> {{{{DT}}}} {{
    var idx: u32;
    if TA {{ idx = kk * p.m + i; }} else {{ idx = i * p.k + kk; }}
    return a[idx >> 2u][idx & 3u];
}}

fn lb(kk: u32, j: u32) -> {{{{DT}}}} {{
    var idx: u32;
    if TB {{ idx = j * p.k + kk; }} else {{ idx = kk * p.n + j; }}
    return b[idx >> 2u][idx & 3u];
}}

@compute @workgroup_size(8, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
"#
        ),
        Operand::Packed16 => format!(
            r#"{{{{FLOAT16}}}}
// C[M,N] = epilogue(op(A)[M,K] · op(B)[K,N]) for 16-bit A and B (f16 or bf16, packed two per u32),
// products summed in f32.
// {intro}
// No workgroup memory. One vec4<u32> load brings 8 consecutive 16-bit values, so the kernel issues
// half the loads per multiply-add of the f32 register-blocked kernel (what llvmpipe pays for).
// With out16 = 0 it stores f32 (weight gradients, logits); otherwise it rounds to 16 bits and stores
// whole words, so it needs N even (the host uses the plain kernel otherwise: a word would span two rows).
//
{common}
{{{{MATMUL16_COMMON}}}}
@group(0) @binding(1) var<storage, read> a: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<u32>>;

// Element idx of a packed operand, widened to f32.
fn half_at_a(idx: u32) -> f32 {{ return half_word_value(a[idx >> 3u][(idx >> 1u) & 3u], idx); }}
fn half_at_b(idx: u32) -> f32 {{ return half_word_value(b[idx >> 3u][(idx >> 1u) & 3u], idx); }}

// A(i, kk) of the logical [M, K] matrix and B(kk, j) of [K, N]; the caller clamps the indices.
fn la(i: u32, kk: u32) -> f32 {{ return half_at_a(select(i * p.k + kk, kk * p.m + i, TA)); }}
fn lb(kk: u32, j: u32) -> f32 {{ return half_at_b(select(kk * p.n + j, j * p.k + kk, TB)); }}

@compute @workgroup_size(8, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(local_invocation_index) li: u32) {{
"#
        ),
    }
}

/// The store section: f32 with the accumulate flag, or matmul16's epilogue into f32 or 16 bits.
fn stores(op: Operand, rr: u32, cc: u32) -> String {
    let mut s = String::new();
    match op {
        Operand::F32 => {
            s += "    let accum = p.accumulate != 0u;\n";
            for r in 0..rr {
                s += &format!("    if row0 + {r}u < p.m {{\n        let base = (row0 + {r}u) * p.n + col0;\n");
                for c in 0..cc {
                    s += &format!("        if ok{c} {{ var v = s{r}_{c}; if accum {{ v += c[base + {c}u]; }} c[base + {c}u] = v; }}\n");
                }
                s += "    }\n";
            }
        }
        Operand::Packed16 => {
            s += "    let count = p.count != 0u;\n    if p.out16 == 0u {\n";
            for r in 0..rr {
                s += &format!("        if row0 + {r}u < p.m {{\n            let base = (row0 + {r}u) * p.n + col0;\n");
                for c in 0..cc {
                    s += &format!("            if ok{c} {{ c_f32[base + {c}u] = epilogue(s{r}_{c}, col0 + {c}u, 1.0); }}\n");
                }
                s += "        }\n";
            }
            s += "    } else {\n        // N is even and col0 a multiple of 8, so columns (c, c+1) share one word of C.\n";
            for r in 0..rr {
                s += &format!("        if row0 + {r}u < p.m {{\n            let wbase = ((row0 + {r}u) * p.n + col0) >> 1u;\n");
                for c in (0..cc).step_by(2) {
                    s += &format!(
                        "            if ok{c} {{ var m = vec2<f32>(1.0); if p.epi == 3u {{ m = half_unpack2(act[wbase + {w}u]); }} c16[wbase + {w}u] = half_store_pair(bitcast<u32>(epilogue(s{r}_{c}, col0 + {c}u, m.x)), bitcast<u32>(epilogue(s{r}_{c1}, col0 + {c1}u, m.y)), count); }}\n",
                        w = c / 2,
                        c1 = c + 1
                    );
                }
                s += "        }\n";
            }
            s += "    }\n    if count { half_flush_counts(li); }\n";
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed shader equals the generator's output (rewritten under GPULAB_REGEN_SHADERS=1).
    fn check(op: Operand, file: &str) {
        let want = gen_regblock(op, 16, 8);
        let path = format!("{}/../../shaders/{file}", env!("CARGO_MANIFEST_DIR"));
        if std::env::var("GPULAB_REGEN_SHADERS").is_ok_and(|v| v == "1") {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(have == want, "shaders/{file} is stale; run GPULAB_REGEN_SHADERS=1 cargo test --release -p gpulab-core --lib");
    }

    #[test]
    fn committed_regblock_shader_matches_its_generator() {
        check(Operand::F32, "matmul_regblock.wgsl");
    }

    #[test]
    fn committed_regblock16_shader_matches_its_generator() {
        check(Operand::Packed16, "matmul16_regblock.wgsl");
    }
}
