//! The shader registry: every WGSL source is embedded here with `include_str!`, instantiated by
//! a small placeholder templater, compiled once and cached by (kernel, dtype, variant).

use std::collections::HashMap;
use std::sync::Arc;


use crate::error::{Error, Result};
use crate::tensor::DType;

const MATMUL_REGBLOCK: &str = include_str!("../../../shaders/matmul_regblock.wgsl");
const MATMUL_TILED: &str = include_str!("../../../shaders/matmul_tiled.wgsl");
const ELEMENTWISE: &str = include_str!("../../../shaders/elementwise.wgsl");
const SOFTMAX_XENT: &str = include_str!("../../../shaders/softmax_xent.wgsl");
const REDUCE: &str = include_str!("../../../shaders/reduce.wgsl");
const OPTIMIZER: &str = include_str!("../../../shaders/optimizer.wgsl");
const TRANSPOSE: &str = include_str!("../../../shaders/transpose.wgsl");
const AMP: &str = include_str!("../../../shaders/amp.wgsl");
const MATMUL16: &str = include_str!("../../../shaders/matmul16.wgsl");
const GRAD_SCALER: &str = include_str!("../../../shaders/grad_scaler.wgsl");
const FLOAT16_F16: &str = include_str!("../../../shaders/float16_f16.wgsl");
const FLOAT16_BF16: &str = include_str!("../../../shaders/float16_bf16.wgsl");
const FLOAT16_COMMON: &str = include_str!("../../../shaders/float16_common.wgsl");

/// Workgroup size of the 1-D kernels.
pub const WG: u32 = 256;

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
    Transpose,
    // Mixed precision: instantiated per 16-bit type (the pipeline key's dtype).
    CastTo16,
    CastToF32,
    SumCols16,
    Matmul16Out,
    Matmul16F32,
    // f32 only.
    UnscaleCheck,
}

impl Kernel {
    /// Every kernel that is not a matmul variant (those are compiled per chosen variant).
    pub const SIMPLE: [Kernel; 18] = [
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
        Kernel::Transpose,
        Kernel::UnscaleCheck,
    ];
}

struct KernelDef {
    file: &'static str,
    source: &'static str,
    entry: &'static str,
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
            Transpose => ("transpose.wgsl", TRANSPOSE, "main"),
            CastTo16 => ("amp.wgsl", AMP, "cast_to16"),
            CastToF32 => ("amp.wgsl", AMP, "cast_to_f32"),
            SumCols16 => ("amp.wgsl", AMP, "sum_cols16"),
            Matmul16Out => ("matmul16.wgsl", MATMUL16, "main16"),
            Matmul16F32 => ("matmul16.wgsl", MATMUL16, "main_f32"),
            UnscaleCheck => ("grad_scaler.wgsl", GRAD_SCALER, "unscale_check"),
        };
        KernelDef { file, source, entry }
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

/// The 16-bit type's WGSL helpers that the mixed-precision kernels start with ({{FLOAT16}}).
fn float16_prelude(dtype: DType) -> String {
    match dtype {
        DType::F16 => format!("{FLOAT16_F16}\n{FLOAT16_COMMON}"),
        DType::BF16 => format!("{FLOAT16_BF16}\n{FLOAT16_COMMON}"),
        _ => String::new(),
    }
}

/// What distinguishes two compiled instances of one kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PipelineKey {
    pub kernel: Kernel,
    pub dtype: DType,
    /// Kernel-specific: for matmul, bit 0 = transpose A, bit 1 = transpose B, bits 2/3 = A/B
    /// rows allow vec4 loads.
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
                ("WG", WG.to_string()),
                ("TA", flag(1)),
                ("TB", flag(2)),
                ("VA", flag(4)),
                ("VB", flag(8)),
                ("FLOAT16", float16_prelude(key.dtype)),
            ],
        )?;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(def.file),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
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
