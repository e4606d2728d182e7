//! gpulab-systems: what the labs are built from, over `gpulab-core`. The model (`nn`) and its
//! int8 form (`quant`), data sets and loaders (`data`), the training loop (`train`), and the
//! systems around it: profiler, checkpoints, benchmarks, data parallelism, the inference
//! server, exercise 10's simulator (`platform`) and the report model with its writers.

pub mod bench;
pub mod checkpoint;
pub mod data;
pub mod nn;
pub mod parallel;
pub mod platform;
pub mod profile;
pub mod quant;
pub mod report;
pub mod serve;
pub mod train;
