//! What every backend shares: element types, shapes, the memory ledger, and the op families
//! (`ops`) that the model and training loop are written against once.

pub mod checks;
mod dtype;
mod epilogue;
pub mod float16;
mod host_data;
mod hyper;
mod info;
mod memory;
pub mod ops;
pub mod prelude;
pub mod scaler;

pub use dtype::DType;
pub use epilogue::{Dequant, Epilogue};
pub use host_data::HostData;
pub use hyper::{AdamFactors, AdamW, OptStep, ParamRefs, Sgd};
pub use info::{BackendInfo, BackendKind};
pub use memory::{Ledger, MemCategory, MemoryReport, SharedLedger, lock as memory_lock};
pub use ops::{
    AmpOps, Backend, BackendBase, CONV_KERNEL, ConvOps, ConvStageGrads, ConvStageSaved, CoreOps, DeviceCounts, DispatchRecord, ImageGeom,
    QuantGranularity, QuantOps, Telemetry, TensorMeta, matmul_i8_dequant_unfused, quantize_value, scale_for_absmax,
};

/// Tensors are 2-D row-major matrices `[rows, cols]`; a vector is `[1, n]`.
pub type Shape = [usize; 2];

pub fn numel(shape: Shape) -> usize {
    shape[0] * shape[1]
}
