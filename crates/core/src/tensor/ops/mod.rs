//! The op set, split by family (burn's FloatTensorOps/QTensorOps split): a backend implements
//! `BackendBase` plus one trait per family, and generic code asks for all of them at once with
//! `B: Backend`. Everything is static dispatch; a family a backend cannot run refuses by name
//! through its default methods.

mod amp;
mod conv;
mod core;
mod quant;
mod telemetry;

pub use amp::AmpOps;
pub use conv::{CONV_KERNEL, ConvOps, ConvStageGrads, ConvStageSaved, ImageGeom};
pub use core::CoreOps;
pub use quant::{QuantGranularity, QuantOps, matmul_i8_dequant_unfused, quantize_value, scale_for_absmax};
pub use telemetry::{DeviceCounts, DispatchRecord, Telemetry};

use super::{BackendInfo, DType, Shape};
use crate::error::Error;

/// What a tensor of any backend can tell about itself.
pub trait TensorMeta {
    fn shape(&self) -> Shape;
    fn dtype(&self) -> DType;
    fn numel(&self) -> usize {
        self.shape()[0] * self.shape()[1]
    }
}

/// What every op family shares: the tensor type and the backend's description.
pub trait BackendBase {
    type Tensor: TensorMeta;

    fn info(&self) -> BackendInfo;
}

/// Every op family together: the model and training loop are written once against it; the CPU
/// backend is the reference every GPU kernel is tested against.
///
/// Outputs are passed as `&mut` and must not alias inputs. GPU backends only *record* ops;
/// `flush` submits what was recorded and `read_*` waits for it.
pub trait Backend: CoreOps + AmpOps + QuantOps + ConvOps + Telemetry {}

impl<B: CoreOps + AmpOps + QuantOps + ConvOps + Telemetry> Backend for B {}

/// The refusal of an op this backend does not implement (the families' default methods).
pub fn unsupported<B: BackendBase + ?Sized>(b: &B, op: &'static str, why: &str) -> Error {
    Error::UnsupportedOp { op, backend: format!("the {} backend", b.info().kind), why: why.to_string() }
}
