//! The backends, in one table. Each kind's id (its spelling in settings, `--backend` and the
//! tests' names), how its devices are spelled and parsed, its label in the lab, whether this build
//! has it, and what the tests need to know to open it. The CLI's parsing and help, the lab's
//! backend checkboxes, the exercises' backend settings, `bench matmul all` and the tests'
//! `backend_tests!` take their lists from here; the per-variant code (`Device::open`, `Engine`,
//! `with_backend!`, `for_each_backend_id!`) is beside it in device/mod.rs.

use super::{Device, GpuSelector, cuda};
use crate::tensor::BackendKind;

/// One kind of backend.
pub struct BackendSpec {
    pub kind: BackendKind,
    /// The spelling of its default device in settings and `--backend`, and the tests' suffix
    /// (`…::gpu`): `kind.name()`.
    pub id: &'static str,
    /// Other accepted spellings of the id ("wgpu").
    pub aliases: &'static [&'static str],
    /// All its spellings, for help texts: "gpu, gpu:N, gpu:NAME".
    pub spellings: &'static str,
    /// The lab's checkbox for its default device.
    pub label: &'static str,
    /// What it is (the checkbox's hover, and the lab's note under a backend that needs a feature).
    pub about: &'static str,
    /// Whether this build has it.
    pub built: bool,
    /// The cargo feature that builds it, for a backend not every build has.
    pub feature: Option<&'static str>,
    /// Whether opening it sets up a device (seconds on a software adapter): the tests open one
    /// and share it; a backend that does not is opened afresh for each test.
    pub opens_a_device: bool,
    /// The environment variable under which a test that cannot open it fails instead of skipping
    /// (CI sets the ones its machines must have); None for one that always opens.
    pub required_by: Option<&'static str>,
    /// The GEMM `gpulab bench matmul` times on it (the wgpu backend names each of its variants).
    pub gemm: &'static str,
    /// Why exercise 7's timeline shows no per-kernel rows on it; empty where the backend records
    /// per-kernel times (wgpu's timestamp queries).
    pub no_kernel_times: &'static str,
    /// Its device for the text after `id:` (None: no argument), or None when that is no device.
    parse: fn(Option<&str>) -> Option<Device>,
}

/// Every backend, the reference (the CPU) first.
pub const BACKENDS: [BackendSpec; 3] = [
    BackendSpec {
        kind: BackendKind::Cpu,
        id: "cpu",
        aliases: &[],
        spellings: "cpu",
        label: "CPU",
        about: "The CPU backend (GEMM + rayon)",
        built: true,
        feature: None,
        opens_a_device: false,
        required_by: None,
        gemm: "gemm crate",
        no_kernel_times: "CPU backend: there is no GPU queue; the model's compute shows as the main thread's record spans.",
        parse: |arg| arg.is_none().then_some(Device::Cpu),
    },
    BackendSpec {
        kind: BackendKind::Gpu,
        id: "gpu",
        aliases: &["wgpu"],
        spellings: "gpu, gpu:N, gpu:NAME",
        label: "Best GPU (auto)",
        about: "The best adapter gpulab finds",
        built: true,
        feature: None,
        opens_a_device: true,
        required_by: Some("GPULAB_REQUIRE_GPU"),
        gemm: "wgpu kernels",
        no_kernel_times: "",
        parse: |arg| match arg {
            None => Some(Device::Gpu(GpuSelector::Auto)),
            Some("") => None,
            Some(a) => Some(Device::Gpu(match a.parse::<usize>() {
                Ok(i) => GpuSelector::Index(i),
                Err(_) => GpuSelector::Name(a.to_string()),
            })),
        },
    },
    BackendSpec {
        kind: BackendKind::Cuda,
        id: "cuda",
        aliases: &[],
        spellings: "cuda[:N]",
        label: "CUDA",
        about: "NVIDIA GPU through CUDA; a run that cannot open it says why",
        built: cuda::BUILT,
        feature: Some("cuda"),
        opens_a_device: true,
        required_by: Some("GPULAB_REQUIRE_CUDA"),
        gemm: "cuBLAS",
        no_kernel_times: "CUDA backend: per-kernel times are not recorded yet; the GPU's busy time comes from CUDA events around each step.",
        parse: |arg| match arg {
            None => Some(Device::Cuda(0)),
            Some(a) => a.parse().ok().map(Device::Cuda),
        },
    },
];

impl BackendSpec {
    /// Its device when named by its id alone (`cpu`, `gpu`: the best adapter, `cuda`: device 0).
    pub fn default_device(&self) -> Device {
        (self.parse)(None).expect("every backend has a default device")
    }

    /// What it is, or why this build cannot use it (without probing for a device: this is
    /// called on the UI thread).
    pub fn status(&self) -> String {
        if self.built {
            return self.about.to_string();
        }
        // A backend this build lacks refuses at once, saying how to get it.
        match self.default_device().open(None) {
            Err(e) => e.to_string(),
            Ok(_) => self.about.to_string(),
        }
    }

    /// Whether `name` (before any `:`) spells this backend.
    fn named(&self, name: &str) -> bool {
        name.eq_ignore_ascii_case(self.id) || self.aliases.iter().any(|a| name.eq_ignore_ascii_case(a))
    }
}

/// The spec of `kind`.
pub fn spec(kind: BackendKind) -> &'static BackendSpec {
    BACKENDS.iter().find(|s| s.kind == kind).expect("every BackendKind has a row in BACKENDS")
}

/// `id`, `id:ARG` or an alias as a device; None when no backend spells it so.
pub(super) fn parse(s: &str) -> Option<Device> {
    let (name, arg) = match s.split_once(':') {
        Some((k, a)) => (k, Some(a)),
        None => (s, None),
    };
    BACKENDS.iter().find(|b| b.named(name)).and_then(|b| (b.parse)(arg))
}

/// Every backend's spellings for help texts, with the feature a backend needs:
/// "cpu, gpu, gpu:N, gpu:NAME, cuda[:N] (a --features cuda build)".
pub fn spellings() -> String {
    BACKENDS
        .iter()
        .map(|b| match b.feature {
            Some(f) => format!("{} (a --features {f} build)", b.spellings),
            None => b.spellings.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The spellings as a choice: "cpu, gpu, gpu:N, gpu:NAME or cuda[:N]" (error messages).
pub(super) fn choices() -> String {
    let all: Vec<&str> = BACKENDS.iter().map(|b| b.spellings).collect();
    match all.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => all.join(""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind once, spelled by its name, its default device of its kind and spelled back the
    /// same; the reference first; `for_each_backend_id!` lists the same ids in the same order.
    #[test]
    fn the_table_is_consistent() {
        for (i, b) in BACKENDS.iter().enumerate() {
            assert_eq!(b.id, b.kind.name());
            assert!(BACKENDS.iter().filter(|o| o.kind == b.kind).count() == 1, "{} twice", b.id);
            assert_eq!(spec(b.kind).id, b.id);
            let d = b.default_device();
            assert_eq!(d.kind(), b.kind, "{}", b.id);
            assert_eq!(d.to_string().parse::<Device>().unwrap(), d, "{}", b.id);
            assert_eq!(parse(b.id), Some(d.clone()));
            assert_eq!(b.id == "cpu", i == 0, "the CPU, the reference, comes first");
            assert!(!b.status().is_empty());
        }
        macro_rules! ids {
            ($reference:ident [$($other:ident),*]) => {
                vec![stringify!($reference) $(, stringify!($other))*]
            };
        }
        let listed: Vec<&str> = crate::for_each_backend_id!(ids!());
        assert_eq!(listed, BACKENDS.iter().map(|b| b.id).collect::<Vec<_>>());
    }

    #[test]
    fn help_lists_every_spelling() {
        assert_eq!(spellings(), "cpu, gpu, gpu:N, gpu:NAME, cuda[:N] (a --features cuda build)");
        assert_eq!(choices(), "cpu, gpu, gpu:N, gpu:NAME or cuda[:N]");
    }
}
