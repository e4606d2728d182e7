//! The shader registry: every WGSL source is embedded here with `include_str!`, instantiated by
//! a small placeholder templater, compiled once and cached by (kernel, dtype, variant).

use std::collections::HashMap;
use std::sync::Arc;

use eframe::wgpu;

use crate::error::{Error, Result};
use crate::tensor::DType;

const MATMUL_REGBLOCK: &str = include_str!("../../../shaders/matmul_regblock.wgsl");
const MATMUL_TILED: &str = include_str!("../../../shaders/matmul_tiled.wgsl");
const ELEMENTWISE: &str = include_str!("../../../shaders/elementwise.wgsl");
const SOFTMAX_XENT: &str = include_str!("../../../shaders/softmax_xent.wgsl");
const REDUCE: &str = include_str!("../../../shaders/reduce.wgsl");
const OPTIMIZER: &str = include_str!("../../../shaders/optimizer.wgsl");

/// Workgroup size of the 1-D kernels.
pub const WG: u32 = 256;
/// Workgroup edge of the register-blocked matmul (each invocation computes 4×4 outputs).
pub const MATMUL_WG: u32 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    MatmulRegBlock,
    MatmulTiled,
    Relu,
    ReluBackward,
    BiasAdd,
    Fill,
    FillBits,
    Scale,
    Copy,
    SoftmaxXent,
    SoftmaxXentRowwise,
    SumCols,
    SumRows,
    ArgmaxRows,
    AccumulateSum,
    CountCorrect,
    Sgd,
    AdamW,
}

impl Kernel {
    /// Every kernel that is not a matmul variant (those are compiled per chosen variant).
    pub const SIMPLE: [Kernel; 16] = [
        Kernel::Relu,
        Kernel::ReluBackward,
        Kernel::BiasAdd,
        Kernel::Fill,
        Kernel::FillBits,
        Kernel::Scale,
        Kernel::Copy,
        Kernel::SoftmaxXent,
        Kernel::SoftmaxXentRowwise,
        Kernel::SumCols,
        Kernel::SumRows,
        Kernel::ArgmaxRows,
        Kernel::AccumulateSum,
        Kernel::CountCorrect,
        Kernel::Sgd,
        Kernel::AdamW,
    ];
}

struct KernelDef {
    file: &'static str,
    source: &'static str,
    entry: &'static str,
    /// Compiled without wgpu's runtime bounds checks (see `PipelineCache::get`).
    trusted: bool,
}

impl Kernel {
    fn def(self) -> KernelDef {
        use Kernel::*;
        let (file, source, entry) = match self {
            MatmulRegBlock => ("matmul_regblock.wgsl", MATMUL_REGBLOCK, "main"),
            MatmulTiled => ("matmul_tiled.wgsl", MATMUL_TILED, "main"),
            Relu => ("elementwise.wgsl", ELEMENTWISE, "relu"),
            ReluBackward => ("elementwise.wgsl", ELEMENTWISE, "relu_backward"),
            BiasAdd => ("elementwise.wgsl", ELEMENTWISE, "bias_add"),
            Fill => ("elementwise.wgsl", ELEMENTWISE, "fill"),
            FillBits => ("elementwise.wgsl", ELEMENTWISE, "fill_bits"),
            Scale => ("elementwise.wgsl", ELEMENTWISE, "scale"),
            Copy => ("elementwise.wgsl", ELEMENTWISE, "copy"),
            SoftmaxXent => ("softmax_xent.wgsl", SOFTMAX_XENT, "main"),
            SoftmaxXentRowwise => ("softmax_xent.wgsl", SOFTMAX_XENT, "rowwise"),
            SumCols => ("reduce.wgsl", REDUCE, "sum_cols"),
            SumRows => ("reduce.wgsl", REDUCE, "sum_rows"),
            ArgmaxRows => ("reduce.wgsl", REDUCE, "argmax_rows"),
            AccumulateSum => ("reduce.wgsl", REDUCE, "accumulate_sum"),
            CountCorrect => ("reduce.wgsl", REDUCE, "count_correct"),
            Sgd => ("optimizer.wgsl", OPTIMIZER, "sgd"),
            AdamW => ("optimizer.wgsl", OPTIMIZER, "adamw"),
        };
        let trusted = matches!(self, MatmulRegBlock | MatmulTiled);
        KernelDef { file, source, entry, trusted }
    }
}

/// Replaces every `{{KEY}}` with its value; a placeholder left over is an error, so a typo in
/// a shader cannot compile into something else.
pub fn render(source: &str, values: &[(&str, String)]) -> Result<String> {
    let mut out = source.to_string();
    for (key, value) in values {
        out = out.replace(&format!("{{{{{key}}}}}"), value);
    }
    if let Some(pos) = out.find("{{") {
        let end = out[pos..].find("}}").map(|e| pos + e + 2).unwrap_or(out.len());
        return Err(Error::Gpu(format!("shader template placeholder {} has no value", &out[pos..end])));
    }
    Ok(out)
}

/// What distinguishes two compiled instances of one kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PipelineKey {
    pub kernel: Kernel,
    pub dtype: DType,
    /// Kernel-specific: for matmul, bit 0 = transpose A, bit 1 = transpose B.
    pub variant: u32,
}

#[derive(Default)]
pub struct PipelineCache {
    pipelines: HashMap<PipelineKey, Arc<wgpu::ComputePipeline>>,
}

impl PipelineCache {
    pub fn get(&mut self, device: &wgpu::Device, key: PipelineKey) -> Result<Arc<wgpu::ComputePipeline>> {
        if let Some(p) = self.pipelines.get(&key) {
            return Ok(p.clone());
        }
        let def = key.kernel.def();
        let flag = |bit: u32| if key.variant & bit != 0 { "true" } else { "false" }.to_string();
        let source = render(
            def.source,
            &[
                ("DT", key.dtype.wgsl().to_string()),
                ("WG", if matches!(key.kernel, Kernel::MatmulRegBlock) { MATMUL_WG } else { WG }.to_string()),
                ("TA", flag(1)),
                ("TB", flag(2)),
            ],
        )?;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let desc = wgpu::ShaderModuleDescriptor { label: Some(def.file), source: wgpu::ShaderSource::Wgsl(source.into()) };
        let module = if def.trusted {
            // SAFETY: a trusted kernel clamps every index it loads or stores to the matrix shape,
            // and the host checks each shape against its buffer before dispatch, so no access
            // leaves its binding. Dropping wgpu's per-access bounds checks (and the forced loop
            // bound) roughly doubles GEMM speed on software adapters.
            let checks = wgpu::ShaderRuntimeChecks { bounds_checks: false, ..wgpu::ShaderRuntimeChecks::checked() };
            unsafe { device.create_shader_module_trusted(desc, checks) }
        } else {
            device.create_shader_module(desc)
        };
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(def.entry),
            layout: None,
            module: &module,
            entry_point: Some(def.entry),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(err) = pollster::block_on(scope.pop()) {
            return Err(Error::Gpu(format!("shader {} entry {} failed to compile: {err}", def.file, def.entry)));
        }
        let pipeline = Arc::new(pipeline);
        self.pipelines.insert(key, pipeline.clone());
        Ok(pipeline)
    }
}
