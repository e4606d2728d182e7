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

/// The source files, indexed by `CORE`, `AMP`, `CONV` and `QUANT`; amp.cu, conv.cu and quant.cu
/// each behind float16.cuh (the types and the 16-bit rounding), core.cu and amp.cu behind
/// optimizer.cuh (the optimizer formulas both update with), as NVRTC compiles one text per module.
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
const CORE: usize = 0;
const AMP: usize = 1;
const CONV: usize = 2;
/// quant.cu: compiled for compute capability 6.1 where the GPU has it, so the int8 GEMM's `dot4`
/// is the dp4a instruction (the default target predates it).
const QUANT: usize = 3;
/// Threads of the single-block reductions (REDUCE_THREADS in core.cu).
pub(super) const REDUCE_THREADS: u32 = 256;

/// The kernel table: each kernel once, under the source that defines it, with its `extern "C"`
/// entry point. Makes `Kernel`, `Kernel::ALL` (in table order), `name` and `source`.
macro_rules! kernels {
    ($($source:ident => [$($kernel:ident = $entry:literal),+ $(,)?]),+ $(,)?) => {
        /// Every kernel, named as its `extern "C"` entry point.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Kernel {
            $($($kernel,)+)+
        }

        impl Kernel {
            pub const ALL: [Kernel; [$($(stringify!($kernel),)+)+].len()] = [$($(Kernel::$kernel,)+)+];

            pub fn name(self) -> &'static str {
                match self {
                    $($(Kernel::$kernel => $entry,)+)+
                }
            }

            /// Which of `SOURCES` defines it.
            fn source(self) -> usize {
                match self {
                    $($(Kernel::$kernel => $source,)+)+
                }
            }
        }
    };
}

kernels! {
    CORE => [
        BiasAdd = "bias_add",
        Relu = "relu",
        ReluBackward = "relu_backward",
        Scale = "scale",
        AddTo = "add_to",
        FillU32 = "fill_u32",
        FillU16 = "fill_u16",
        SgdStep = "sgd_step",
        AdamwStep = "adamw_step",
        SoftmaxXent = "softmax_xent",
        SumCols = "sum_cols",
        SumRows = "sum_rows",
        ArgmaxRows = "argmax_rows",
        AccumulateSum = "accumulate_sum",
        CountCorrect = "count_correct",
    ],
    AMP => [
        CastTo16 = "cast_to16",
        CastFrom16 = "cast_from16",
        Epilogue16 = "epilogue16",
        UnscaleCheck = "unscale_check",
        SumCols16 = "sum_cols16",
        ScaleByLossScale = "scale_by_loss_scale",
        AmpUpdate = "amp_update",
        ScalerUpdate = "scaler_update",
    ],
    CONV => [
        Im2col = "im2col",
        Im2col16 = "im2col16",
        Col2im = "col2im",
        MaxPool = "max_pool",
        MaxPoolBackward = "max_pool_backward",
    ],
    QUANT => [
        AbsmaxCols = "absmax_cols",
        AbsmaxAll = "absmax_all",
        Quantize = "quantize",
        DequantizeI8 = "dequantize_i8",
        DequantizeI32 = "dequantize_i32",
        MatmulI8 = "matmul_i8",
    ],
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
        // The enum's discriminants are its positions in `ALL`.
        let i = k as usize;
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
    let options = if src == QUANT && cc >= (6, 1) { vec!["--gpu-architecture=compute_61".to_string()] } else { Vec::new() };
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
                if i == QUANT && cc >= (6, 1) {
                    assert!(ptx.contains("dp4a"), "quant.cu for sm_{}{} does not use dp4a", cc.0, cc.1);
                }
            }
        }
    }
}
