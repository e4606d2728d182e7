use serde::{Deserialize, Serialize};

/// Element types. F32 is the compute type; U32 carries labels, argmax results and counters.
/// F16 and BF16 are the 16-bit storage formats of mixed precision (see `tensor::float16`); I8
/// holds quantized values and I32 the exact accumulators of an int8 GEMM (`ops::QuantOps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    F32,
    U32,
    F16,
    BF16,
    I8,
    I32,
}

impl DType {
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::U32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I8 => 1,
        }
    }

    /// Elements per 32-bit word of GPU storage (narrow types are packed into u32 words).
    pub fn per_word(self) -> usize {
        4 / self.size_bytes()
    }

    /// The 16-bit float formats, stored two per 32-bit word on the GPU.
    pub fn is_16bit(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// The int8 quantization types: no f32 ops; host transfers through `QuantOps`
    /// (read_i8 / write_i8 / read_i32).
    pub fn is_quant(self) -> bool {
        matches!(self, DType::I8 | DType::I32)
    }

    /// The WGSL spelling, used by the shader templater. BF16 and I8 have no WGSL type: they
    /// travel as packed `u32` words.
    pub fn wgsl(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::U32 | DType::BF16 | DType::I8 => "u32",
            DType::F16 => "f16",
            DType::I32 => "i32",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::U32 => "u32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::I32 => "i32",
        }
    }
}
