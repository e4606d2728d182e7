//! What a batched read-back (`Backend::read_many`) returns: one host copy per tensor, in the
//! tensor's host type. 16-bit tensors come back widened to f32, as `read_f32` returns them.

use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    F32(Vec<f32>),
    U32(Vec<u32>),
}

impl HostData {
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::U32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values of an f32 (or widened 16-bit) tensor; an error for a u32 tensor.
    pub fn f32(&self) -> Result<&[f32]> {
        match self {
            HostData::F32(v) => Ok(v),
            HostData::U32(_) => Err(Error::DType { op: "read_many", detail: "expected f32 data, got u32".into() }),
        }
    }

    /// The values of a u32 tensor; an error for a float tensor.
    pub fn u32(&self) -> Result<&[u32]> {
        match self {
            HostData::U32(v) => Ok(v),
            HostData::F32(_) => Err(Error::DType { op: "read_many", detail: "expected u32 data, got f32".into() }),
        }
    }
}
