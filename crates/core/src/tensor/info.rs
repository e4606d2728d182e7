//! How a backend describes itself in every output and report.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which family of backend ran the math. Serialized lowercase ("cpu", "gpu", "cuda"), the
/// spelling reports and checkpoints have always used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The reference CPU backend.
    Cpu,
    /// A wgpu adapter (Vulkan, Metal, Dx12, Gl), including software ones such as llvmpipe.
    Gpu,
    /// An NVIDIA GPU through CUDA (the `cuda` feature).
    Cuda,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Gpu => "gpu",
            BackendKind::Cuda => "cuda",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BackendInfo {
    pub kind: BackendKind,
    /// Adapter or CPU name.
    pub name: String,
    /// Graphics API (Vulkan, Metal, Dx12, Gl) for GPUs; "native" for the CPU.
    pub api: String,
    pub driver: String,
    /// wgpu's device type: DiscreteGpu, IntegratedGpu, VirtualGpu, Cpu, Other.
    pub device_type: String,
    /// True for adapters that are emulated on the CPU (llvmpipe, WARP, SwiftShader).
    pub software: bool,
    /// Whether per-step GPU busy time can be measured with timestamp queries.
    pub timestamps: bool,
}

impl BackendInfo {
    /// A one-line label, with the software-GPU warning where it applies.
    pub fn label(&self) -> String {
        let warn = if self.software { " [software GPU: runs on your CPU]" } else { "" };
        match self.kind {
            BackendKind::Cpu => format!("CPU: {}", self.name),
            BackendKind::Gpu | BackendKind::Cuda => {
                format!("{} {} ({}, {}){warn}", self.kind.name().to_uppercase(), self.name, self.api, self.device_type)
            }
        }
    }
}
