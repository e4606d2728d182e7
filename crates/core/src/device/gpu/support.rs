//! What an adapter can run and why not, before any work: the same sentences the ops refuse
//! with, listed by `gpulab info` and the Hardware panel.

use serde::Serialize;

use super::adapters::{AdapterSummary, COOP_MATRIX_F16};
use super::kernels::{Compile, Kernel, PipelineKey, source_wg};
use super::{amp, limits, targets};
use crate::tensor::DType;

/// One capability and, where the adapter lacks it, the refusal (None: it runs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Support {
    pub what: String,
    pub refusal: Option<String>,
}

/// What `a` runs: each precision with the exercises that use it, the optional kernels, and every
/// kernel its limits refuse (named with the limit).
pub fn support(a: &AdapterSummary) -> Vec<Support> {
    let has = |f: &str| a.features.iter().any(|x| x == f);
    let item = |what: &str, refusal: Option<String>| Support { what: what.into(), refusal };
    let backend = match a.backend.as_str() {
        "Vulkan" => wgpu::Backend::Vulkan,
        "Metal" => wgpu::Backend::Metal,
        "Dx12" => wgpu::Backend::Dx12,
        "Gl" => wgpu::Backend::Gl,
        _ => wgpu::Backend::Noop,
    };
    let mut out = vec![
        item("fp32 (exercises 1–9 on the GPU)", None),
        item("bf16 mixed precision (exercise 3)", None),
        item("fp16 mixed precision (exercises 3 and 9)", (!has("SHADER_F16")).then(|| amp::fp16_refusal(&a.name))),
        item("int8 inference (exercise 9)", None),
        item(
            "cooperative-matrix f16 GEMM (tensor cores)",
            if !has(COOP_MATRIX_F16) {
                Some(format!("{} lists no 16×16×16 f16/f32 cooperative-matrix configuration; the other 16-bit GEMMs run", a.name))
            } else {
                targets::coop_refusal(backend)
            },
        ),
        item(
            "GPU kernel timestamps (exercise 7's per-kernel table)",
            (!has("TIMESTAMP_QUERY"))
                .then(|| format!("{} lacks TIMESTAMP_QUERY; kernels are timed by wall clock around submit + wait", a.name)),
        ),
    ];
    out.extend(beyond_limits(a).into_iter().map(|why| item("a kernel beyond this adapter's limits", Some(why))));
    out
}

/// Kernels a run does without where the adapter's limits refuse them, and what runs instead:
/// not "beyond" the adapter, since nothing the learner asks for is refused.
pub const FALLBACKS: [(Kernel, &str); 2] = [
    // core.rs `loss_step`: six storage buffers, or the three ops.
    (Kernel::SoftmaxXentTotals, "the loss step runs as three ops (softmax_xent, accumulate_sum, count_correct)"),
    // tuning.rs `candidates`: the tiled f32 GEMM only where its tiles fit.
    (Kernel::MatmulTiled, "the register-blocked f32 GEMM runs"),
];

/// Every kernel (at the workgroup size this adapter gets) that breaks one of its limits and
/// has no fallback (`FALLBACKS`).
fn beyond_limits(a: &AdapterSummary) -> Vec<String> {
    let l = &a.limits;
    let limits = wgpu::Limits {
        max_buffer_size: l.max_buffer_size,
        max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
        max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
        max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
        max_compute_workgroup_size_x: l.max_compute_workgroup_size_x,
        max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
        max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
        ..wgpu::Limits::default()
    };
    let wg = limits::workgroup_size(&limits);
    let mut out = Vec::new();
    for &kernel in Kernel::ALL.iter().filter(|k| !FALLBACKS.iter().any(|(f, _)| f == *k)) {
        let dtype = match kernel.compile() {
            Compile::Per16BitType => DType::BF16,
            _ if matches!(kernel, Kernel::MatmulI8 | Kernel::MatmulI8Dequant) => DType::I8,
            _ => DType::F32,
        };
        let dtype = if kernel == Kernel::Matmul16Coop { DType::F16 } else { dtype };
        let Ok(src) = source_wg(PipelineKey { kernel, dtype, variant: 0 }, wg) else { continue };
        let Ok(needs) = limits::needs(&src, kernel.entry()) else { continue };
        if let Some((limit, need, have)) = limits::broken(&needs, &limits) {
            out.push(format!("kernel {kernel:?} needs {limit} = {need}, {} allows {have}", a.name));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::gpu::adapters::AdapterLimits;

    fn summary(features: &[&str], limits: AdapterLimits) -> AdapterSummary {
        AdapterSummary {
            index: 0,
            name: "SwiftShader Device (Subzero)".into(),
            backend: "Vulkan".into(),
            device_type: "Cpu".into(),
            driver: String::new(),
            driver_info: String::new(),
            vendor: 0x1ae0,
            device: 0xc0de,
            software: true,
            features: features.iter().map(|f| f.to_string()).collect(),
            limits,
        }
    }

    #[test]
    fn lists_the_fp16_refusal_and_the_kernels_a_gles_minimum_adapter_refuses() {
        let webgpu = AdapterLimits::from(&wgpu::Limits::default());
        let s = support(&summary(&["TIMESTAMP_QUERY"], webgpu.clone()));
        let fp16 = s.iter().find(|x| x.what.starts_with("fp16")).unwrap();
        assert_eq!(
            fp16.refusal.as_deref(),
            Some("fp16 needs SHADER_F16, which SwiftShader Device (Subzero) does not offer; bf16 and fp32 run")
        );
        assert!(s.iter().filter(|x| x.refusal.is_none()).any(|x| x.what.starts_with("bf16")));
        assert!(!s.iter().any(|x| x.what.contains("beyond")), "WebGPU's defaults run every kernel: {s:#?}");
        let gles = AdapterLimits {
            max_compute_invocations_per_workgroup: 128,
            max_compute_workgroup_size_x: 128,
            max_storage_buffers_per_shader_stage: 4,
            ..webgpu
        };
        let beyond: Vec<_> =
            support(&summary(&["SHADER_F16"], gles)).into_iter().filter_map(|x| x.refusal).filter(|r| r.starts_with("kernel")).collect();
        // Kernels with a fallback are not refusals: the run goes on without them.
        for (k, _) in FALLBACKS {
            assert!(!beyond.iter().any(|r| r.starts_with(&format!("kernel {k:?} needs"))), "{k:?} has a fallback: {beyond:#?}");
        }
        assert!(beyond.iter().any(|r| r.contains("Matmul16Tiled needs max_compute_invocations_per_workgroup = 256")), "{beyond:#?}");
        assert!(beyond.iter().all(|r| !r.contains("Relu ")), "the 1-D kernels shrink to 128 invocations: {beyond:#?}");
        // prepare() compiles these on every device, so none may need more than GLES's minimum.
        for k in Kernel::SIMPLE {
            assert!(!beyond.iter().any(|r| r.starts_with(&format!("kernel {k:?} needs"))), "{k:?} is compiled at prepare: {beyond:#?}");
        }
    }
}
