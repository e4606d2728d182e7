//! gpulab: a lab that teaches how GPUs accelerate deep learning by measuring it.
//!
//! One headless core — tensors on a CPU, wgpu or CUDA backend, an MLP, a training loop, data
//! sets — driven by a thin CLI and a thin GUI (the lab window).

pub mod app;
pub mod bench;
pub mod cache;
pub mod checkpoint;
pub mod data;
pub mod device;
pub mod error;
pub mod exercises;
pub mod fsutil;
pub mod nn;
pub mod profile;
pub mod report;
pub mod stats;
pub mod tensor;
pub mod train;

pub use error::{Error, Result};
