//! Limits as a contract. A device asks for WebGPU's default limits (the adapter's, where a
//! downlevel adapter such as GLES has less), raised only where gpulab needs more: buffer sizes,
//! since a tensor's size is bounded by the memory budget, not by WebGPU's 128 MiB binding, and
//! storage buffers per stage, which bound how many parameters one optimizer dispatch updates. Every
//! pipeline is checked against the device's limits before it is built and a failure names the
//! limit; the 1-D kernels' workgroup size is the largest power of two (≤ 256) that fits.

use naga::valid::{Capabilities, ValidationFlags, Validator};

use crate::error::{Error, Result};

/// The limits to request from an adapter whose own limits are `adapter`.
pub fn requested(adapter: &wgpu::Limits) -> wgpu::Limits {
    let mut l = wgpu::Limits::default().or_worse_values_from(adapter);
    l.max_buffer_size = adapter.max_buffer_size;
    l.max_storage_buffer_binding_size = adapter.max_storage_buffer_binding_size;
    // The multi-tensor optimizer binds several parameters' buffers per dispatch (multi_optim.rs).
    l.max_storage_buffers_per_shader_stage = adapter.max_storage_buffers_per_shader_stage;
    l.max_buffers_and_acceleration_structures_per_shader_stage = adapter.max_buffers_and_acceleration_structures_per_shader_stage;
    l
}

/// The 1-D kernels' workgroup size on a device with `limits` (`{{WG}}`): a power of two, since
/// the reductions halve it, at most 256, and small enough that their two `array<_, WG>` of
/// 4-byte values fit in workgroup memory. GLES 3.1 guarantees 128 invocations.
pub fn workgroup_size(limits: &wgpu::Limits) -> u32 {
    let fit = limits
        .max_compute_invocations_per_workgroup
        .min(limits.max_compute_workgroup_size_x)
        .min(limits.max_compute_workgroup_storage_size / 8)
        .clamp(1, 256);
    1 << (31 - fit.leading_zeros())
}

/// What one entry point of a WGSL module asks of the device.
#[derive(Debug, PartialEq, Eq)]
pub struct Needs {
    pub workgroup_size: [u32; 3],
    pub storage_buffers: u32,
    pub workgroup_bytes: u32,
}

/// Reads `entry`'s needs from `source` with naga (wgpu's own shader compiler).
pub fn needs(source: &str, entry: &str) -> Result<Needs> {
    let bug = |what: String| Error::Internal(format!("entry {entry}: {what}"));
    let module = naga::front::wgsl::parse_str(source).map_err(|e| bug(e.emit_to_string(source)))?;
    let info = Validator::new(ValidationFlags::all(), Capabilities::all()).validate(&module).map_err(|e| bug(format!("{e:?}")))?;
    let (index, ep) =
        module.entry_points.iter().enumerate().find(|(_, e)| e.name == entry).ok_or_else(|| bug("no such entry point".into()))?;
    let used = info.get_entry_point(index);
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).map_err(|e| bug(format!("{e:?}")))?;
    let (mut storage_buffers, mut workgroup_bytes) = (0, 0);
    for (handle, var) in module.global_variables.iter() {
        if used[handle].is_empty() {
            continue;
        }
        match var.space {
            naga::AddressSpace::Storage { .. } => storage_buffers += 1,
            naga::AddressSpace::WorkGroup => workgroup_bytes += layouter[var.ty].size,
            _ => {}
        }
    }
    Ok(Needs { workgroup_size: ep.workgroup_size, storage_buffers, workgroup_bytes })
}

/// The first limit of `limits` that `needs` breaks, as (limit name, needed, allowed).
pub fn broken(needs: &Needs, limits: &wgpu::Limits) -> Option<(&'static str, u32, u32)> {
    let [x, y, z] = needs.workgroup_size;
    [
        ("max_compute_invocations_per_workgroup", x * y * z, limits.max_compute_invocations_per_workgroup),
        ("max_compute_workgroup_size_x", x, limits.max_compute_workgroup_size_x),
        ("max_compute_workgroup_size_y", y, limits.max_compute_workgroup_size_y),
        ("max_compute_workgroup_size_z", z, limits.max_compute_workgroup_size_z),
        ("max_storage_buffers_per_shader_stage", needs.storage_buffers, limits.max_storage_buffers_per_shader_stage),
        ("max_compute_workgroup_storage_size", needs.workgroup_bytes, limits.max_compute_workgroup_storage_size),
    ]
    .into_iter()
    .find(|(_, need, have)| need > have)
}

/// Refuses, naming the limit, a pipeline (`file`'s `entry`) that would break `limits`.
pub fn check_pipeline(source: &str, file: &'static str, entry: &'static str, limits: &wgpu::Limits) -> Result<()> {
    match broken(&needs(source, entry)?, limits) {
        None => Ok(()),
        Some((limit, need, have)) => Err(Error::BeyondLimit { file, entry, limit, need, have }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GLES 3.1's guaranteed compute limits.
    fn gles() -> wgpu::Limits {
        wgpu::Limits {
            max_compute_invocations_per_workgroup: 128,
            max_compute_workgroup_size_x: 128,
            max_compute_workgroup_size_y: 128,
            max_compute_workgroup_size_z: 64,
            max_storage_buffers_per_shader_stage: 4,
            max_compute_workgroup_storage_size: 16384,
            ..wgpu::Limits::downlevel_defaults()
        }
    }

    #[test]
    fn requests_webgpu_defaults_raising_only_buffer_sizes_and_storage_buffers() {
        let big = wgpu::Limits { max_buffer_size: 1 << 40, max_storage_buffer_binding_size: 1 << 32, ..wgpu::Limits::default() }
            .or_better_values_from(&wgpu::Limits { max_compute_workgroups_per_dimension: 1 << 20, ..Default::default() });
        let r = requested(&big);
        assert_eq!((r.max_buffer_size, r.max_storage_buffer_binding_size), (1 << 40, 1 << 32));
        assert_eq!(r.max_compute_workgroups_per_dimension, wgpu::Limits::default().max_compute_workgroups_per_dimension);
        let many = wgpu::Limits {
            max_storage_buffers_per_shader_stage: 32,
            max_buffers_and_acceleration_structures_per_shader_stage: 64,
            ..wgpu::Limits::default()
        };
        let r = requested(&many);
        assert_eq!((r.max_storage_buffers_per_shader_stage, r.max_buffers_and_acceleration_structures_per_shader_stage), (32, 64));
        // A downlevel adapter gets its own, lower limits rather than a request it would refuse.
        assert_eq!(requested(&gles()).max_compute_invocations_per_workgroup, 128);
        assert!(requested(&gles()).check_limits(&gles()));
    }

    #[test]
    fn workgroup_size_is_the_largest_fitting_power_of_two() {
        assert_eq!(workgroup_size(&wgpu::Limits::default()), 256);
        assert_eq!(workgroup_size(&gles()), 128);
        assert_eq!(workgroup_size(&wgpu::Limits { max_compute_invocations_per_workgroup: 200, ..Default::default() }), 128);
    }

    #[test]
    fn a_pipeline_beyond_a_limit_is_refused_naming_it() {
        let src = "@group(0) @binding(0) var<storage, read_write> a: array<f32>;\n\
                   @compute @workgroup_size(16, 16, 1) fn main(@builtin(global_invocation_id) g: vec3<u32>) { a[g.x] = 1.0; }";
        let n = needs(src, "main").unwrap();
        assert_eq!(n, Needs { workgroup_size: [16, 16, 1], storage_buffers: 1, workgroup_bytes: 0 });
        let e = check_pipeline(src, "t.wgsl", "main", &gles()).unwrap_err().to_string();
        assert!(e.contains("max_compute_invocations_per_workgroup = 256, this device allows 128"), "{e}");
        check_pipeline(src, "t.wgsl", "main", &wgpu::Limits::default()).unwrap();
    }
}
