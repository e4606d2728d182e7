//! CPU tensors: a typed `Vec` per dtype, and bytes returned to the ledger on drop.

use crate::tensor::{DType, MemCategory, Shape, SharedLedger, TensorMeta, memory_lock};

#[derive(Debug)]
pub(crate) enum Storage {
    F32(Vec<f32>),
    U32(Vec<u32>),
    /// F16 or BF16 bit patterns.
    Bits16(Vec<u16>, DType),
    I8(Vec<i8>),
    I32(Vec<i32>),
}

impl Storage {
    /// `n` zeros of `dtype`.
    pub(crate) fn zeros(dtype: DType, n: usize) -> Storage {
        match dtype {
            DType::F32 => Storage::F32(vec![0.0; n]),
            DType::U32 => Storage::U32(vec![0; n]),
            DType::F16 | DType::BF16 => Storage::Bits16(vec![0; n], dtype),
            DType::I8 => Storage::I8(vec![0; n]),
            DType::I32 => Storage::I32(vec![0; n]),
        }
    }
}

/// A CPU tensor; dropping it releases its bytes in the ledger.
#[derive(Debug)]
pub struct CpuTensor {
    pub(crate) data: Storage,
    pub(crate) shape: Shape,
    pub(crate) cat: MemCategory,
    pub(crate) ledger: SharedLedger,
    /// An I8 tensor's form packed for the int8 GEMM when it was a b operand; `i8_mut` drops it.
    pub(crate) packed: super::gemm_i8::PackCache,
}

impl CpuTensor {
    fn bytes(&self) -> u64 {
        (self.numel() * self.dtype().size_bytes()) as u64
    }
    pub(crate) fn f32(&self) -> &[f32] {
        match &self.data {
            Storage::F32(v) => v,
            _ => &[],
        }
    }
    pub(crate) fn f32_mut(&mut self) -> &mut [f32] {
        match &mut self.data {
            Storage::F32(v) => v,
            _ => &mut [],
        }
    }
    /// The values of an I8 tensor, to change them: forgets the packed form first.
    pub(crate) fn i8_mut(&mut self) -> Option<&mut Vec<i8>> {
        *self.packed.get_mut().unwrap_or_else(|p| p.into_inner()) = None;
        match &mut self.data {
            Storage::I8(v) => Some(v),
            _ => None,
        }
    }
    pub(crate) fn u32(&self) -> &[u32] {
        match &self.data {
            Storage::U32(v) => v,
            _ => &[],
        }
    }
    pub(crate) fn u32_mut(&mut self) -> &mut [u32] {
        match &mut self.data {
            Storage::U32(v) => v,
            _ => &mut [],
        }
    }
}

impl TensorMeta for CpuTensor {
    fn shape(&self) -> Shape {
        self.shape
    }
    fn dtype(&self) -> DType {
        match self.data {
            Storage::F32(_) => DType::F32,
            Storage::U32(_) => DType::U32,
            Storage::Bits16(_, dt) => dt,
            Storage::I8(_) => DType::I8,
            Storage::I32(_) => DType::I32,
        }
    }
}

impl Drop for CpuTensor {
    fn drop(&mut self) {
        memory_lock(&self.ledger).release(self.cat, self.bytes());
    }
}
