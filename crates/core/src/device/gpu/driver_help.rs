//! Why there is no (hardware) GPU adapter, and how to fix it on this system. Computed from the
//! adapters wgpu found and whether the Vulkan loader library can be opened; the CLI (`gpulab
//! info`) prints it and the lab shows it as a banner. Without any adapter every exercise still
//! runs on the CPU backend.

use serde::Serialize;

use super::adapters::AdapterSummary;

/// Whether the Vulkan loader library (libvulkan.so.1 / vulkan-1.dll) is installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VulkanLoader {
    Present,
    Missing,
    /// macOS: gpulab uses Metal, no Vulkan loader needed.
    NotUsed,
}

/// How serious a [`DriverNotice`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// No adapter on a native API (Vulkan, Metal, DX12): the GPU exercises have no real GPU.
    Warning,
    /// Only a software adapter: everything works, but its numbers are the CPU's.
    Info,
}

/// What the lab says when no hardware GPU is usable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DriverNotice {
    pub severity: Severity,
    pub headline: String,
    /// Why, from what was detected.
    pub why: String,
    /// What to do on this operating system, most likely first.
    pub fixes: Vec<String>,
}

/// Tries to open the Vulkan loader the way wgpu does (by its library name).
pub fn vulkan_loader() -> VulkanLoader {
    let name = if cfg!(target_os = "macos") {
        return VulkanLoader::NotUsed;
    } else if cfg!(windows) {
        "vulkan-1.dll"
    } else {
        "libvulkan.so.1"
    };
    // SAFETY: opening the system's Vulkan loader runs only its initialisers, as wgpu's own
    // Vulkan backend does when it starts; the handle is closed again at once.
    match unsafe { libloading::Library::new(name) } {
        Ok(_) => VulkanLoader::Present,
        Err(_) => VulkanLoader::Missing,
    }
}

/// The notice for these adapters on `os` (`std::env::consts::OS`), or None when a hardware
/// adapter on a native API exists. `icd_env` is the value of VK_ICD_FILENAMES / VK_DRIVER_FILES
/// when one is set (it restricts where the loader looks for drivers).
pub fn diagnose(adapters: &[AdapterSummary], loader: VulkanLoader, os: &str, icd_env: Option<&str>) -> Option<DriverNotice> {
    let native = |a: &&AdapterSummary| matches!(a.backend.as_str(), "Vulkan" | "Metal" | "Dx12");
    if adapters.iter().filter(native).any(|a| !a.software) {
        return None;
    }
    let api = match os {
        "macos" => "Metal",
        "windows" => "DirectX 12 or Vulkan",
        _ => "Vulkan",
    };
    let fixes = fixes(os);
    if let Some(soft) = adapters.iter().find(native) {
        return Some(DriverNotice {
            severity: Severity::Info,
            headline: format!("Only a software GPU was found: {} — it runs on your CPU", soft.name),
            why: format!(
                "No hardware GPU has a {api} driver here, so the GPU exercises run on {}, which emulates a GPU on the CPU: everything works, but its numbers are your CPU's, not a GPU's.",
                soft.name
            ),
            fixes,
        });
    }
    let mut why = match (os, loader) {
        ("macos", _) => "wgpu found no Metal device.".to_string(),
        (_, VulkanLoader::Missing) => format!(
            "The Vulkan loader ({}) is not installed, so no Vulkan driver can be used.",
            if os == "windows" { "vulkan-1.dll" } else { "libvulkan.so.1" }
        ),
        _ => "The Vulkan loader is installed, but it reports no device: no Vulkan driver (ICD) is installed for this GPU.".to_string(),
    };
    if let (Some(v), true) = (icd_env, os != "macos") {
        why.push_str(&format!(
            " VK_ICD_FILENAMES / VK_DRIVER_FILES is set to {v:?}: the loader looks only there — unset it to use the installed drivers."
        ));
    }
    let headline = match adapters.first() {
        Some(gl) => {
            let via = if gl.backend == "Gl" { "OpenGL" } else { gl.backend.as_str() };
            why.push_str(&format!(" gpulab fell back to {} on {via}, which has fewer features and is slower.", gl.name));
            format!("No {api} GPU driver — using the {via} fallback")
        }
        None => format!("No GPU adapter: no {api} driver was found — every exercise still runs on the CPU"),
    };
    Some(DriverNotice { severity: Severity::Warning, headline, why, fixes })
}

/// The fixes for `os`, most likely first, ending with what works meanwhile.
fn fixes(os: &str) -> Vec<String> {
    let mut f: Vec<String> = match os {
        "linux" => vec![
            "Debian/Ubuntu: sudo apt install libvulkan1 mesa-vulkan-drivers (AMD and Intel GPUs; also the llvmpipe software GPU)".into(),
            "Fedora: sudo dnf install vulkan-loader mesa-vulkan-drivers · Arch: sudo pacman -S vulkan-icd-loader vulkan-radeon (or vulkan-intel)".into(),
            "NVIDIA: install the proprietary driver (e.g. sudo apt install nvidia-driver on Debian with non-free); it brings its own Vulkan driver".into(),
            "Check with: vulkaninfo --summary (package vulkan-tools)".into(),
        ],
        "windows" => vec![
            "Update the GPU driver from NVIDIA, AMD or Intel (the one Windows Update installs may lack Vulkan/DX12 compute)".into(),
            "DirectX 12 needs Windows 10 or later; in a virtual machine or remote desktop only the WARP software adapter may exist".into(),
        ],
        "macos" => vec![
            "gpulab uses Metal, built into macOS 10.13 and later on Macs from 2012 on: update macOS".into(),
            "In a virtual machine Metal may be unavailable: run gpulab on the Mac itself".into(),
        ],
        _ => vec!["Install your GPU's Vulkan driver".into()],
    };
    f.push("Meanwhile every exercise runs on the CPU backend (choose CPU in its settings; on the command line --set backend=cpu, or backends=cpu for exercise 1).".into());
    f
}

/// The value of the Vulkan variables that restrict where drivers are looked for, if set.
pub fn icd_env() -> Option<String> {
    ["VK_ICD_FILENAMES", "VK_DRIVER_FILES"].iter().find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

/// The notice for this machine and these adapters (probes the loader).
pub fn detect(adapters: &[AdapterSummary]) -> Option<DriverNotice> {
    let chosen = std::env::var("WGPU_BACKEND").ok().filter(|v| !v.trim().is_empty());
    if let Some(notice) = chosen.and_then(|v| restricted(adapters, &v)) {
        return Some(notice);
    }
    diagnose(adapters, vulkan_loader(), std::env::consts::OS, icd_env().as_deref())
}

/// WGPU_BACKEND (`backends`, e.g. "gl") leaves out every native API: then no Vulkan, Metal or
/// DX12 device was looked for, and the notice says so instead of blaming a driver or loader.
pub fn restricted(adapters: &[AdapterSummary], backends: &str) -> Option<DriverNotice> {
    let lower = backends.to_ascii_lowercase();
    if ["vulkan", "vk", "metal", "mtl", "dx12", "d3d12", "primary"].iter().any(|n| lower.split(',').any(|b| b.trim() == *n)) {
        return None;
    }
    let found = adapters.iter().map(|a| format!("{} ({})", a.name, a.backend)).collect::<Vec<_>>();
    let why = format!(
        "WGPU_BACKEND={backends} restricts wgpu to those backends, so no Vulkan, Metal or DX12 device was looked for; {}.",
        if found.is_empty() { "none of them has an adapter here".to_string() } else { format!("found: {}", found.join(", ")) }
    );
    Some(DriverNotice {
        severity: if adapters.is_empty() { Severity::Warning } else { Severity::Info },
        headline: format!("WGPU_BACKEND={backends}: only the chosen backends are used"),
        why,
        fixes: vec!["Unset WGPU_BACKEND to use the native GPU API (Vulkan, Metal or DX12).".into()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::gpu::adapters::AdapterLimits;

    fn adapter(name: &str, backend: &str, software: bool) -> AdapterSummary {
        let limits = AdapterLimits {
            max_buffer_size: 0,
            max_storage_buffer_binding_size: 0,
            max_compute_workgroup_storage_size: 0,
            max_compute_invocations_per_workgroup: 0,
            max_compute_workgroup_size_x: 0,
            max_compute_workgroups_per_dimension: 0,
            max_storage_buffers_per_shader_stage: 0,
        };
        let (device_type, vendor, device) = (if software { "Cpu" } else { "DiscreteGpu" }.to_string(), 0, 0);
        AdapterSummary {
            index: 0,
            name: name.into(),
            backend: backend.into(),
            device_type,
            driver: String::new(),
            driver_info: String::new(),
            vendor,
            device,
            software,
            features: vec![],
            limits,
        }
    }

    #[test]
    fn a_hardware_gpu_on_a_native_api_needs_no_notice() {
        let list = [adapter("llvmpipe", "Vulkan", true), adapter("Radeon", "Vulkan", false)];
        assert_eq!(diagnose(&list, VulkanLoader::Present, "linux", None), None);
        assert_eq!(diagnose(&[adapter("Apple M2", "Metal", false)], VulkanLoader::NotUsed, "macos", None), None);
    }

    #[test]
    fn no_adapter_names_the_missing_loader_and_the_apt_fix() {
        let n = diagnose(&[], VulkanLoader::Missing, "linux", None).expect("a notice");
        assert_eq!(n.severity, Severity::Warning);
        assert!(n.headline.contains("No GPU adapter"), "{}", n.headline);
        assert!(n.why.contains("libvulkan.so.1") && n.why.contains("not installed"), "{}", n.why);
        assert!(n.fixes[0].contains("apt install libvulkan1 mesa-vulkan-drivers"), "{:?}", n.fixes);
        assert!(n.fixes.last().is_some_and(|f| f.contains("CPU")), "{:?}", n.fixes);
    }

    #[test]
    fn only_gl_says_no_driver_and_names_the_icd_override() {
        let n =
            diagnose(&[adapter("llvmpipe (LLVM 15)", "Gl", true)], VulkanLoader::Present, "linux", Some("/nonexistent")).expect("a notice");
        assert_eq!(n.severity, Severity::Warning);
        assert!(n.headline.contains("No Vulkan GPU driver") && n.headline.contains("OpenGL"), "{}", n.headline);
        assert!(n.why.contains("no Vulkan driver (ICD)") && n.why.contains("/nonexistent") && n.why.contains("llvmpipe"), "{}", n.why);
    }

    #[test]
    fn software_only_is_information_and_per_os_fixes_differ() {
        let n = diagnose(&[adapter("llvmpipe", "Vulkan", true)], VulkanLoader::Present, "linux", None).expect("a notice");
        assert_eq!(n.severity, Severity::Info);
        assert!(n.headline.contains("software GPU") && n.headline.contains("llvmpipe"), "{}", n.headline);
        let w =
            diagnose(&[adapter("Microsoft Basic Render Driver", "Dx12", true)], VulkanLoader::Missing, "windows", None).expect("a notice");
        assert!(w.fixes[0].contains("Update the GPU driver"), "{:?}", w.fixes);
        let m = diagnose(&[], VulkanLoader::NotUsed, "macos", Some("/x")).expect("a notice");
        assert!(m.fixes[0].contains("Metal") && !m.why.contains("VK_ICD"), "{m:?}");
    }

    #[test]
    fn a_backend_restricted_to_gl_says_so_not_that_the_vulkan_loader_has_no_device() {
        let gl = [adapter("llvmpipe (LLVM 19.1.7, 256 bits)", "Gl", true)];
        let n = restricted(&gl, "gl").expect("a notice");
        assert!(n.why.contains("WGPU_BACKEND=gl") && n.why.contains("llvmpipe") && !n.why.contains("loader"), "{n:?}");
        assert_eq!(n.severity, Severity::Info);
        assert_eq!(restricted(&gl, "vulkan,gl"), None, "Vulkan was asked for: the usual diagnosis applies");
        assert_eq!(restricted(&[], "gl").unwrap().severity, Severity::Warning);
    }
}
