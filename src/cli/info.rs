use clap::Args;
use gpulab::device::cpu::cpu_name;
use gpulab::device::gpu::{adapters, driver_help, support};
use gpulab::device::monitor::{self, Sample};
use serde_json::json;

#[derive(Args)]
pub struct InfoArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: InfoArgs) -> anyhow::Result<()> {
    let instance = adapters::instance();
    let list: Vec<_> = adapters::enumerate(&instance).iter().enumerate().map(|(i, a)| adapters::summarize(i, a)).collect();
    let threads = rayon::current_num_threads();
    let telemetry = telemetry();
    if args.json {
        let notice = driver_help::detect(&list);
        let can: Vec<_> = list.iter().map(support::support).collect();
        let v = json!({ "cpu": { "name": cpu_name(), "threads": threads }, "adapters": list, "runs": can, "driver_notice": notice, "gpu_telemetry": telemetry, "gpulab": env!("CARGO_PKG_VERSION") });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("CPU: {} — {threads} threads for compute", cpu_name());
    if list.is_empty() {
        println!("GPU adapters: none found.");
    }
    for a in &list {
        println!("\nGPU adapter {}", a.label());
        println!("  driver:   {} {}", a.driver, a.driver_info);
        println!("  vendor:   {:#06x}  device: {:#06x}", a.vendor, a.device);
        if a.software {
            println!("  NOTE:     software GPU: runs on your CPU — its speed is your CPU's, not a GPU's");
        }
        let feats = if a.features.is_empty() {
            "none of the optional ones".to_string()
        } else {
            a.features.iter().map(|f| adapters::feature_label(f)).collect::<Vec<_>>().join(", ")
        };
        println!("  features: {feats}");
        let l = &a.limits;
        println!(
            "  limits:   max buffer {} MiB, max storage binding {} MiB, workgroup memory {} KiB,",
            l.max_buffer_size >> 20,
            l.max_storage_buffer_binding_size >> 20,
            l.max_compute_workgroup_storage_size >> 10
        );
        println!(
            "            {} invocations/workgroup, {} workgroups/dimension, {} storage buffers/stage",
            l.max_compute_invocations_per_workgroup, l.max_compute_workgroups_per_dimension, l.max_storage_buffers_per_shader_stage
        );
        println!("  runs:");
        for s in support::support(a) {
            match s.refusal {
                None => println!("    yes  {}", s.what),
                Some(why) => println!("    no   {}: {why}", s.what),
            }
        }
    }
    if !telemetry.is_empty() {
        println!("\nGPU telemetry (measured, each with its source):");
    }
    for g in &telemetry {
        println!("  {}: {}\n    from {} ({})", g.device, g.describe(), g.source, g.origin);
    }
    if let Some(n) = driver_help::detect(&list) {
        println!("\n{}\n  why: {}", n.headline, n.why);
        for f in &n.fixes {
            println!("  fix: {f}");
        }
    }
    Ok(())
}

/// Every telemetry source's readings (monitor.rs: NVML, amdgpu sysfs, this process's DRM
/// fdinfo), the second of two reads 200 ms apart so fdinfo has a busy %.
fn telemetry() -> Vec<Sample> {
    let mut probe = monitor::probe();
    probe.read_all();
    std::thread::sleep(std::time::Duration::from_millis(200));
    probe.read_all()
}
