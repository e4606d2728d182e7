//! gpulab-core: what every layer above builds on. The error type, statistics, bounded reads and
//! durable writes (`fsutil`), one way to print a number (`format`), the disk cache, the span recorder, the stop flag (`stop`), text made safe for a terminal
//! or a spreadsheet, the op timer; tensors and their op families (`tensor`); the backends that
//! run them (`device`: CPU, wgpu, CUDA behind the `cuda` feature). It knows nothing of models,
//! training or exercises.

pub mod cache;
pub mod device;
pub mod error;
pub mod format;
pub mod fsutil;
pub mod spans;
pub mod stats;
pub mod stop;
pub mod tensor;
pub mod text;
pub mod timing;

pub use error::{Error, Result};
