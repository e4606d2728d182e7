//! The CUDA kernels: shaders/cuda/{core,amp,conv,quant}.cu, each file compiled by NVRTC the first time one
//! of its kernels runs and cached on disk (the PTX text, through `cache.rs`) per GPU, driver and
//! source hash, so later runs skip NVRTC and only the driver's PTX→SASS step remains (which the
//! driver caches itself).

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{CompileOptions, Ptx};

use crate::cache::{CacheKey, DiskCache};
use crate::error::{Error, Result};
use crate::tensor::BackendInfo;

/// The source files, in `Kernel::source` order; amp.cu, conv.cu and quant.cu each behind
/// float16.cuh (the types and the 16-bit rounding), core.cu and amp.cu behind optimizer.cuh (the
/// optimizer formulas both update with), as NVRTC compiles one text per module.
const SOURCES: [(&str, &str); 4] = [
    ("core.cu", concat!(include_str!("../../../../../shaders/cuda/optimizer.cuh"), include_str!("../../../../../shaders/cuda/core.cu"))),
    (
        "amp.cu",
        concat!(
            include_str!("../../../../../shaders/cuda/float16.cuh"),
            include_str!("../../../../../shaders/cuda/optimizer.cuh"),
            include_str!("../../../../../shaders/cuda/amp.cu")
        ),
    ),
    ("conv.cu", concat!(include_str!("../../../../../shaders/cuda/float16.cuh"), include_str!("../../../../../shaders/cuda/conv.cu"))),
    ("quant.cu", concat!(include_str!("../../../../../shaders/cuda/float16.cuh"), include_str!("../../../../../shaders/cuda/quant.cu"))),
];
/// quant.cu's source index: compiled for compute capability 6.1 where the GPU has it, so the
/// int8 GEMM's `dot4` is the dp4a instruction (the default target predates it).
const QUANT_SOURCE: usize = 3;
/// Threads of the single-block reductions (REDUCE_THREADS in core.cu).
pub(super) const REDUCE_THREADS: u32 = 256;

/// Every kernel, named as its `extern "C"` entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    BiasAdd,
    Relu,
    ReluBackward,
    Scale,
    FillU32,
    FillU16,
    SgdStep,
    AdamwStep,
    SoftmaxXent,
    SumCols,
    SumRows,
    ArgmaxRows,
    AccumulateSum,
    CountCorrect,
    CastTo16,
    CastFrom16,
    Epilogue16,
    UnscaleCheck,
    SumCols16,
    ScaleByLossScale,
    AmpUpdate,
    ScalerUpdate,
    Im2col,
    Im2col16,
    Col2im,
    MaxPool,
    MaxPoolBackward,
    AbsmaxCols,
    AbsmaxAll,
    Quantize,
    DequantizeI8,
    DequantizeI32,
    MatmulI8,
}

impl Kernel {
    pub const ALL: [Kernel; 33] = [
        Kernel::BiasAdd,
        Kernel::Relu,
        Kernel::ReluBackward,
        Kernel::Scale,
        Kernel::FillU32,
        Kernel::FillU16,
        Kernel::SgdStep,
        Kernel::AdamwStep,
        Kernel::SoftmaxXent,
        Kernel::SumCols,
        Kernel::SumRows,
        Kernel::ArgmaxRows,
        Kernel::AccumulateSum,
        Kernel::CountCorrect,
        Kernel::CastTo16,
        Kernel::CastFrom16,
        Kernel::Epilogue16,
        Kernel::UnscaleCheck,
        Kernel::SumCols16,
        Kernel::ScaleByLossScale,
        Kernel::AmpUpdate,
        Kernel::ScalerUpdate,
        Kernel::Im2col,
        Kernel::Im2col16,
        Kernel::Col2im,
        Kernel::MaxPool,
        Kernel::MaxPoolBackward,
        Kernel::AbsmaxCols,
        Kernel::AbsmaxAll,
        Kernel::Quantize,
        Kernel::DequantizeI8,
        Kernel::DequantizeI32,
        Kernel::MatmulI8,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::BiasAdd => "bias_add",
            Kernel::Relu => "relu",
            Kernel::ReluBackward => "relu_backward",
            Kernel::Scale => "scale",
            Kernel::FillU32 => "fill_u32",
            Kernel::FillU16 => "fill_u16",
            Kernel::SgdStep => "sgd_step",
            Kernel::AdamwStep => "adamw_step",
            Kernel::SoftmaxXent => "softmax_xent",
            Kernel::SumCols => "sum_cols",
            Kernel::SumRows => "sum_rows",
            Kernel::ArgmaxRows => "argmax_rows",
            Kernel::AccumulateSum => "accumulate_sum",
            Kernel::CountCorrect => "count_correct",
            Kernel::CastTo16 => "cast_to16",
            Kernel::CastFrom16 => "cast_from16",
            Kernel::Epilogue16 => "epilogue16",
            Kernel::UnscaleCheck => "unscale_check",
            Kernel::SumCols16 => "sum_cols16",
            Kernel::ScaleByLossScale => "scale_by_loss_scale",
            Kernel::AmpUpdate => "amp_update",
            Kernel::ScalerUpdate => "scaler_update",
            Kernel::Im2col => "im2col",
            Kernel::Im2col16 => "im2col16",
            Kernel::Col2im => "col2im",
            Kernel::MaxPool => "max_pool",
            Kernel::MaxPoolBackward => "max_pool_backward",
            Kernel::AbsmaxCols => "absmax_cols",
            Kernel::AbsmaxAll => "absmax_all",
            Kernel::Quantize => "quantize",
            Kernel::DequantizeI8 => "dequantize_i8",
            Kernel::DequantizeI32 => "dequantize_i32",
            Kernel::MatmulI8 => "matmul_i8",
        }
    }

    /// Which of `SOURCES` holds it: amp.cu for the mixed-precision family, conv.cu for the
    /// convolution ops, quant.cu for int8, else core.cu.
    fn source(self) -> usize {
        match self {
            Kernel::CastTo16
            | Kernel::CastFrom16
            | Kernel::Epilogue16
            | Kernel::UnscaleCheck
            | Kernel::SumCols16
            | Kernel::ScaleByLossScale
            | Kernel::AmpUpdate
            | Kernel::ScalerUpdate => 1,
            Kernel::Im2col | Kernel::Im2col16 | Kernel::Col2im | Kernel::MaxPool | Kernel::MaxPoolBackward => 2,
            Kernel::AbsmaxCols | Kernel::AbsmaxAll | Kernel::Quantize | Kernel::DequantizeI8 | Kernel::DequantizeI32 | Kernel::MatmulI8 => {
                QUANT_SOURCE
            }
            _ => 0,
        }
    }
}

/// The modules, each compiled on first use, and each function loaded from them once.
pub struct Kernels {
    cc: (i32, i32),
    cache_keys: [CacheKey; SOURCES.len()],
    modules: [Option<Arc<CudaModule>>; SOURCES.len()],
    functions: [Option<CudaFunction>; Kernel::ALL.len()],
}

impl Kernels {
    pub fn new(info: &BackendInfo, (major, minor): (i32, i32)) -> Self {
        let key = |(file, src): (&str, &str)| {
            CacheKey::new(&format!("cuda-ptx {file} crc32 {:08x} sm_{major}{minor}", crc32fast::hash(src.as_bytes())), info)
        };
        Kernels { cc: (major, minor), cache_keys: SOURCES.map(key), modules: Default::default(), functions: std::array::from_fn(|_| None) }
    }

    pub fn function(&mut self, ctx: &Arc<CudaContext>, k: Kernel) -> Result<CudaFunction> {
        let i = Kernel::ALL.iter().position(|&x| x == k).unwrap_or(0);
        if let Some(f) = &self.functions[i] {
            return Ok(f.clone());
        }
        let src = k.source();
        let module = match &self.modules[src] {
            Some(m) => m.clone(),
            None => {
                let load = |ptx: String| {
                    ctx.load_module(Ptx::from_src(ptx)).map_err(|e| super::backend::driver("loading the compiled CUDA kernels", e))
                };
                let m = match self.cached_ptx(src) {
                    // A cached PTX the driver refuses (damaged file) is compiled again.
                    Some(ptx) => load(ptx).or_else(|_| load(self.compile(src)?))?,
                    None => load(self.compile(src)?)?,
                };
                self.modules[src] = Some(m.clone());
                m
            }
        };
        let f = module.load_function(k.name()).map_err(|e| super::backend::driver(k.name(), e))?;
        self.functions[i] = Some(f.clone());
        Ok(f)
    }

    fn cached_ptx(&self, src: usize) -> Option<String> {
        DiskCache::named("cuda-kernels.json")?.get::<String>(&self.cache_keys[src])
    }

    /// Compiles one source with NVRTC and caches the PTX (an unwritable cache only means
    /// compiling again next time).
    fn compile(&self, src: usize) -> Result<String> {
        // SAFETY: only tries to open the library by name.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(Error::CudaUnavailable(
                "NVRTC (libnvrtc.so.12), which compiles gpulab's CUDA kernels, was not found; install it (NVIDIA's cuda-nvrtc package) and make it visible on LD_LIBRARY_PATH".into(),
            ));
        }
        let (file, code) = SOURCES[src];
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(code, options(src, self.cc))
            .map_err(|e| Error::Internal(format!("NVRTC could not compile shaders/cuda/{file}: {e}")))?
            .to_src();
        if let Some(c) = DiskCache::named("cuda-kernels.json") {
            let _ = c.put(&self.cache_keys[src], &ptx);
        }
        Ok(ptx)
    }
}

/// NVRTC's options for source `src` on a GPU of compute capability `cc`.
fn options(src: usize, cc: (i32, i32)) -> CompileOptions {
    let options = if src == QUANT_SOURCE && cc >= (6, 1) { vec!["--gpu-architecture=compute_61".to_string()] } else { Vec::new() };
    CompileOptions { name: Some(SOURCES[src].0.into()), options, ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both sources compile with the NVRTC found on this machine and define every kernel the
    /// table names. Needs only NVRTC (no GPU, no driver); without it the test says so and passes
    /// unless GPULAB_REQUIRE_CUDA=1.
    #[test]
    fn every_cuda_kernel_compiles_with_nvrtc() {
        // SAFETY: only tries to open the library by name.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            assert!(
                std::env::var("GPULAB_REQUIRE_CUDA").map_or(true, |v| v != "1"),
                "GPULAB_REQUIRE_CUDA=1 but NVRTC (libnvrtc.so.12) was not found"
            );
            eprintln!("SKIPPED every_cuda_kernel_compiles_with_nvrtc: NVRTC (libnvrtc.so.12) was not found");
            return;
        }
        // A GPU before and after dp4a (compute capability 6.1): quant.cu compiles both ways.
        for cc in [(5, 2), (9, 0)] {
            for (i, (file, code)) in SOURCES.iter().enumerate() {
                let ptx = cudarc::nvrtc::compile_ptx_with_opts(code, options(i, cc))
                    .unwrap_or_else(|e| panic!("{file} for sm_{}{}: {e}", cc.0, cc.1))
                    .to_src();
                for k in Kernel::ALL.iter().filter(|k| k.source() == i) {
                    assert!(
                        ptx.lines().any(|l| l.starts_with(".visible .entry") && l.contains(&format!(" {}(", k.name()))),
                        "{file} defines no kernel {}",
                        k.name()
                    );
                }
                if i == QUANT_SOURCE && cc >= (6, 1) {
                    assert!(ptx.contains("dp4a"), "quant.cu for sm_{}{} does not use dp4a", cc.0, cc.1);
                }
            }
        }
    }
}
