//! Where the math runs, chosen at run time: the CPU, a wgpu adapter, or (with the `cuda`
//! feature) an NVIDIA GPU through CUDA. No `cfg` leaks above this module: without the feature,
//! `Device::Cuda` exists and opening it says how to get it.

pub mod cpu;
pub mod cuda;
pub mod gpu;
pub mod linux_gpu;
pub mod telemetry;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use cpu::{Bf16Path, CpuBackend};
pub use cuda::CudaBackend;
pub use gpu::{GpuBackend, GpuSelector};

use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Device {
    Cpu,
    Gpu(GpuSelector),
    Cuda(usize),
}

impl FromStr for Device {
    type Err = Error;

    /// `cpu`, `gpu`, `gpu:N` (adapter index from `gpulab info`), `gpu:NAME` (part of the
    /// adapter's name), `cuda`, `cuda:N`.
    fn from_str(s: &str) -> Result<Self> {
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        match (kind.to_ascii_lowercase().as_str(), arg) {
            ("cpu", None) => Ok(Device::Cpu),
            ("gpu" | "wgpu", None) => Ok(Device::Gpu(GpuSelector::Auto)),
            ("gpu" | "wgpu", Some("")) => Err(bad(s)),
            ("gpu" | "wgpu", Some(a)) => Ok(Device::Gpu(match a.parse::<usize>() {
                Ok(i) => GpuSelector::Index(i),
                Err(_) => GpuSelector::Name(a.to_string()),
            })),
            ("cuda", None) => Ok(Device::Cuda(0)),
            ("cuda", Some(a)) => a.parse().map(Device::Cuda).map_err(|_| bad(s)),
            _ => Err(bad(s)),
        }
    }
}

fn bad(s: &str) -> Error {
    Error::InvalidConfig(format!("unknown backend {s:?}; use cpu, gpu, gpu:N, gpu:NAME or cuda[:N]"))
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Gpu(GpuSelector::Auto) => write!(f, "gpu"),
            Device::Gpu(GpuSelector::Index(i)) => write!(f, "gpu:{i}"),
            Device::Gpu(GpuSelector::Name(n)) => write!(f, "gpu:{n}"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// An opened backend. Generic code runs on it through [`with_backend!`](crate::with_backend).
pub enum Engine {
    Cpu(CpuBackend),
    Gpu(Box<GpuBackend>),
    /// An NVIDIA GPU through CUDA; without the `cuda` feature `CudaBackend` is uninhabited and
    /// the variant exists so every `match` over engines is written once.
    Cuda(CudaBackend),
}

impl Device {
    /// Opens the backend; `budget` caps the memory ledger (bytes) to emulate a smaller device.
    pub fn open(&self, budget: Option<u64>) -> Result<Engine> {
        match self {
            Device::Cpu => Ok(Engine::Cpu(CpuBackend::with_budget(budget))),
            Device::Gpu(sel) => Ok(Engine::Gpu(Box::new(GpuBackend::open(sel, budget)?))),
            Device::Cuda(ordinal) => cuda::open(*ordinal, budget).map(Engine::Cuda),
        }
    }
}

/// Runs a generic expression on whichever backend an [`Engine`] holds:
/// `with_backend!(engine, b => train(b, &cfg))`.
#[macro_export]
macro_rules! with_backend {
    ($engine:expr, $b:ident => $body:expr) => {
        match $engine {
            $crate::device::Engine::Cpu($b) => $body,
            $crate::device::Engine::Gpu($b) => {
                let $b = &mut **$b;
                $body
            }
            $crate::device::Engine::Cuda($b) => $body,
        }
    };
}
