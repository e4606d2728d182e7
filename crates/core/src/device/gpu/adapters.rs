//! Adapter discovery: every adapter on every backend wgpu was built with, described in full,
//! and the choice of one by index, by name, or by preference (discrete first).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The optional features gpulab uses when an adapter has them.
pub const WANTED_FEATURES: [(wgpu::Features, &str); 5] = [
    (wgpu::Features::SHADER_F16, "SHADER_F16"),
    (wgpu::Features::TIMESTAMP_QUERY, "TIMESTAMP_QUERY"),
    (wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS, "TIMESTAMP_QUERY_INSIDE_ENCODERS"),
    (wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES, "TIMESTAMP_QUERY_INSIDE_PASSES"),
    (wgpu::Features::SUBGROUP, "SUBGROUP"),
];

pub fn wanted_features() -> wgpu::Features {
    WANTED_FEATURES.iter().fold(wgpu::Features::empty(), |acc, (f, _)| acc | *f)
}

/// The `AdapterSummary::features` entry of an adapter that runs the cooperative-matrix f16 GEMM
/// (`Matmul16Variant::Coop`): EXPERIMENTAL_COOPERATIVE_MATRIX with a 16×16×16 f16 × f16 + f32
/// configuration, SHADER_F16 and SUBGROUP (`has_coop_f16`). Not in WANTED_FEATURES: the feature is experimental, so it is
/// requested apart (`GpuBackend::from_adapter`), and only with such a configuration.
pub const COOP_MATRIX_F16: &str = "COOPERATIVE_MATRIX_F16";

/// What `gpulab info` and the hardware panel print for [`COOP_MATRIX_F16`].
pub fn feature_label(name: &str) -> String {
    if name == COOP_MATRIX_F16 { format!("{name} (cooperative matrix (tensor cores): f16 16×16×16, f32 sums)") } else { name.to_string() }
}

/// A configuration shaders/matmul16_coop.wgsl uses: `coop_mat16x16` of f16 A and B, f32 C.
pub fn coop_config_fits(p: &wgpu::CooperativeMatrixProperties) -> bool {
    (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
        && p.ab_type == wgpu::CooperativeScalarType::F16
        && p.cr_type == wgpu::CooperativeScalarType::F32
}

/// Whether subgroups of every size the adapter may use (`min..=max`, sizes are powers of two)
/// split shaders/matmul16_coop.wgsl's 64 invocations into 1, 2, 4 or 8 whole subgroups, the
/// counts its work split is written for (a subgroup owns a 16-row strip of a 128-row block).
pub fn coop_subgroups_fit(min: u32, max: u32) -> bool {
    8 <= min && min <= max && max <= 64
}

/// Whether the adapter can run the cooperative-matrix f16 GEMM (see [`COOP_MATRIX_F16`]): the
/// configuration, SHADER_F16, and SUBGROUP (the kernel reads its subgroup's index) with sizes
/// its work split fits.
pub fn has_coop_f16(adapter: &wgpu::Adapter) -> bool {
    let info = adapter.get_info();
    adapter.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP)
        && coop_subgroups_fit(info.subgroup_min_size, info.subgroup_max_size)
        && adapter.cooperative_matrix_properties().iter().any(coop_config_fits)
}

/// Everything a learner or a report needs to know about one adapter.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AdapterSummary {
    pub index: usize,
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub vendor: u32,
    pub device: u32,
    /// Emulated on the CPU (llvmpipe/lavapipe, WARP, SwiftShader): its numbers are not a GPU's.
    pub software: bool,
    /// Which of the optional features we use are present.
    pub features: Vec<String>,
    pub limits: AdapterLimits,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AdapterLimits {
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroup_size_x: u32,
    pub max_compute_workgroups_per_dimension: u32,
    pub max_storage_buffers_per_shader_stage: u32,
}

impl AdapterSummary {
    pub fn label(&self) -> String {
        let warn = if self.software { " [software GPU: runs on your CPU]" } else { "" };
        format!("#{} {} ({}, {}){warn}", self.index, self.name, self.backend, self.device_type)
    }
}

/// A software rasterizer/compute emulator rather than GPU hardware.
pub fn is_software(info: &wgpu::AdapterInfo) -> bool {
    let name = info.name.to_lowercase();
    info.device_type == wgpu::DeviceType::Cpu
        || ["llvmpipe", "lavapipe", "swiftshader", "basic render", "warp"].iter().any(|s| name.contains(s))
}

pub fn summarize(index: usize, adapter: &wgpu::Adapter) -> AdapterSummary {
    let info = adapter.get_info();
    let l = adapter.limits();
    let f = adapter.features();
    AdapterSummary {
        index,
        name: info.name.clone(),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: info.driver.clone(),
        driver_info: info.driver_info.clone(),
        vendor: info.vendor,
        device: info.device,
        software: is_software(&info),
        features: WANTED_FEATURES
            .iter()
            .filter(|(flag, _)| f.contains(*flag))
            .map(|(_, n)| n.to_string())
            .chain(has_coop_f16(adapter).then(|| COOP_MATRIX_F16.to_string()))
            .collect(),
        limits: AdapterLimits::from(&l),
    }
}

impl From<&wgpu::Limits> for AdapterLimits {
    fn from(l: &wgpu::Limits) -> Self {
        AdapterLimits {
            max_buffer_size: l.max_buffer_size,
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
            max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            max_compute_workgroup_size_x: l.max_compute_workgroup_size_x,
            max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
            max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
        }
    }
}

/// A wgpu instance honouring WGPU_BACKEND (and wgpu's other environment variables).
pub fn instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env())
}

/// All adapters, best first: discrete, integrated, virtual, then software; native APIs before GL.
pub fn enumerate(instance: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    let mut adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    adapters.sort_by_key(|a| {
        let info = a.get_info();
        let ty = match info.device_type {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Other => 3,
            wgpu::DeviceType::Cpu => 4,
        };
        let api = if info.backend == wgpu::Backend::Gl { 1 } else { 0 };
        (is_software(&info) as u8, ty, api)
    });
    adapters
}

/// Which adapter the user asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GpuSelector {
    /// The best adapter, or the one named by WGPU_ADAPTER_NAME.
    Auto,
    Index(usize),
    /// A case-insensitive substring of the adapter name.
    Name(String),
}

pub fn select(adapters: Vec<wgpu::Adapter>, sel: &GpuSelector) -> Result<(usize, wgpu::Adapter)> {
    let names = || adapters.iter().enumerate().map(|(i, a)| format!("#{i} {}", a.get_info().name)).collect::<Vec<_>>().join(", ");
    if adapters.is_empty() {
        return Err(Error::NoAdapter("wgpu found no adapter on any backend".into()));
    }
    let by_name = |name: &str| {
        let needle = name.to_lowercase();
        adapters.iter().position(|a| a.get_info().name.to_lowercase().contains(&needle))
    };
    let index = match sel {
        GpuSelector::Index(i) if *i < adapters.len() => *i,
        GpuSelector::Index(i) => {
            return Err(Error::AdapterNotFound(format!("GPU adapter index {i} is out of range; available: {}", names())));
        }
        GpuSelector::Name(n) => {
            by_name(n).ok_or_else(|| Error::AdapterNotFound(format!("no GPU adapter name contains {n:?}; available: {}", names())))?
        }
        GpuSelector::Auto => match std::env::var("WGPU_ADAPTER_NAME") {
            Ok(n) if !n.is_empty() => by_name(&n)
                .ok_or_else(|| Error::AdapterNotFound(format!("WGPU_ADAPTER_NAME={n:?} matches no adapter; available: {}", names())))?,
            _ => 0,
        },
    };
    let adapter = adapters.into_iter().nth(index).expect("index checked above");
    Ok((index, adapter))
}

/// The adapters grouped by physical device, as indices into `list` (each group in list order,
/// so its first is the preferred API): a GPU is listed once per API that reaches it (Vulkan and
/// GL, say), and those entries are one device. Two adapters are the same device when they come
/// through different backends and have the same name or the same nonzero vendor and device id;
/// two adapters on one backend are always two devices (two identical cards).
pub fn distinct_devices(list: &[AdapterSummary]) -> Vec<Vec<usize>> {
    let same = |a: &AdapterSummary, b: &AdapterSummary| {
        a.name.eq_ignore_ascii_case(&b.name) || (a.vendor != 0 && a.device != 0 && (a.vendor, a.device) == (b.vendor, b.device))
    };
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, a) in list.iter().enumerate() {
        let joins = groups.iter_mut().find(|g| g.iter().all(|&j| list[j].backend != a.backend) && g.iter().any(|&j| same(&list[j], a)));
        match joins {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups
}

#[cfg(test)]
mod distinct_tests {
    use super::*;

    fn a(name: &str, backend: &str, vendor: u32, device: u32) -> AdapterSummary {
        AdapterSummary {
            index: 0,
            name: name.into(),
            backend: backend.into(),
            device_type: "Cpu".into(),
            driver: String::new(),
            driver_info: String::new(),
            vendor,
            device,
            software: false,
            features: vec![],
            limits: AdapterLimits::from(&wgpu::Limits::default()),
        }
    }

    #[test]
    fn one_gpu_through_vulkan_and_gl_is_one_device_two_identical_cards_are_two() {
        let llvmpipe = [a("llvmpipe (LLVM 19.1.7, 256 bits)", "Vulkan", 0x10005, 0), a("llvmpipe (LLVM 19.1.7, 256 bits)", "Gl", 0, 0)];
        assert_eq!(distinct_devices(&llvmpipe), vec![vec![0, 1]]);
        let two = [
            a("NVIDIA GeForce RTX 4090", "Vulkan", 0x10de, 0x2684),
            a("NVIDIA GeForce RTX 4090", "Vulkan", 0x10de, 0x2684),
            a("NVIDIA GeForce RTX 4090/PCIe/SSE2", "Gl", 0x10de, 0x2684),
        ];
        assert_eq!(distinct_devices(&two), vec![vec![0, 2], vec![1]]);
        let mixed = [a("llvmpipe", "Vulkan", 0x10005, 0), a("SwiftShader Device (Subzero)", "Vulkan", 0x1ae0, 0xc0de)];
        assert_eq!(distinct_devices(&mixed).len(), 2);
    }
}
