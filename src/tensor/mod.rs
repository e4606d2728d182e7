//! What every backend shares: element types, shapes, the memory ledger, and the op set
//! (`Backend`) that the model and training loop are written against once.

mod backend;
pub mod checks;
mod dtype;
mod epilogue;
pub mod float16;
mod host_data;
mod memory;

pub use backend::{AdamFactors, AdamW, Backend, BackendInfo, Sgd, TensorMeta};
pub use epilogue::Epilogue;
pub use host_data::HostData;
pub use dtype::DType;
pub use memory::{Ledger, MemCategory, MemoryReport, SharedLedger, lock as memory_lock};

/// Tensors are 2-D row-major matrices `[rows, cols]`; a vector is `[1, n]`.
pub type Shape = [usize; 2];

pub fn numel(shape: Shape) -> usize {
    shape[0] * shape[1]
}
