//! Which GEMM each engine runs for f32 and for a 16-bit type, in words, and whether the 16-bit
//! one has fast 16-bit arithmetic (tensor cores through cuBLAS or a cooperative-matrix kernel,
//! or the CPU's native bf16 instructions) rather than 16-bit storage multiplied in f32. Matched
//! per engine here, below the exercises, so that adding a backend adds its arm here.

use super::{Bf16Path, Engine};
use crate::device::gpu::tuning::{Matmul16Variant, ShapeClass};
use crate::tensor::{BackendBase, DType};

#[derive(Clone, Debug, PartialEq)]
pub struct GemmPath {
    /// The 16-bit GEMM (the f32 one when `dtype16` is None), in words.
    pub kernel: String,
    /// The f32 GEMM, in words.
    pub f32_kernel: String,
    pub fast16: bool,
}

impl Engine {
    /// The GEMMs a run in `dtype16` (None: f32) uses on this engine.
    pub fn gemm_path(&mut self, dtype16: Option<DType>) -> GemmPath {
        let (kernel, f32_kernel, fast16) = match self {
            Engine::Cpu(cpu) => {
                let f32k = "the CPU's f32 GEMM (the gemm crate)".to_string();
                match dtype16 {
                    Some(DType::BF16) => {
                        (format!("the CPU's bf16 GEMM: {}", cpu.bf16_path().name()), f32k, cpu.bf16_path() != Bf16Path::Widen)
                    }
                    Some(_) => (format!("the CPU's f16 GEMM: {}", super::cpu::f16_path_name()), f32k, false),
                    None => (f32k.clone(), f32k, false),
                }
            }
            Engine::Gpu(g) => {
                let f32k = format!("the {} f32 matmul (chosen for this adapter)", g.matmul_choice().describe(|v| v.name().to_string()));
                match dtype16 {
                    None => (f32k.clone(), f32k, false),
                    Some(dt) => match g.matmul16_choice(dt) {
                        Ok(c) => {
                            let of: Vec<&str> = g.matmul16_variants(dt).iter().map(|x| x.name()).collect();
                            (
                                format!(
                                    "the {} 16-bit matmul (the fastest of {} on this adapter)",
                                    c.describe(|v| v.label().to_string()),
                                    of.join(", ")
                                ),
                                f32k,
                                c.class(ShapeClass::LARGEST) == Matmul16Variant::Coop && !g.info().software,
                            )
                        }
                        Err(e) => (format!("no 16-bit matmul ({e})"), f32k, false),
                    },
                }
            }
            Engine::Cuda(_) => {
                let f32k = "cuBLAS's f32 GEMM".to_string();
                match dtype16 {
                    None => (f32k.clone(), f32k, false),
                    Some(_) => ("cuBLAS's 16-bit GEMM (tensor cores where the GPU has them)".into(), f32k, true),
                }
            }
        };
        GemmPath { kernel, f32_kernel, fast16 }
    }
}
