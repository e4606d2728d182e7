use serde::{Deserialize, Serialize};

/// Element types. F32 is the compute type; U32 carries labels, argmax results and counters.
/// F16 and BF16 are the 16-bit storage formats of mixed precision (see `tensor::float16`); I8
/// slots in here when quantization lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    F32,
    U32,
    F16,
    BF16,
}

impl DType {
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// The 16-bit float formats, stored two per 32-bit word on the GPU.
    pub fn is_16bit(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// The WGSL spelling, used by the shader templater. BF16 has no WGSL type: it travels as
    /// packed `u32` words.
    pub fn wgsl(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::U32 | DType::BF16 => "u32",
            DType::F16 => "f16",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::U32 => "u32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }
}
