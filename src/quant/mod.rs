//! Post-training quantization, host side. Today: the activation-range observers that
//! calibration feeds (`observer`). The quantized model, calibration over a data set and the
//! exercise that compares FP32 with INT8 are still to come (see the INT8 issue); the kernels
//! they will call are `tensor::QuantOps`.

pub mod observer;

pub use observer::{Observer, ObserverKind};
