//! NVIDIA telemetry through NVML, where the driver's library is present: utilisation, memory,
//! temperature and power as the driver reports them. Everything here is optional; without
//! NVML the functions return nothing and callers show nothing.

/// One NVIDIA GPU as NVML sees it (measured by the driver).
#[derive(Clone, Debug, Default)]
pub struct NvidiaGpu {
    pub name: String,
    pub utilization: Option<u32>,
    pub memory_used: Option<u64>,
    pub memory_total: Option<u64>,
    pub temperature: Option<u32>,
    pub power_mw: Option<u32>,
}

pub fn init() -> Option<nvml_wrapper::Nvml> {
    nvml_wrapper::Nvml::init().ok()
}

pub fn read(nvml: &nvml_wrapper::Nvml) -> Vec<NvidiaGpu> {
    let n = nvml.device_count().unwrap_or(0);
    (0..n)
        .filter_map(|i| nvml.device_by_index(i).ok())
        .map(|d| {
            let mem = d.memory_info().ok();
            NvidiaGpu {
                name: d.name().unwrap_or_else(|_| "NVIDIA GPU".into()),
                utilization: d.utilization_rates().ok().map(|u| u.gpu),
                memory_used: mem.as_ref().map(|m| m.used),
                memory_total: mem.as_ref().map(|m| m.total),
                temperature: d.temperature(nvml_wrapper::enum_wrappers::device::TemperatureSensor::Gpu).ok(),
                power_mw: d.power_usage().ok(),
            }
        })
        .collect()
}
