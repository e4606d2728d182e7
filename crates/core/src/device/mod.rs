//! Where the math runs, chosen at run time: the CPU, a wgpu adapter, or (with the `cuda`
//! feature) an NVIDIA GPU through CUDA. No `cfg` leaks above this module: without the feature,
//! `Device::Cuda` exists and opening it says how to get it.
//!
//! The backends are listed once, in `registry::BACKENDS`; this file holds the code that names
//! each variant (`Device`, `Engine`, `with_backend!`, `for_each_backend_id!`), so a new backend
//! is a folder here, a row in the registry, and an arm in each of these.

pub mod cpu;
pub mod cuda;
mod gemm_path;
pub mod gpu;
pub mod linux_gpu;
pub mod monitor;
pub mod registry;
pub mod telemetry;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use cpu::{Bf16Path, CpuBackend};
pub use cuda::CudaBackend;
pub use gemm_path::GemmPath;
pub use gpu::{GpuBackend, GpuSelector};

use crate::error::{Error, Result};
use crate::tensor::BackendKind;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Device {
    Cpu,
    Gpu(GpuSelector),
    Cuda(usize),
}

impl FromStr for Device {
    type Err = Error;

    /// A backend's id alone (`cpu`, `gpu`, `cuda`) or with its argument (`gpu:N`, the adapter
    /// index from `gpulab info`; `gpu:NAME`, part of the adapter's name; `cuda:N`), as
    /// `registry::BACKENDS` spells them.
    fn from_str(s: &str) -> Result<Self> {
        registry::parse(s).ok_or_else(|| Error::InvalidConfig(format!("unknown backend {s:?}; use {}", registry::choices())))
    }
}

impl Device {
    /// Which backend this device is on.
    pub fn kind(&self) -> BackendKind {
        match self {
            Device::Cpu => BackendKind::Cpu,
            Device::Gpu(_) => BackendKind::Gpu,
            Device::Cuda(_) => BackendKind::Cuda,
        }
    }
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

impl Engine {
    pub fn kind(&self) -> BackendKind {
        match self {
            Engine::Cpu(_) => BackendKind::Cpu,
            Engine::Gpu(_) => BackendKind::Gpu,
            Engine::Cuda(_) => BackendKind::Cuda,
        }
    }

    /// The wgpu backend, for what only it does: per-kernel timestamps, its matmul variants, the
    /// measured peaks of exercise 7's roofline.
    pub fn as_gpu_mut(&mut self) -> Option<&mut GpuBackend> {
        match self {
            Engine::Gpu(g) => Some(g),
            _ => None,
        }
    }

    /// The CUDA backend, for what only it has (TF32 GEMM).
    pub fn as_cuda_mut(&mut self) -> Option<&mut CudaBackend> {
        match self {
            Engine::Cuda(c) => Some(c),
            _ => None,
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

/// The backends' ids (`registry::BACKENDS`, in order) as identifiers, for macros that make an
/// item per backend (the tests' `backend_tests!`): `for_each_backend_id!(m!(args))` expands to
/// `m!(cpu [gpu, cuda] args)`, the reference (the CPU) first and the others in brackets.
#[macro_export]
macro_rules! for_each_backend_id {
    ($callback:ident ! ($($args:tt)*)) => {
        $callback! { cpu [gpu, cuda] $($args)* }
    };
}
