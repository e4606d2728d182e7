//! The CUDA backend arrives in a later issue. Until then `Device::Cuda` exists on every build
//! and opening it explains what is missing, instead of a `cfg` error somewhere above.

use crate::error::{Error, Result};

/// An uninhabited placeholder for the CUDA backend.
pub enum Never {}

pub fn open(_ordinal: usize) -> Result<Never> {
    Err(unavailable())
}

/// Why CUDA cannot be used in this build on this machine (the settings panel and `gpulab info`
/// show it beside the CUDA entry).
pub fn unavailable() -> Error {
    if cfg!(feature = "cuda") {
        Error::CudaUnavailable("the CUDA backend is not implemented yet in this version of gpulab; use --backend gpu (wgpu/Vulkan) meanwhile".into())
    } else {
        Error::CudaNotBuilt
    }
}
