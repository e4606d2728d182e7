use super::BackendBase;
use crate::error::Result;
use crate::tensor::MemoryReport;

/// What a backend measures about itself, apart from the math.
pub trait Telemetry: BackendBase {
    /// GPU busy time measured by timestamp queries since the last call, in seconds;
    /// `None` where the backend cannot measure it.
    fn take_busy_seconds(&mut self) -> Result<Option<f64>>;
    fn memory(&self) -> MemoryReport;
    /// Forgets peak memory figures, e.g. between the runs of a sweep.
    fn reset_memory_peaks(&mut self);
}
