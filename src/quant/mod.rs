//! Post-training quantization: the activation-range observers that calibration feeds
//! (`observer`), and a quantized MLP forward pass with calibrated static scales (`model`),
//! over the kernels of `tensor::QuantOps`. The exercise that compares FP32 with INT8 is still
//! to come (see the INT8 issue).

pub mod model;
pub mod observer;

pub use model::{HostLayer, QuantMlp, calibrate};
pub use observer::{Observer, ObserverKind};
