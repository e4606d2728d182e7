//! The profiler: CPU spans per stage on every thread, GPU kernel times from timestamp queries,
//! a Chrome/Perfetto trace export, per-kernel figures against measured peaks, and a bottleneck
//! verdict computed from the spans.

pub use gpulab_core::spans;

pub use spans::{Span, SpanRecorder, Timeline};
pub mod kernels;
pub mod peaks;
pub mod trace;
pub mod verdict;

pub use peaks::Peaks;
pub use verdict::{Bottleneck, Diagnosis, diagnose};
pub mod session;
