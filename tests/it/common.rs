//! Test fixtures: each backend of `device::registry` opened for a test (one shared engine per
//! backend that opens a device), `backend_tests!` that makes a test per backend from the
//! registry, and the rule that a backend that cannot open skips with a printed reason — except
//! under its `required_by` variable (GPULAB_REQUIRE_GPU=1 in CI), where it fails.

use std::sync::{Mutex, OnceLock};

use gpulab::device::registry::{self, BACKENDS, BackendSpec};
use gpulab::device::{CudaBackend, Engine, GpuBackend};
use gpulab::tensor::BackendKind;

pub fn require_gpu() -> bool {
    required(registry::spec(BackendKind::Gpu))
}

/// Whether CI requires `b` here (its `required_by` variable is 1): then a test that cannot open
/// it fails instead of skipping.
fn required(b: &BackendSpec) -> bool {
    b.required_by.is_some_and(|var| std::env::var(var).is_ok_and(|v| v == "1"))
}

/// One shared engine per backend that opens a device (`BackendSpec::opens_a_device`): opening a
/// wgpu device takes seconds on llvmpipe.
static SHARED: [OnceLock<Mutex<Result<Engine, String>>>; BACKENDS.len()] = [const { OnceLock::new() }; BACKENDS.len()];

/// Runs `f` on backend `id`'s default device (`registry::BACKENDS`): a fresh one for a backend
/// that opens no device, else the one shared by this test binary. Where it cannot open (no
/// adapter, no NVIDIA GPU, a build without the feature): skips with a printed reason, or panics
/// under the backend's `required_by` variable (GPULAB_REQUIRE_GPU=1, GPULAB_REQUIRE_CUDA=1).
pub fn with_backend(id: &str, test: &str, f: impl FnOnce(&mut Engine)) {
    let at = BACKENDS.iter().position(|b| b.id == id).unwrap_or_else(|| panic!("{test}: no backend {id:?} in the registry"));
    let b = &BACKENDS[at];
    let var = b.required_by.unwrap_or("(none)");
    let open = || {
        b.default_device().open(None).map_err(|e| {
            assert!(!required(b), "{var}=1 but no {} backend could be opened: {e}", b.id);
            eprintln!("no {} backend: {e}", b.id);
            e.to_string()
        })
    };
    let skip = |why: &str| {
        assert!(!required(b), "{var}=1 but there is no {} backend for {test}", b.id);
        eprintln!("SKIPPED {test}: {why} (set {var}=1 to make this a failure)");
    };
    if !b.opens_a_device {
        return match open() {
            Ok(mut e) => f(&mut e),
            Err(why) => skip(&why),
        };
    }
    let cell = SHARED[at].get_or_init(|| Mutex::new(open()));
    let mut guard = cell.lock().unwrap_or_else(|p| p.into_inner());
    match guard.as_mut() {
        Ok(e) => f(e),
        Err(why) => skip(why),
    }
}

/// Runs `f` on the shared GPU backend (`with_backend("gpu", …)`).
pub fn with_gpu(test: &str, f: impl FnOnce(&mut GpuBackend)) {
    with_backend("gpu", test, |e| f(e.as_gpu_mut().expect("the gpu backend's engine")))
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

/// Runs `f` on the shared CUDA backend (`with_backend("cuda", …)`).
pub mod cuda {
    pub fn with(test: &str, f: impl FnOnce(&mut super::CudaBackend)) {
        super::with_backend("cuda", test, |e| f(e.as_cuda_mut().expect("the cuda backend's engine")))
    }
}

/// One generic test body `fn name<B: Backend>(b: &mut B)`, one `#[test]` per backend:
/// - `backend_tests!(every: a, b)` on every backend in `device::registry::BACKENDS`;
/// - `backend_tests!(vs_cpu: a, b)` on every backend but the reference CPU (the bodies compare
///   with the CPU);
/// - `backend_tests!([cpu, gpu] a)` on the backends listed (say why the others are left out).
///
/// `reductions_match_cpu` becomes `reductions_match_cpu::gpu`, `reductions_match_cpu::cuda`, …
/// Each runs through `common::with_backend`, so a backend that cannot open skips with a printed
/// reason, or fails under its `required_by` variable (GPULAB_REQUIRE_GPU=1, …).
macro_rules! backend_tests {
    (every: $($name:ident),+ $(,)?) => {
        gpulab::for_each_backend_id!(backend_tests!(@every $($name),+));
    };
    (vs_cpu: $($name:ident),+ $(,)?) => {
        gpulab::for_each_backend_id!(backend_tests!(@vs_cpu $($name),+));
    };
    ($reference:ident [$($other:ident),*] @every $($name:ident),+) => {
        backend_tests!([$reference $(, $other)*] $($name),+);
    };
    ($reference:ident [$($other:ident),*] @vs_cpu $($name:ident),+) => {
        backend_tests!([$($other),*] $($name),+);
    };
    ([$($backend:ident),+ $(,)?]) => {};
    ([$($backend:ident),+ $(,)?] $name:ident $(, $rest:ident)* $(,)?) => {
        mod $name {
            $(
                #[test]
                fn $backend() {
                    let test = concat!(module_path!(), "::", stringify!($backend));
                    crate::common::with_backend(stringify!($backend), test, |e| gpulab::with_backend!(e, b => super::$name(b)));
                }
            )+
        }
        backend_tests!([$($backend),+] $($rest),*);
    };
}
pub(crate) use backend_tests;

/// Whether `b` runs mixed precision in `dt`. Where it does not, the refusal is checked instead of
/// skipped quietly: only fp16 may be refused, only for a missing SHADER_F16, in the one sentence
/// the lab, CLI and report give (`device::gpu::fp16_refusal`), by the op itself (a cast), while
/// bf16 runs on the same backend. `what` names the test in the printed refusal.
pub fn runs_16bit<B: gpulab::tensor::Backend>(b: &mut B, dt: gpulab::tensor::DType, what: &str) -> bool {
    use gpulab::tensor::{DType, MemCategory};
    let Some(why) = b.amp_unavailable(dt) else { return true };
    let label = b.info().label();
    assert_eq!(dt, DType::F16, "{what}: {label} refuses {}: {why}", dt.name());
    assert!(why.starts_with("fp16 needs SHADER_F16, which ") && why.ends_with(" does not offer; bf16 and fp32 run"), "{what}: {why}");
    assert_eq!(b.amp_unavailable(DType::BF16), None, "{what}: {label} refuses fp16, so bf16 must run");
    let x = b.upload_f32(&[1.0, 2.0], [1, 2], MemCategory::Other).unwrap();
    let mut low = b.zeros([1, 2], dt, MemCategory::Other).unwrap();
    let err = b.cast(&x, &mut low, None).expect_err("an fp16 cast where fp16 is refused").to_string();
    assert!(err.contains(&why), "{what}: the op's error gives the same sentence: {err}");
    eprintln!("{what}: {label} refuses fp16 by name: {why}");
    false
}

/// The sentence the default GPU adapter refuses fp16 with (it lacks SHADER_F16), or None where
/// it runs fp16 or there is no adapter. Asks the adapter only, without opening a device.
pub fn gpu_fp16_refusal() -> Option<String> {
    use gpulab::device::gpu::{GpuSelector, adapters, fp16_refusal};
    let (_, a) = adapters::select(adapters::enumerate(&adapters::instance()), &GpuSelector::Auto).ok()?;
    (!a.features().contains(wgpu::Features::SHADER_F16)).then(|| fp16_refusal(&a.get_info().name))
}
