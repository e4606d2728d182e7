//! gpulab: a lab that teaches how GPUs accelerate deep learning by measuring it.
//!
//! One headless core — tensors on a CPU, wgpu or CUDA backend, an MLP, a training loop, data
//! sets — driven by a thin CLI and, with the default `gui` feature, a thin desktop lab.
//! `ARCHITECTURE.md` at the repository root maps the modules, their layering and where every
//! number on screen is computed.

#[cfg(feature = "gui")]
pub mod app;
pub mod bench;
pub mod cache;
pub mod class;
pub mod checkpoint;
pub mod data;
pub mod device;
pub mod error;
pub mod exercises;
pub mod fsutil;
pub mod nn;
pub mod parallel;
pub mod platform;
pub mod profile;
pub mod quant;
pub mod report;
pub mod serve;
pub mod stats;
pub mod tensor;
pub mod train;

pub use error::{Error, Result};
