//! The library's one error type. Every variant names the problem and, where there is one,
//! what the user can do about it; the binary adds context with `anyhow` at the edge.

mod checkpoint;
mod data;

pub use checkpoint::CheckpointError;
pub use data::DataError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid setting: {0}")]
    InvalidConfig(String),

    #[error(transparent)]
    Data(#[from] DataError),

    #[error(
        "no GPU adapter found ({0}); install a Vulkan driver (on Debian: apt-get install libvulkan1 mesa-vulkan-drivers) or use --backend cpu"
    )]
    NoAdapter(String),

    #[error("{0}")]
    AdapterNotFound(String),

    #[error("built without CUDA support; rebuild with --features cuda")]
    CudaNotBuilt,

    /// Built with CUDA, but no usable driver or device (or the feature is not finished yet).
    #[error("the CUDA backend is unavailable: {0}")]
    CudaUnavailable(String),

    #[error(
        "out of device memory: {category} needs {needed} more bytes but only {available} of the {budget}-byte budget are free; \
         reduce the batch size, use mixed precision, or accumulate gradients over smaller batches"
    )]
    OutOfMemory { category: String, needed: u64, available: u64, budget: u64 },

    #[error(
        "the GPU ran out of memory allocating {bytes} bytes for {category} ({detail}); reduce the batch size, \
         use mixed precision, or accumulate gradients over smaller batches"
    )]
    DeviceOutOfMemory { category: String, bytes: u64, detail: String },

    #[error("could not open the lab window ({0}); without a display, use the command line: gpulab list, gpulab run ID")]
    Window(String),

    #[error("GPU error: {0}")]
    Gpu(String),

    #[error("GPU device lost: {0}; restart the run (and check the driver) or use --backend cpu")]
    DeviceLost(String),

    /// A kernel's pipeline would break one of the device's limits (device/gpu/limits.rs).
    #[error("kernel {file} (entry {entry}) needs {limit} = {need}, this device allows {have}: the kernel cannot run on this adapter")]
    BeyondLimit { file: &'static str, entry: &'static str, limit: &'static str, need: u32, have: u32 },

    /// A bounded wait on the GPU (device/gpu/wait.rs) ran out: the driver stalled or lost the device.
    #[error(
        "the GPU did not finish {what} within {limit:?}: the driver stalled or lost the device; restart the run (and check the driver) or use --backend cpu"
    )]
    GpuStalled { what: String, limit: std::time::Duration },

    #[error("shape mismatch in {op}: {detail}")]
    Shape { op: &'static str, detail: String },

    #[error("wrong element type in {op}: {detail}")]
    DType { op: &'static str, detail: String },

    #[error("{op} is not supported by {backend}: {why}")]
    UnsupportedOp { op: &'static str, backend: String, why: String },

    #[error("could not write the report: {0}")]
    Report(String),

    #[error("could not take the screenshot: {0}")]
    Screenshot(String),

    /// Something gpulab itself got wrong; the message is for a bug report.
    #[error("internal error (a bug in gpulab, please report it): {0}")]
    Internal(String),

    #[error("I/O error on {path}: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },

    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),

    #[error("the training process failed: {0}")]
    TrainingProcess(String),

    /// A replica or pipeline stage stopped because a peer it exchanges data with failed: a
    /// consequence, so whoever gathers the errors reports another one as the cause.
    #[error("the training process failed: {0}")]
    PeerLost(String),

    #[error("training diverged at step {step}: the loss became {loss}; lower the learning rate")]
    Diverged { step: u64, loss: f32 },

    #[error("{0}")]
    Unsupported(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Fails with a shape error unless `cond` holds.
pub fn ensure_shape(cond: bool, op: &'static str, detail: impl FnOnce() -> String) -> Result<()> {
    if cond { Ok(()) } else { Err(Error::Shape { op, detail: detail() }) }
}

/// Fails with an element-type error unless `cond` holds.
pub fn ensure_dtype(cond: bool, op: &'static str, detail: impl FnOnce() -> String) -> Result<()> {
    if cond { Ok(()) } else { Err(Error::DType { op, detail: detail() }) }
}
