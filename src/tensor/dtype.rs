use serde::{Deserialize, Serialize};

/// Element types. F32 is the compute type of this release; U32 carries labels, argmax results
/// and counters. F16, BF16 and I8 slot in here when mixed precision and quantization land.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    F32,
    U32,
}

impl DType {
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
        }
    }

    /// The WGSL spelling, used by the shader templater.
    pub fn wgsl(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::U32 => "u32",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::U32 => "u32",
        }
    }
}
