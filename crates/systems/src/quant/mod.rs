//! Post-training quantization: the activation-range observers that calibration feeds
//! (`observer`), the quantized model and its int8 forward pass with static or dynamic scales
//! (`model`), the f32/f16 forward pass it is compared with (`float`), the error measures
//! (`metrics`) and the safetensors file (`export`, `load`). Exercise 9
//! (`exercises/quantization`) is the lab over it.

pub mod export;
pub mod float;
pub mod metrics;
pub mod model;
pub mod observer;

pub use export::load;
pub use float::FloatMlp;
pub use model::{ActScales, HostLayer, QuantMlp, QuantizedLayer, QuantizedModel, calibrate, granularity_name, quantize_model};
pub use observer::{Observer, ObserverKind};
