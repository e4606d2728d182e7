//! Post-training quantization: the activation-range observers that calibration feeds
//! (`observer`), the quantized model with static or dynamic scales and its int8 layers of the one
//! dense forward pass (`model`, over `nn::dense`, which also runs the f32/f16 models it is
//! compared with), the error measures (`metrics`) and the safetensors file (`export`, `load`).
//! Exercise 9 (`exercises/quantization`) is the lab over it.

pub mod export;
pub mod metrics;
pub mod model;
pub mod observer;

pub use crate::nn::HostLayer;
pub use export::load;
pub use model::{ActScales, QuantizedLayer, QuantizedModel, calibrate, granularity_name, quantize_model};
pub use observer::{Observer, ObserverKind};
