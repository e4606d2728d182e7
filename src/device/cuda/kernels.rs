//! The CUDA kernels: shaders/cuda/core.cu, compiled by NVRTC the first time a kernel runs and
//! cached on disk (the PTX text, through `cache.rs`) per GPU, driver and source hash, so later
//! runs skip NVRTC and only the driver's PTX→SASS step remains (which the driver caches itself).

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{CompileOptions, Ptx};

use crate::cache::{CacheKey, DiskCache};
use crate::error::{Error, Result};
use crate::tensor::BackendInfo;

const CORE_CU: &str = include_str!("../../../shaders/cuda/core.cu");
/// Threads of the single-block reductions (REDUCE_THREADS in core.cu).
pub(super) const REDUCE_THREADS: u32 = 256;

/// Every kernel of core.cu, named as its `extern "C"` entry point.
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
}

impl Kernel {
    pub const ALL: [Kernel; 14] = [
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
        }
    }
}

/// The module, compiled on first use, and each function loaded from it once.
pub struct Kernels {
    cache_key: CacheKey,
    module: Option<Arc<CudaModule>>,
    functions: [Option<CudaFunction>; Kernel::ALL.len()],
}

impl Kernels {
    pub fn new(info: &BackendInfo, (major, minor): (i32, i32)) -> Self {
        let kind = format!("cuda-ptx core.cu crc32 {:08x} sm_{major}{minor}", crc32fast::hash(CORE_CU.as_bytes()));
        Kernels { cache_key: CacheKey::new(&kind, info), module: None, functions: Default::default() }
    }

    pub fn function(&mut self, ctx: &Arc<CudaContext>, k: Kernel) -> Result<CudaFunction> {
        let i = Kernel::ALL.iter().position(|&x| x == k).unwrap_or(0);
        if let Some(f) = &self.functions[i] {
            return Ok(f.clone());
        }
        let module = match &self.module {
            Some(m) => m.clone(),
            None => {
                let m = ctx.load_module(Ptx::from_src(self.ptx()?)).map_err(|e| super::backend::driver("loading the compiled CUDA kernels", e))?;
                self.module = Some(m.clone());
                m
            }
        };
        let f = module.load_function(k.name()).map_err(|e| super::backend::driver(k.name(), e))?;
        self.functions[i] = Some(f.clone());
        Ok(f)
    }

    /// The PTX of core.cu: from the disk cache, else compiled by NVRTC (and cached).
    fn ptx(&self) -> Result<String> {
        let cache = DiskCache::named("cuda-kernels.json");
        if let Some(ptx) = cache.as_ref().and_then(|c| c.get::<String>(&self.cache_key)) {
            return Ok(ptx);
        }
        // SAFETY: only tries to open the library by name.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(Error::CudaUnavailable(
                "NVRTC (libnvrtc.so.12), which compiles gpulab's CUDA kernels, was not found; install it (NVIDIA's cuda-nvrtc package) and make it visible on LD_LIBRARY_PATH".into(),
            ));
        }
        let opts = CompileOptions { name: Some("core.cu".into()), ..Default::default() };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(CORE_CU, opts).map_err(|e| Error::Internal(format!("NVRTC could not compile shaders/cuda/core.cu: {e}")))?.to_src();
        if let Some(c) = cache {
            let _ = c.put(&self.cache_key, &ptx); // an unwritable cache only means compiling again
        }
        Ok(ptx)
    }
}
