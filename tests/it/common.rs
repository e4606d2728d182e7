//! Test fixtures: one GPU backend shared by the GPU tests of this binary, and the rule that a
//! missing adapter skips with a printed reason — except under GPULAB_REQUIRE_GPU=1 (CI), where
//! it fails.

use std::sync::{Mutex, OnceLock};

use gpulab::device::{GpuBackend, GpuSelector};

static GPU: OnceLock<Mutex<Option<GpuBackend>>> = OnceLock::new();

pub fn require_gpu() -> bool {
    std::env::var("GPULAB_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// Runs `f` on the shared GPU backend. Without an adapter: skips with a printed reason, or
/// panics when GPULAB_REQUIRE_GPU=1.
pub fn with_gpu(test: &str, f: impl FnOnce(&mut GpuBackend)) {
    let cell = GPU.get_or_init(|| {
        Mutex::new(match GpuBackend::open(&GpuSelector::Auto, None) {
            Ok(g) => Some(g),
            Err(e) => {
                assert!(!require_gpu(), "GPULAB_REQUIRE_GPU=1 but no GPU backend could be opened: {e}");
                eprintln!("no GPU backend: {e}");
                None
            }
        })
    });
    let mut guard = cell.lock().unwrap_or_else(|p| p.into_inner());
    match guard.as_mut() {
        Some(g) => f(g),
        None => {
            assert!(!require_gpu(), "GPULAB_REQUIRE_GPU=1 but there is no GPU for {test}");
            eprintln!("SKIPPED {test}: no GPU adapter (set GPULAB_REQUIRE_GPU=1 to make this a failure)");
        }
    }
}

/// Uniform random values in [lo, hi) from a seeded generator.
pub fn random(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// Asserts |got − want| ≤ tol·(|want| + 1) element-wise, and the same NaN pattern.
#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{what}[{i}]: got {g}, want NaN");
            continue;
        }
        let err = (g - w).abs() / (w.abs() + 1.0);
        assert!(err <= tol, "{what}[{i}]: got {g}, want {w} (rel err {err:.2e} > {tol:.0e})");
    }
}

pub fn require_cuda() -> bool {
    std::env::var("GPULAB_REQUIRE_CUDA").is_ok_and(|v| v == "1")
}

/// Per-backend fixtures for [`backend_tests!`]: `common::<backend>::with(test, f)`.
pub mod cpu {
    pub fn with(_test: &str, f: impl FnOnce(&mut gpulab::device::CpuBackend)) {
        f(&mut gpulab::device::CpuBackend::new())
    }
}

pub mod gpu {
    pub use super::with_gpu as with;
}

pub mod cuda {
    use std::sync::{Mutex, OnceLock};

    use gpulab::device::CudaBackend;

    use super::require_cuda;

    static CUDA: OnceLock<Mutex<Option<CudaBackend>>> = OnceLock::new();

    /// Runs `f` on a shared CUDA backend (device 0). Without one (no NVIDIA GPU, or a build
    /// without `--features cuda`): skips with the printed reason, or panics when
    /// GPULAB_REQUIRE_CUDA=1.
    pub fn with(test: &str, f: impl FnOnce(&mut CudaBackend)) {
        let cell = CUDA.get_or_init(|| {
            Mutex::new(match gpulab::device::cuda::open(0, None) {
                Ok(c) => Some(c),
                Err(e) => {
                    assert!(!require_cuda(), "GPULAB_REQUIRE_CUDA=1 but no CUDA backend could be opened: {e}");
                    eprintln!("no CUDA backend: {e}");
                    None
                }
            })
        });
        let mut guard = cell.lock().unwrap_or_else(|p| p.into_inner());
        match guard.as_mut() {
            Some(c) => f(c),
            None => {
                assert!(!require_cuda(), "GPULAB_REQUIRE_CUDA=1 but there is no CUDA device for {test}");
                let why = gpulab::device::cuda::unavailable();
                eprintln!("SKIPPED {test}: {why} (set GPULAB_REQUIRE_CUDA=1 to make this a failure)");
            }
        }
    }
}

/// One generic test body `fn name<B: Backend>(b: &mut B)`, one `#[test]` per listed backend:
/// `backend_tests!([gpu, cuda] reductions_match_cpu, optimizer_updates_match_cpu);` makes
/// `reductions_match_cpu::gpu`, `reductions_match_cpu::cuda`, … Each runs through
/// `common::<backend>::with`, so a missing GPU or CUDA device skips with a printed reason, or
/// fails under GPULAB_REQUIRE_GPU=1 / GPULAB_REQUIRE_CUDA=1.
macro_rules! backend_tests {
    ([$($backend:ident),+ $(,)?]) => {};
    ([$($backend:ident),+ $(,)?] $name:ident $(, $rest:ident)* $(,)?) => {
        mod $name {
            $(
                #[test]
                fn $backend() {
                    crate::common::$backend::with(concat!(module_path!(), "::", stringify!($backend)), |b| super::$name(b));
                }
            )+
        }
        backend_tests!([$($backend),+] $($rest),*);
    };
}
pub(crate) use backend_tests;
