//! The CUDA slot. With the `cuda` feature: the real backend (backend.rs, core.rs, amp.rs, conv.rs, quant.rs, kernels.rs,
//! blas.rs) over cudarc, which loads the driver, NVRTC and cuBLAS at run time, so the build
//! needs no CUDA toolkit. Without it: an uninhabited `CudaBackend` (candle's dummy backend
//! pattern, stub.rs) so every `match` over engines is written once, and opening it says how to
//! get it. This folder is the only place `cfg(feature = "cuda")` appears.

/// Queues kernel `$k` with launch config `$cfg` and the arguments in order.
#[cfg(feature = "cuda")]
macro_rules! launch {
    ($self:ident, $k:expr, $cfg:expr, $($arg:expr),+ $(,)?) => {{
        $self.mark_start()?;
        let f = $self.kernels.function(&$self.ctx, $k)?;
        let mut b = $self.stream.launch_builder(&f);
        $( cudarc::driver::PushKernelArg::arg(&mut b, $arg); )+
        // SAFETY: the caller validated the shapes (tensor::checks), so every index the kernel
        // derives from the passed sizes lies inside the passed buffers, and the argument types
        // match the kernel's signature in shaders/cuda/*.cu.
        unsafe { b.launch($cfg) }.map(drop).map_err(|e| super::backend::driver($k.name(), e))
    }};
}

#[cfg(feature = "cuda")]
mod amp;
#[cfg(feature = "cuda")]
mod backend;
#[cfg(feature = "cuda")]
mod blas;
#[cfg(feature = "cuda")]
mod conv;
#[cfg(feature = "cuda")]
mod core;
#[cfg(feature = "cuda")]
mod kernels;
#[cfg(feature = "cuda")]
mod quant;
#[cfg(feature = "cuda")]
pub use backend::{CudaBackend, CudaTensor, open, probe};

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub use stub::{CudaBackend, CudaTensor, open, probe};

/// Whether this build has the CUDA backend (the settings panel offers it then; whether a
/// device is present is found when a run opens it, never on the UI thread).
pub const BUILT: bool = cfg!(feature = "cuda");

/// Why CUDA cannot be used by a build without the feature (the conformance test and the
/// settings panel quote it).
pub fn unavailable() -> crate::error::Error {
    if cfg!(feature = "cuda") {
        match probe() {
            Err(e) => e,
            Ok(found) => crate::error::Error::CudaUnavailable(format!("nothing is missing: {found} is usable")),
        }
    } else {
        crate::error::Error::CudaNotBuilt
    }
}
