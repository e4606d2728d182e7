//! Every wait on the GPU, bounded: a driver that stalls or a device that is lost becomes a named
//! error (`Error::GpuStalled`) after a limit, never a silent hang of the run or the lab.

use std::cell::Cell;
use std::time::Duration;

use crate::error::{Error, Result};

/// Far beyond the slowest single wait gpulab makes on a software driver (llvmpipe on a loaded
/// CI machine: seconds for a log window's steps), far below "forever".
pub const LIMIT: Duration = Duration::from_secs(120);

thread_local! {
    /// A shorter limit for this thread only (`with_limit`), so a test can provoke the timeout
    /// without changing the limit of other tests running beside it.
    static OVERRIDE: Cell<Option<Duration>> = const { Cell::new(None) };
}

/// The limit the calling thread's waits use.
pub fn limit() -> Duration {
    OVERRIDE.get().unwrap_or(LIMIT)
}

/// Runs `f` with this thread's GPU waits bounded by `limit` instead of `LIMIT`.
#[doc(hidden)]
pub fn with_limit<R>(limit: Duration, f: impl FnOnce() -> R) -> R {
    let before = OVERRIDE.replace(Some(limit));
    let out = f();
    OVERRIDE.set(before);
    out
}

/// Waits for everything submitted to `device`, at most `limit()`; `what` names the work waited
/// for in the error.
pub(super) fn wait(device: &wgpu::Device, what: &str) -> Result<()> {
    let limit = limit();
    device.poll(wgpu::PollType::Wait { submission_index: None, timeout: Some(limit) }).map(|_| ()).map_err(|e| error(e, what, limit))
}

fn error(e: wgpu::PollError, what: &str, limit: Duration) -> Error {
    match e {
        wgpu::PollError::Timeout => Error::GpuStalled { what: what.to_string(), limit },
        other => super::recorder::poll_error(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_a_named_stall_with_the_limit_and_what_to_do() {
        let e = error(wgpu::PollError::Timeout, "reading back a tensor", Duration::from_secs(120)).to_string();
        assert!(e.contains("did not finish reading back a tensor within 120s") && e.contains("--backend cpu"), "{e}");
        assert_eq!(with_limit(Duration::from_millis(3), limit), Duration::from_millis(3));
        assert_eq!(limit(), LIMIT, "the override ends with its closure");
    }

    /// On a real adapter: a wait shorter than the work submitted is the named stall, not a hang
    /// and not a success, and the device still finishes the work afterwards. Without an adapter
    /// this skips, except under GPULAB_REQUIRE_GPU=1, where it fails.
    #[test]
    fn a_wait_shorter_than_the_work_is_a_named_stall() {
        use crate::tensor::MemCategory;
        use crate::tensor::prelude::*;
        let require = std::env::var("GPULAB_REQUIRE_GPU").is_ok_and(|v| v == "1");
        let instance = super::super::adapters::instance();
        let opened = super::super::adapters::select(super::super::adapters::enumerate(&instance), &super::super::GpuSelector::Auto)
            .and_then(|(i, a)| super::super::GpuBackend::from_adapter(i, &a, None));
        let mut gpu = match opened {
            Ok(g) => g,
            Err(e) => {
                assert!(!require, "GPULAB_REQUIRE_GPU=1 but no GPU backend could be opened: {e}");
                eprintln!("SKIPPED a_wait_shorter_than_the_work_is_a_named_stall: no GPU adapter ({e})");
                return;
            }
        };
        let n = 512;
        let a = gpu.upload_f32(&vec![1.0; n * n], [n, n], MemCategory::Inputs).unwrap();
        let mut c = gpu.zeros([n, n], crate::tensor::DType::F32, MemCategory::Activations).unwrap();
        gpu.sync().unwrap();
        for _ in 0..8 {
            gpu.matmul(&a, &a, &mut c, false, false, true).unwrap();
        }
        // No device finishes eight 512³ GEMMs in no time at all.
        let e = with_limit(Duration::ZERO, || gpu.sync()).unwrap_err();
        assert!(matches!(e, Error::GpuStalled { .. }), "{e}");
        assert!(e.to_string().contains("did not finish the submitted work"), "{e}");
        let got = gpu.read_f32(&c).unwrap();
        assert!(got.iter().all(|&v| v == 8.0 * n as f32), "the work still completes: {}", got[0]);
    }
}
