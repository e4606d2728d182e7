//! gpulab: a lab that teaches how GPUs accelerate deep learning by measuring it.
//!
//! The workspace's crates follow the layers in `ARCHITECTURE.md`: `gpulab-core` (tensors,
//! backends) ← `gpulab-systems` (model, training and the systems around it) ←
//! `gpulab-exercises` (the labs) ← `gpulab-class` ← `gpulab-app` (the GUI face). This
//! package is the CLI face (`src/main.rs`, `src/cli/`); its library only gathers the layers'
//! modules under one name for the CLI, the integration tests and the benchmarks.

pub use gpulab_core::{
    Error, Result, cache, device, error, for_each_backend_id, format, fsutil, spans, stats, stop, tensor, text, timing, with_backend,
};
pub use gpulab_systems::{bench, checkpoint, data, nn, parallel, platform, profile, quant, report, serve, train};

pub use gpulab_class as class;
pub use gpulab_exercises as exercises;

#[cfg(feature = "gui")]
pub use gpulab_app as app;
