//! The CPU backend: the reference for every op and a serious baseline — GEMM from the `gemm`
//! crate (packed, SIMD, multi-threaded), rayon for the element-wise work on large tensors, and
//! an int8 GEMM with AVX-512 VNNI where the CPU has it (quant.rs, gemm_i8.rs), a bf16 GEMM
//! with AVX-512 BF16 where the CPU has it (gemm_bf16.rs).

mod amp;
mod conv;
mod conv_direct;
mod core;
mod drive;
mod gemm_bf16;
mod gemm_bf16_narrow;
mod gemm_i8;
mod lanes;
mod ops;
mod optim;
mod pairs;
mod quant;
mod tensor;

use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::tensor::{
    AmpOps, BackendBase, BackendInfo, BackendKind, DType, Epilogue, Ledger, MemCategory, MemoryReport, Shape, SharedLedger, Telemetry,
    TensorMeta, checks, memory_lock,
};

pub use drive::drive;
pub use gemm_bf16::{Bf16Path, f16_path_name};
pub use ops::PAR_THRESHOLD;
/// The optimizer steps' arithmetic on host slices (optim.rs, the one CPU definition of each):
/// exercise 6's sharded step (ZeRO-1) runs each replica's part of the update through the very
/// function the full step uses, so its bits match.
pub use optim::{adamw as adamw_host, sgd as sgd_host};
pub use tensor::CpuTensor;
pub(crate) use tensor::Storage;

pub struct CpuBackend {
    ledger: SharedLedger,
    threads: usize,
    /// The int8 GEMM kernel: VNNI where the CPU has it (detected once), else portable.
    i8_path: gemm_i8::I8Path,
    /// The bf16 matmul16 kernel: AVX-512 BF16 where the CPU has it (detected once), else widen.
    bf16_path: Bf16Path,
}

impl CpuBackend {
    pub fn new() -> Self {
        Self::with_budget(None)
    }

    /// A CPU backend whose ledger refuses allocations beyond `budget` bytes.
    pub fn with_budget(budget: Option<u64>) -> Self {
        CpuBackend {
            ledger: Arc::new(Mutex::new(Ledger::with_budget(budget))),
            threads: rayon::current_num_threads(),
            i8_path: gemm_i8::I8Path::detect(),
            bf16_path: Bf16Path::detect(),
        }
    }

    /// The kernel bf16 operands of `matmul16` go through.
    pub fn bf16_path(&self) -> Bf16Path {
        self.bf16_path
    }

    /// Multiplies bf16 operands through `path` instead of the fastest one (tests and benchmarks
    /// compare them); a path this CPU lacks gives the widening one.
    pub fn with_bf16_path(mut self, path: Bf16Path) -> Self {
        self.bf16_path = if path.available() { path } else { Bf16Path::Widen };
        self
    }

    /// Reserves the bytes first and only then builds the storage (`make`), so a refused
    /// allocation costs nothing and leaves nothing behind (the batch-sweep budget refuses on
    /// purpose, many times).
    fn alloc(&mut self, shape: Shape, dtype: DType, cat: MemCategory, make: impl FnOnce() -> Storage) -> Result<CpuTensor> {
        let bytes = checks::bytes("alloc", shape, dtype)?;
        memory_lock(&self.ledger).reserve(cat, bytes)?;
        let t = CpuTensor { data: make(), shape, cat, ledger: self.ledger.clone(), packed: Default::default() };
        debug_assert_eq!(t.dtype(), dtype, "storage built for the reserved dtype");
        Ok(t)
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// The CPU's model name, as the OS reports it.
pub fn cpu_name() -> String {
    // Through the bounded reader, like every file gpulab reads (a big machine's is ~1 MiB).
    crate::fsutil::read_text_limited(std::path::Path::new("/proc/cpuinfo"), 16 * crate::fsutil::MIB)
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|s| s.trim().to_string()))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

impl BackendBase for CpuBackend {
    type Tensor = CpuTensor;

    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: BackendKind::Cpu,
            name: format!("{} ({} threads)", cpu_name(), self.threads),
            api: "native".into(),
            driver: format!("gemm 0.19 + rayon; bf16 matmul: {}", self.bf16_path.name()),
            device_type: "Cpu".into(),
            software: false,
            timestamps: false,
        }
    }
}

use crate::tensor::scaler::{AmpOptimizer, ScalerRule};

impl AmpOps for CpuBackend {
    fn amp_unavailable(&self, dtype: DType) -> Option<String> {
        amp::unavailable(dtype)
    }

    fn cast(&mut self, x: &CpuTensor, out: &mut CpuTensor, stats: Option<&mut CpuTensor>) -> Result<()> {
        amp::cast(x, out, stats)
    }

    fn matmul16(
        &mut self,
        a: &CpuTensor,
        b: &CpuTensor,
        c: &mut CpuTensor,
        ta: bool,
        tb: bool,
        epi: Epilogue<'_, CpuTensor>,
        stats: Option<&mut CpuTensor>,
    ) -> Result<()> {
        amp::matmul16(a, b, c, ta, tb, epi, stats, self.threads, self.bf16_path)
    }

    fn scale_by_loss_scale(&mut self, g: &mut CpuTensor, state: &CpuTensor) -> Result<()> {
        amp::scale_by_loss_scale(g, state)
    }

    fn unscale_check(&mut self, g: &mut CpuTensor, state: &mut CpuTensor) -> Result<()> {
        amp::unscale_check(g, state)
    }

    fn amp_update(
        &mut self,
        p: &mut CpuTensor,
        g: &CpuTensor,
        slots: &mut [CpuTensor],
        opt: AmpOptimizer<'_, CpuTensor>,
        state: &CpuTensor,
        w16: Option<&mut CpuTensor>,
    ) -> Result<()> {
        amp::amp_update(p, g, slots, opt, state, w16)
    }

    fn scaler_update(&mut self, state: &mut CpuTensor, rule: ScalerRule, log: &mut CpuTensor, slot: usize) -> Result<()> {
        amp::scaler_update(state, rule, log, slot)
    }
}

impl Telemetry for CpuBackend {
    fn take_busy_seconds(&mut self) -> Result<Option<f64>> {
        Ok(None)
    }

    fn memory(&self) -> MemoryReport {
        memory_lock(&self.ledger).report()
    }

    fn reset_memory_peaks(&mut self) {
        memory_lock(&self.ledger).reset_peaks();
    }
}
