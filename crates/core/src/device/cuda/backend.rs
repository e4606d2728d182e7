//! The CUDA backend: one context and one stream on an NVIDIA GPU, tensors as raw device bytes
//! recorded in the same memory ledger as every backend, kernels from shaders/cuda (kernels.rs),
//! GEMM through cuBLAS (blas.rs), and GPU busy time from CUDA events around each step.
//!
//! Memory: tensors are allocated with `cuMemAllocAsync` from the device's default memory pool,
//! told here to keep freed blocks (release threshold = max), so the driver's pool is the
//! caching allocator: a step that frees and allocates the same sizes does not call the OS.

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DriverError, sys};

use super::blas::Blas;
use super::kernels::Kernels;
use crate::error::{Error, Result};
use crate::tensor::{
    BackendBase, BackendInfo, BackendKind, DType, Ledger, MemCategory, MemoryReport, Shape, SharedLedger, Telemetry, TensorMeta, checks,
    memory_lock,
};

/// The oldest driver accepted: the bindings are built for the CUDA 12.8 API (`cuda-12080`),
/// and stream-ordered allocation needs 11.2; older 12.x drivers work for what is used here.
const MIN_DRIVER: i32 = 12000;

pub struct CudaBackend {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    /// Boxed: it is the largest part, and the engine enum holds the backend inline.
    pub(super) kernels: Box<Kernels>,
    pub(super) blas: Blas,
    /// Compute capability (major, minor).
    pub(super) cc: (i32, i32),
    ledger: SharedLedger,
    info: BackendInfo,
    /// The event recorded before the first op since the last `flush`, and the (start, end)
    /// pairs of the flushed steps not yet summed by `take_busy_seconds`.
    step_start: Option<CudaEvent>,
    spans: Vec<(CudaEvent, CudaEvent)>,
    busy_folded_s: f64,
}

/// A CUDA tensor: device bytes (at least one, so an empty tensor is a valid pointer), its
/// shape and dtype, and its bytes returned to the ledger on drop.
pub struct CudaTensor {
    pub(super) buf: CudaSlice<u8>,
    shape: Shape,
    dtype: DType,
    cat: MemCategory,
    bytes: u64,
    ledger: SharedLedger,
}

impl std::fmt::Debug for CudaTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaTensor({:?} {}, {})", self.shape, self.dtype.name(), self.cat.name())
    }
}

impl CudaTensor {
    pub(super) fn numel_u64(&self) -> u64 {
        (self.shape[0] * self.shape[1]) as u64
    }
    pub(super) fn bytes(&self) -> usize {
        self.bytes as usize
    }
}

impl TensorMeta for CudaTensor {
    fn shape(&self) -> Shape {
        self.shape
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
}

impl Drop for CudaTensor {
    fn drop(&mut self) {
        memory_lock(&self.ledger).release(self.cat, self.bytes);
    }
}

/// A driver error as the lab's error, naming what was being done.
pub(super) fn driver(what: &str, e: DriverError) -> Error {
    Error::CudaUnavailable(format!("{what} failed: {e}"))
}

/// Whether this machine has a usable CUDA device; the answer (checked once per process) is
/// "name, driver" or why not. Never panics: each library is looked for before it is loaded.
pub fn probe() -> Result<String> {
    static PROBE: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            check_libraries()?;
            let ctx = CudaContext::new(0).map_err(|e| format!("no CUDA device 0: {e}"))?;
            let name = ctx.name().map_err(|e| e.to_string())?;
            Ok(format!("{name}, {}", driver_label()?))
        })
        .clone()
        .map_err(Error::CudaUnavailable)
}

/// The driver library (libcuda) and cuBLAS must be present before cudarc touches them (it
/// panics on a missing library); NVRTC is checked when a kernel is first compiled.
fn check_libraries() -> std::result::Result<(), String> {
    // SAFETY: these only try to open the shared libraries by name (libloading).
    if !unsafe { sys::is_culib_present() } {
        return Err("no NVIDIA driver library (libcuda.so) was found; install the NVIDIA driver, or use --backend gpu".into());
    }
    let version = driver_version()?;
    if version < MIN_DRIVER {
        return Err(format!(
            "the NVIDIA driver supports CUDA {} but gpulab needs {} or newer; update the driver",
            cuda_version(version),
            cuda_version(MIN_DRIVER)
        ));
    }
    if !unsafe { cudarc::cublas::sys::is_culib_present() } || !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
        return Err("cuBLAS (libcublas.so.12 / libcublasLt.so.12) was not found; install it (Debian: apt-get install libcublas12, or NVIDIA's cuda-libraries package) and make it visible on LD_LIBRARY_PATH".into());
    }
    Ok(())
}

fn driver_version() -> std::result::Result<i32, String> {
    let mut v = 0i32;
    // SAFETY: libcuda is present (checked by the caller); cuInit precedes any other call.
    unsafe {
        cudarc::driver::result::init().map_err(|e| format!("the NVIDIA driver did not initialise: {e}"))?;
        sys::cuDriverGetVersion(&mut v).result().map_err(|e| format!("cuDriverGetVersion: {e}"))?;
    }
    Ok(v)
}

fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn driver_label() -> std::result::Result<String, String> {
    Ok(format!("CUDA driver {}", cuda_version(driver_version()?)))
}

/// Opens CUDA device `ordinal`; `budget` caps the ledger like on every backend.
pub fn open(ordinal: usize, budget: Option<u64>) -> Result<CudaBackend> {
    check_libraries().map_err(Error::CudaUnavailable)?;
    let count = CudaContext::device_count().map_err(|e| driver("counting CUDA devices", e))?;
    if ordinal >= count.max(0) as usize {
        return Err(Error::CudaUnavailable(format!(
            "cuda:{ordinal} does not exist: this machine has {count} CUDA device(s), numbered from 0"
        )));
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| driver("creating the CUDA context", e))?;
    // One stream: every op is ordered on it, so cudarc's per-buffer event tracking is not needed.
    // SAFETY: no buffer of this context exists yet, and the backend uses a single stream.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().map_err(|e| driver("creating a CUDA stream", e))?;
    keep_freed_blocks(&ctx);
    let (major, minor) = ctx.compute_capability().map_err(|e| driver("reading the compute capability", e))?;
    let name = ctx.name().map_err(|e| driver("reading the device name", e))?;
    let info = BackendInfo {
        kind: BackendKind::Cuda,
        name,
        api: "CUDA".into(),
        driver: format!("{} (compute capability {major}.{minor})", driver_label().map_err(Error::CudaUnavailable)?),
        device_type: "DiscreteGpu".into(),
        software: false,
        timestamps: true,
    };
    let blas = Blas::new(stream.clone())?;
    Ok(CudaBackend {
        kernels: Box::new(Kernels::new(&info, (major, minor))),
        ctx,
        stream,
        blas,
        cc: (major, minor),
        ledger: Arc::new(Mutex::new(Ledger::with_budget(budget))),
        info,
        step_start: None,
        spans: Vec::new(),
        busy_folded_s: 0.0,
    })
}

/// Tells the device's default memory pool to keep freed blocks for reuse instead of returning
/// them at each synchronisation. Where the device has no pools this does nothing (allocations
/// then go to cuMemAlloc directly).
fn keep_freed_blocks(ctx: &CudaContext) {
    if !ctx.has_async_alloc() {
        return;
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut threshold = u64::MAX;
    // SAFETY: the device handle is the context's; the attribute takes a u64 by pointer.
    unsafe {
        if sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()).result().is_ok() {
            let _ = sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut threshold as *mut u64 as *mut std::ffi::c_void,
            );
        }
    }
}

impl CudaBackend {
    /// Turns TF32 tensor-core math on or off for f32 GEMM (off by default: results then match
    /// the CPU to f32 rounding; TF32 keeps 10 mantissa bits of each input).
    pub fn set_tf32(&mut self, on: bool) {
        self.blas.tf32 = on;
    }

    pub fn tf32(&self) -> bool {
        self.blas.tf32
    }

    /// Reserves the bytes in the ledger first, then allocates (uninitialised) device memory.
    pub(super) fn alloc(&mut self, shape: Shape, dtype: DType, cat: MemCategory) -> Result<CudaTensor> {
        let bytes = checks::bytes("alloc", shape, dtype)?;
        memory_lock(&self.ledger).reserve(cat, bytes)?;
        // SAFETY: every constructor writes the buffer (zeros, upload) before it is read.
        let buf = unsafe { self.stream.alloc::<u8>((bytes as usize).max(1)) };
        match buf {
            Ok(buf) => Ok(CudaTensor { buf, shape, dtype, cat, bytes, ledger: self.ledger.clone() }),
            Err(e) => {
                memory_lock(&self.ledger).release(cat, bytes);
                if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                    Err(Error::DeviceOutOfMemory { category: cat.name().into(), bytes, detail: e.to_string() })
                } else {
                    Err(driver("allocating device memory", e))
                }
            }
        }
    }

    /// A tensor's device address as a kernel argument (0, a null pointer, for None): for the
    /// kernels whose pointer arguments are optional. One stream orders every use.
    pub(super) fn ptr(&self, t: Option<&CudaTensor>) -> u64 {
        use cudarc::driver::DevicePtr;
        t.map_or(0, |t| t.buf.device_ptr(&self.stream).0)
    }

    /// Records the start of a step's GPU work before its first op.
    pub(super) fn mark_start(&mut self) -> Result<()> {
        if self.step_start.is_none() {
            let ev = self.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| driver("creating a CUDA event", e))?;
            ev.record(&self.stream).map_err(|e| driver("recording a CUDA event", e))?;
            self.step_start = Some(ev);
        }
        Ok(())
    }

    /// Ends the step's span (its end event) for `take_busy_seconds`.
    pub(super) fn end_span(&mut self) -> Result<()> {
        if let Some(start) = self.step_start.take() {
            let end = self.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| driver("creating a CUDA event", e))?;
            end.record(&self.stream).map_err(|e| driver("recording a CUDA event", e))?;
            self.spans.push((start, end));
            if self.spans.len() >= 4096 {
                self.busy_folded_s += self.sum_spans()?; // bounded: never more than 4096 pairs held
            }
        }
        Ok(())
    }

    fn sum_spans(&mut self) -> Result<f64> {
        let mut total = 0.0;
        for (a, b) in self.spans.drain(..) {
            b.synchronize().map_err(|e| driver("waiting for a CUDA event", e))?;
            total += a.elapsed_ms(&b).map_err(|e| driver("reading a CUDA event's time", e))? as f64 / 1e3;
        }
        Ok(total)
    }
}

impl BackendBase for CudaBackend {
    type Tensor = CudaTensor;

    fn info(&self) -> BackendInfo {
        self.info.clone()
    }
}

impl Telemetry for CudaBackend {
    /// The sum of each flushed step's span between two CUDA events (first op → flush).
    fn take_busy_seconds(&mut self) -> Result<Option<f64>> {
        self.end_span()?;
        let s = self.sum_spans()? + std::mem::take(&mut self.busy_folded_s);
        Ok(Some(s))
    }

    fn memory(&self) -> MemoryReport {
        memory_lock(&self.ledger).report()
    }

    fn reset_memory_peaks(&mut self) {
        memory_lock(&self.ledger).reset_peaks();
    }
}
