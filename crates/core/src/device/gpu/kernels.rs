//! The shader registry: every WGSL source is embedded here with `include_str!`, instantiated by
//! a small placeholder templater, compiled once and cached by (kernel, dtype, variant).

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::tensor::DType;

const MATMUL_REGBLOCK: &str = include_str!("../../../../../shaders/matmul_regblock.wgsl");
const MATMUL_TILED: &str = include_str!("../../../../../shaders/matmul_tiled.wgsl");
const ELEMENTWISE: &str = include_str!("../../../../../shaders/elementwise.wgsl");
const SOFTMAX_XENT: &str = include_str!("../../../../../shaders/softmax_xent.wgsl");
const REDUCE: &str = include_str!("../../../../../shaders/reduce.wgsl");
const OPTIMIZER: &str = include_str!("../../../../../shaders/optimizer.wgsl");
const OPTIMIZER_MATH: &str = include_str!("../../../../../shaders/optimizer_math.wgsl");
const TRANSPOSE: &str = include_str!("../../../../../shaders/transpose.wgsl");
const AMP: &str = include_str!("../../../../../shaders/amp.wgsl");
const MATMUL16: &str = include_str!("../../../../../shaders/matmul16.wgsl");
const MATMUL16_REGBLOCK: &str = include_str!("../../../../../shaders/matmul16_regblock.wgsl");
const MATMUL16_TILED: &str = include_str!("../../../../../shaders/matmul16_tiled.wgsl");
const MATMUL16_COOP: &str = include_str!("../../../../../shaders/matmul16_coop.wgsl");
const MATMUL16_COMMON: &str = include_str!("../../../../../shaders/matmul16_common.wgsl");
const GRAD_SCALER: &str = include_str!("../../../../../shaders/grad_scaler.wgsl");
const AMP_OPTIMIZER: &str = include_str!("../../../../../shaders/amp_optimizer.wgsl");
const MULTI_OPTIMIZER: &str = include_str!("../../../../../shaders/multi_optimizer.wgsl");
const FLOAT16_F16: &str = include_str!("../../../../../shaders/float16_f16.wgsl");
const FLOAT16_BF16: &str = include_str!("../../../../../shaders/float16_bf16.wgsl");
const FLOAT16_COMMON: &str = include_str!("../../../../../shaders/float16_common.wgsl");
const QUANT: &str = include_str!("../../../../../shaders/quant.wgsl");
const MATMUL_I8: &str = include_str!("../../../../../shaders/matmul_i8.wgsl");
const CONV: &str = include_str!("../../../../../shaders/conv.wgsl");
const CONV16: &str = include_str!("../../../../../shaders/conv16.wgsl");
const IM2COL_TAP: &str = include_str!("../../../../../shaders/im2col_tap.wgsl");

/// Workgroup size of the 1-D kernels where the device allows it (`limits::workgroup_size`).
pub const WG: u32 = 256;

/// When a kernel's pipeline is compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compile {
    /// In `prepare()`, as f32 with no variant bits, so the first training step does not pay it.
    AtPrepare,
    /// On first use: its variant bits depend on the shapes (transposes, vec4 loads).
    PerShape,
    /// On first use, once per 16-bit type (the pipeline key's dtype), only where that type is
    /// available.
    Per16BitType,
    /// On first use, with no variant bits: kernels a training step never runs (int8).
    OnFirstUse,
}

struct KernelDef {
    file: &'static str,
    source: &'static str,
    entry: &'static str,
}

/// Defines `Kernel`, its list `Kernel::ALL`, each kernel's shader and entry point, and when it
/// is compiled — in one table, so a new kernel cannot be left out of `prepare()` by accident.
macro_rules! kernels {
    ($($(#[$doc:meta])* $name:ident => $file:literal, $source:ident, $entry:literal, $compile:ident;)+) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Kernel {
            $($(#[$doc])* $name,)+
        }

        impl Kernel {
            pub const ALL: &'static [Kernel] = &[$(Kernel::$name),+];

            /// The kernel's entry point in its shader.
            pub fn entry(self) -> &'static str {
                self.def().entry
            }

            pub const fn compile(self) -> Compile {
                match self {
                    $(Kernel::$name => Compile::$compile,)+
                }
            }

            fn def(self) -> KernelDef {
                match self {
                    $(Kernel::$name => KernelDef { file: $file, source: $source, entry: $entry },)+
                }
            }
        }
    };
}

kernels! {
    MatmulRegBlock => "matmul_regblock.wgsl", MATMUL_REGBLOCK, "main", PerShape;
    MatmulTiled => "matmul_tiled.wgsl", MATMUL_TILED, "main", PerShape;
    Relu => "elementwise.wgsl", ELEMENTWISE, "relu", AtPrepare;
    ReluBackward => "elementwise.wgsl", ELEMENTWISE, "relu_backward", AtPrepare;
    BiasAdd => "elementwise.wgsl", ELEMENTWISE, "bias_add", AtPrepare;
    Fill => "elementwise.wgsl", ELEMENTWISE, "fill", AtPrepare;
    FillBits => "elementwise.wgsl", ELEMENTWISE, "fill_bits", AtPrepare;
    Scale => "elementwise.wgsl", ELEMENTWISE, "scale", AtPrepare;
    Copy => "elementwise.wgsl", ELEMENTWISE, "copy", AtPrepare;
    AddTo => "elementwise.wgsl", ELEMENTWISE, "add_to", AtPrepare;
    SoftmaxXent => "softmax_xent.wgsl", SOFTMAX_XENT, "main", AtPrepare;
    SoftmaxXentRowwise => "softmax_xent.wgsl", SOFTMAX_XENT, "rowwise", AtPrepare;
    /// The loss step in one dispatch: `rowwise` with the loss sum and correct count.
    SoftmaxXentTotals => "softmax_xent.wgsl", SOFTMAX_XENT, "totals", OnFirstUse;
    SumCols => "reduce.wgsl", REDUCE, "sum_cols", AtPrepare;
    SumRows => "reduce.wgsl", REDUCE, "sum_rows", AtPrepare;
    /// Split reductions: partial column sums of a long matrix, then the slices added.
    SumColsPart => "reduce.wgsl", REDUCE, "sum_cols_part", AtPrepare;
    SumSlices => "reduce.wgsl", REDUCE, "sum_slices", AtPrepare;
    ArgmaxRows => "reduce.wgsl", REDUCE, "argmax_rows", AtPrepare;
    AccumulateSum => "reduce.wgsl", REDUCE, "accumulate_sum", AtPrepare;
    CountCorrect => "reduce.wgsl", REDUCE, "count_correct", AtPrepare;
    /// The three above split over workgroups for long inputs (parts, then a finish pass).
    SumRowsPart => "reduce.wgsl", REDUCE, "sum_rows_part", AtPrepare;
    AccumulatePart => "reduce.wgsl", REDUCE, "accumulate_part", AtPrepare;
    AccumulateFinish => "reduce.wgsl", REDUCE, "accumulate_finish", AtPrepare;
    CountPart => "reduce.wgsl", REDUCE, "count_part", AtPrepare;
    CountFinish => "reduce.wgsl", REDUCE, "count_finish", AtPrepare;
    Sgd => "optimizer.wgsl", OPTIMIZER, "sgd", AtPrepare;
    AdamW => "optimizer.wgsl", OPTIMIZER, "adamw", AtPrepare;
    Transpose => "transpose.wgsl", TRANSPOSE, "main", AtPrepare;
    CastTo16 => "amp.wgsl", AMP, "cast_to16", Per16BitType;
    CastToF32 => "amp.wgsl", AMP, "cast_to_f32", Per16BitType;
    SumCols16 => "amp.wgsl", AMP, "sum_cols16", Per16BitType;
    /// sum_cols16's first pass when the rows are split (then `SumSlices`).
    SumCols16Part => "amp.wgsl", AMP, "sum_cols16_part", Per16BitType;
    Transpose16 => "amp.wgsl", AMP, "transpose16", Per16BitType;
    Matmul16Out => "matmul16.wgsl", MATMUL16, "main16", Per16BitType;
    Matmul16F32 => "matmul16.wgsl", MATMUL16, "main_f32", Per16BitType;
    /// The register-blocked 16-bit GEMM (generated by matmul_gen.rs), chosen per adapter and
    /// type by tuning.rs against the plain kernel above.
    Matmul16Reg => "matmul16_regblock.wgsl", MATMUL16_REGBLOCK, "main", Per16BitType;
    /// The workgroup-tiled 16-bit GEMM (256 invocations, 64×64 blocks of C, 4×4 per
    /// invocation): the one chosen for GPUs that are not CPUs (tuning.rs `candidates`).
    Matmul16Tiled => "matmul16_tiled.wgsl", MATMUL16_TILED, "main", Per16BitType;
    /// The cooperative-matrix f16 GEMM (tensor cores): compiled only on a device opened with
    /// EXPERIMENTAL_COOPERATIVE_MATRIX and a 16×16×16 f16/f32 configuration, and only for f16.
    Matmul16Coop => "matmul16_coop.wgsl", MATMUL16_COOP, "main", Per16BitType;
    /// Mixed-precision gradient unscaling, but on f32 gradients: compiled like the others.
    UnscaleCheck => "grad_scaler.wgsl", GRAD_SCALER, "unscale_check", AtPrepare;
    ScaleByLossScale => "grad_scaler.wgsl", GRAD_SCALER, "scale_by_loss_scale", AtPrepare;
    ScalerUpdate => "grad_scaler.wgsl", GRAD_SCALER, "scaler_update", AtPrepare;
    /// The mixed-precision optimizer step that also writes the 16-bit weight copy (the formulas
    /// of the f32 step: both include optimizer_math.wgsl).
    AmpSgd => "amp_optimizer.wgsl", AMP_OPTIMIZER, "amp_sgd", Per16BitType;
    AmpAdamW => "amp_optimizer.wgsl", AMP_OPTIMIZER, "amp_adamw", Per16BitType;
    /// Multi-tensor steps (multi_optim.rs): one dispatch for up to 16 parameters, generated per
    /// slot count (the variant), so compiled on first use or by `prepare_optimizer_steps`.
    MultiSgd => "multi_optimizer.wgsl", MULTI_OPTIMIZER, "multi_step", PerShape;
    MultiAdamW => "multi_optimizer.wgsl", MULTI_OPTIMIZER, "multi_step", PerShape;
    MultiUnscale => "multi_optimizer.wgsl", MULTI_OPTIMIZER, "multi_step", PerShape;
    MultiAmpSgd => "multi_optimizer.wgsl", MULTI_OPTIMIZER, "multi_step", Per16BitType;
    MultiAmpAdamW => "multi_optimizer.wgsl", MULTI_OPTIMIZER, "multi_step", Per16BitType;
    /// Int8 quantization: compiled on first use (as I8), since f32 training never needs them.
    AbsmaxCols => "quant.wgsl", QUANT, "absmax_cols", OnFirstUse;
    AbsmaxAll => "quant.wgsl", QUANT, "absmax_all", OnFirstUse;
    /// A long absmax split over workgroups (per tensor or per column), then the slices' max.
    AbsmaxPart => "quant.wgsl", QUANT, "absmax_part", OnFirstUse;
    AbsmaxFinish => "quant.wgsl", QUANT, "absmax_finish", OnFirstUse;
    Quantize => "quant.wgsl", QUANT, "quantize", OnFirstUse;
    DequantizeI8 => "quant.wgsl", QUANT, "dequantize_i8", OnFirstUse;
    DequantizeI32 => "quant.wgsl", QUANT, "dequantize_i32", OnFirstUse;
    MatmulI8 => "matmul_i8.wgsl", MATMUL_I8, "main", PerShape;
    /// The int8 GEMM with its dequantize epilogue (scale, bias, ReLU) fused: f32 out.
    MatmulI8Dequant => "matmul_i8.wgsl", MATMUL_I8, "main_dequant", PerShape;
    /// The CNN's convolution ops: compiled on first use (the warm-up step), since an MLP never
    /// runs them.
    Im2col => "conv.wgsl", CONV, "im2col", OnFirstUse;
    Col2im => "conv.wgsl", CONV, "col2im", OnFirstUse;
    MaxPool => "conv.wgsl", CONV, "max_pool", OnFirstUse;
    MaxPoolBackward => "conv.wgsl", CONV, "max_pool_backward", OnFirstUse;
    /// im2col rounding into 16-bit columns (the mixed-precision CNN).
    Im2col16 => "conv16.wgsl", CONV16, "im2col16", Per16BitType;
}

/// How many kernels `prepare()` compiles.
const AT_PREPARE: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < Kernel::ALL.len() {
        if matches!(Kernel::ALL[i].compile(), Compile::AtPrepare) {
            n += 1;
        }
        i += 1;
    }
    n
};

impl Kernel {
    /// Every kernel compiled by `prepare()`: those of `ALL` marked `AtPrepare`, derived from
    /// the table above so none can be forgotten.
    pub const SIMPLE: [Kernel; AT_PREPARE] = {
        let mut out = [Kernel::Relu; AT_PREPARE];
        let (mut i, mut j) = (0, 0);
        while i < Kernel::ALL.len() {
            if matches!(Kernel::ALL[i].compile(), Compile::AtPrepare) {
                out[j] = Kernel::ALL[i];
                j += 1;
            }
            i += 1;
        }
        out
    };
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
        // The shaders are gpulab's own, so a missing value is gpulab's bug.
        return Err(Error::Internal(format!("shader template placeholder {} has no value", &out[pos..end])));
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

/// The WGSL the pipeline for `key` compiles: its shader with every placeholder filled.
pub(super) fn source(key: PipelineKey) -> Result<String> {
    source_wg(key, WG)
}

/// `source` with the 1-D kernels' workgroup size `wg`.
pub(super) fn source_wg(key: PipelineKey, wg: u32) -> Result<String> {
    let flag = |bit: u32| if key.variant & bit != 0 { "true" } else { "false" }.to_string();
    // The multi-tensor kernels' generated parts first: they hold placeholders of their own.
    let [b, f, m] = super::multi_optim::template_values(key);
    render(
        key.kernel.def().source,
        &[
            b,
            f,
            m,
            ("DT", key.dtype.wgsl().to_string()),
            ("WG", wg.to_string()),
            ("TA", flag(1)),
            ("TB", flag(2)),
            ("VA", flag(4)),
            ("VB", flag(8)),
            ("FLOAT16", float16_prelude(key.dtype)),
            ("IM2COL_TAP", IM2COL_TAP.to_string()),
            ("OPTIMIZER_MATH", OPTIMIZER_MATH.to_string()),
            ("MATMUL16_COMMON", MATMUL16_COMMON.to_string()),
        ],
    )
}

/// The WGSL of `kernel` for `dtype` with no variant bits (tests read its workgroup size).
#[cfg(test)]
pub fn source_of(kernel: Kernel, dtype: DType) -> Result<String> {
    source(PipelineKey { kernel, dtype, variant: 0 })
}

/// The cooperative-matrix GEMM's WGSL as its f16 pipeline compiles it (transposes `ta`, `tb`),
/// for the test that validates it with naga on machines whose adapter lacks the feature.
pub fn matmul16_coop_source(ta: bool, tb: bool) -> Result<String> {
    source(PipelineKey { kernel: Kernel::Matmul16Coop, dtype: DType::F16, variant: ta as u32 | (tb as u32) << 1 })
}

/// A compiled kernel: its pipeline, the explicit bind-group layout (binding 0, the parameter
/// block, with a dynamic offset into the recorder's one uniform buffer), the storage bindings
/// its entry point uses and its workgroup size, both read from the shader by naga.
pub struct Compiled {
    pub key: PipelineKey,
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    pub workgroup_size: [u32; 3],
}

impl Compiled {
    pub fn invocations_per_group(&self) -> u32 {
        self.workgroup_size.iter().product()
    }
}

/// What the entry point `entry` of `source` binds in group 0 — (binding, is a uniform,
/// read-only) for each global it uses — and its workgroup size.
pub fn reflect(source: &str, entry: &str) -> Result<(Vec<(u32, bool, bool)>, [u32; 3])> {
    use wgpu::naga;
    let module =
        naga::front::wgsl::parse_str(source).map_err(|e| Error::Internal(format!("shader parse: {}", e.emit_to_string(source))))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| Error::Internal(format!("shader validation: {}", e.emit_to_string(source))))?;
    let (index, ep) = module
        .entry_points
        .iter()
        .enumerate()
        .find(|(_, e)| e.name == entry)
        .ok_or_else(|| Error::Internal(format!("shader has no entry point {entry}")))?;
    let uses = info.get_entry_point(index);
    let mut bindings = Vec::new();
    for (h, var) in module.global_variables.iter() {
        let Some(b) = &var.binding else { continue };
        if b.group != 0 || uses[h].is_empty() {
            continue;
        }
        match var.space {
            naga::AddressSpace::Uniform => bindings.push((b.binding, true, true)),
            naga::AddressSpace::Storage { access } => bindings.push((b.binding, false, !access.contains(naga::StorageAccess::STORE))),
            _ => {}
        }
    }
    bindings.sort_unstable();
    Ok((bindings, ep.workgroup_size))
}

/// Appends "Kernel dtype" to `path`: scripts/driver-tests.sh checks with it that its test
/// subset compiled every kernel on each driver. Best effort: a trace is no reason to fail.
fn trace(path: &std::ffi::OsStr, key: PipelineKey) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{:?} {:?}", key.kernel, key.dtype);
    }
}

pub struct PipelineCache {
    pipelines: HashMap<PipelineKey, Arc<Compiled>>,
    /// The 1-D kernels' workgroup size on this device.
    wg: u32,
}

impl PipelineCache {
    pub fn new(wg: u32) -> Self {
        PipelineCache { pipelines: HashMap::new(), wg }
    }

    pub fn wg(&self) -> u32 {
        self.wg
    }

    #[cfg(test)]
    fn contains(&self, key: &PipelineKey) -> bool {
        self.pipelines.contains_key(key)
    }

    pub fn get(&mut self, device: &wgpu::Device, key: PipelineKey) -> Result<Arc<Compiled>> {
        if let Some(p) = self.pipelines.get(&key) {
            return Ok(p.clone());
        }
        let def = key.kernel.def();
        let source = source_wg(key, self.wg)?;
        // Refused by name before wgpu would fail on it (or a driver would silently clamp it).
        super::limits::check_pipeline(&source, def.file, def.entry, &device.limits())?;
        let (bindings, workgroup_size) = reflect(&source, def.entry)?;
        let entries: Vec<wgpu::BindGroupLayoutEntry> = bindings
            .iter()
            .map(|&(binding, uniform, read_only)| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: if uniform { wgpu::BufferBindingType::Uniform } else { wgpu::BufferBindingType::Storage { read_only } },
                    has_dynamic_offset: uniform,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(def.entry), entries: &entries });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(def.entry),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let module = device
            .create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(def.file), source: wgpu::ShaderSource::Wgsl(source.into()) });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(def.entry),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(def.entry),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(err) = pollster::block_on(scope.pop()) {
            return Err(Error::Gpu(format!("shader {} entry {} failed to compile: {err}", def.file, def.entry)));
        }
        let compiled = Arc::new(Compiled { key, pipeline, layout, workgroup_size });
        self.pipelines.insert(key, compiled.clone());
        if let Some(path) = std::env::var_os("GPULAB_TRACE_PIPELINES") {
            trace(&path, key);
        }
        Ok(compiled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::prelude::*;

    #[test]
    fn every_kernel_names_an_entry_point_of_its_shader() {
        for k in Kernel::ALL {
            let d = k.def();
            assert!(d.source.contains(&format!("fn {}(", d.entry)), "{k:?}: {} has no fn {}", d.file, d.entry);
        }
    }

    #[test]
    fn simple_is_exactly_the_kernels_compiled_at_prepare() {
        let want: Vec<Kernel> = Kernel::ALL.iter().copied().filter(|k| k.compile() == Compile::AtPrepare).collect();
        assert_eq!(Kernel::SIMPLE.to_vec(), want);
        assert!(Kernel::SIMPLE.contains(&Kernel::UnscaleCheck) && !Kernel::SIMPLE.contains(&Kernel::MatmulTiled));
    }

    /// On a real adapter (llvmpipe in CI): after `prepare()` every kernel not compiled per
    /// shape or per 16-bit type has its pipeline. Without an adapter this skips, except under
    /// GPULAB_REQUIRE_GPU=1, where it fails.
    #[test]
    fn prepare_leaves_no_kernel_uncompiled() {
        let require = std::env::var("GPULAB_REQUIRE_GPU").is_ok_and(|v| v == "1");
        let instance = super::super::adapters::instance();
        let opened = super::super::adapters::select(super::super::adapters::enumerate(&instance), &super::super::GpuSelector::Auto)
            .and_then(|(i, a)| super::super::GpuBackend::from_adapter(i, &a, None));
        let mut gpu = match opened {
            Ok(g) => g,
            Err(e) => {
                assert!(!require, "GPULAB_REQUIRE_GPU=1 but no GPU backend could be opened: {e}");
                eprintln!("SKIPPED prepare_leaves_no_kernel_uncompiled: no GPU adapter ({e})");
                return;
            }
        };
        gpu.prepare().unwrap();
        for &k in Kernel::ALL.iter().filter(|k| k.compile() == Compile::AtPrepare) {
            assert!(
                gpu.pipelines.contains(&PipelineKey { kernel: k, dtype: DType::F32, variant: 0 }),
                "{k:?} was not compiled by prepare()"
            );
        }
    }
}
