//! A build without the `cuda` feature: `Device::Cuda` and `Engine::Cuda` still exist (candle's
//! dummy backend pattern): `CudaBackend` is uninhabited, so every `match` over engines and
//! `with_backend!` are written once, and opening it explains what is missing instead of a `cfg`
//! error somewhere above.

use crate::error::{Error, Result};
use crate::tensor::{AdamW, Sgd};
use crate::tensor::{AmpOps, BackendBase, BackendInfo, CoreOps, DType, MemCategory, MemoryReport, QuantOps, Shape, Telemetry, TensorMeta};

/// The CUDA backend: no value of it can exist yet, so none of its methods can be called.
pub enum CudaBackend {}

/// A CUDA tensor (uninhabited, like its backend).
#[derive(Debug)]
pub enum CudaTensor {}

pub fn open(_ordinal: usize, _budget: Option<u64>) -> Result<CudaBackend> {
    Err(Error::CudaNotBuilt)
}

impl CudaBackend {
    /// TF32 tensor-core math for f32 GEMM (see the CUDA build).
    pub fn set_tf32(&mut self, _on: bool) {
        match *self {}
    }

    pub fn tf32(&self) -> bool {
        match *self {}
    }
}

/// What CUDA device this machine offers: never one in a build without the feature.
pub fn probe() -> Result<String> {
    Err(Error::CudaNotBuilt)
}

impl TensorMeta for CudaTensor {
    fn shape(&self) -> Shape {
        match *self {}
    }
    fn dtype(&self) -> DType {
        match *self {}
    }
}

impl BackendBase for CudaBackend {
    type Tensor = CudaTensor;

    fn info(&self) -> BackendInfo {
        match *self {}
    }
}

impl CoreOps for CudaBackend {
    fn zeros(&mut self, _: Shape, _: DType, _: MemCategory) -> Result<CudaTensor> {
        match *self {}
    }
    fn upload_f32(&mut self, _: &[f32], _: Shape, _: MemCategory) -> Result<CudaTensor> {
        match *self {}
    }
    fn upload_u32(&mut self, _: &[u32], _: Shape, _: MemCategory) -> Result<CudaTensor> {
        match *self {}
    }
    fn write_f32(&mut self, _: &mut CudaTensor, _: &[f32]) -> Result<()> {
        match *self {}
    }
    fn write_u32(&mut self, _: &mut CudaTensor, _: &[u32]) -> Result<()> {
        match *self {}
    }
    fn read_f32(&mut self, _: &CudaTensor) -> Result<Vec<f32>> {
        match *self {}
    }
    fn read_u32(&mut self, _: &CudaTensor) -> Result<Vec<u32>> {
        match *self {}
    }
    fn read_many(&mut self, _: &[&CudaTensor]) -> Result<Vec<crate::tensor::HostData>> {
        match *self {}
    }
    fn matmul(&mut self, _: &CudaTensor, _: &CudaTensor, _: &mut CudaTensor, _: bool, _: bool, _: bool) -> Result<()> {
        match *self {}
    }
    fn bias_add(&mut self, _: &mut CudaTensor, _: &CudaTensor) -> Result<()> {
        match *self {}
    }
    fn relu(&mut self, _: &mut CudaTensor) -> Result<()> {
        match *self {}
    }
    fn relu_backward(&mut self, _: &mut CudaTensor, _: &CudaTensor) -> Result<()> {
        match *self {}
    }
    fn softmax_xent(&mut self, _: &CudaTensor, _: &CudaTensor, _: &mut CudaTensor, _: Option<&mut CudaTensor>, _: f32) -> Result<()> {
        match *self {}
    }
    fn sum_cols(&mut self, _: &CudaTensor, _: &mut CudaTensor) -> Result<()> {
        match *self {}
    }
    fn sum_rows(&mut self, _: &CudaTensor, _: &mut CudaTensor) -> Result<()> {
        match *self {}
    }
    fn accumulate_sum(&mut self, _: &CudaTensor, _: &mut CudaTensor, _: usize) -> Result<()> {
        match *self {}
    }
    fn argmax_rows(&mut self, _: &CudaTensor, _: &mut CudaTensor) -> Result<()> {
        match *self {}
    }
    fn count_correct(&mut self, _: &CudaTensor, _: &CudaTensor, _: &mut CudaTensor, _: usize) -> Result<()> {
        match *self {}
    }
    fn sgd_step(&mut self, _: &mut CudaTensor, _: &CudaTensor, _: &mut CudaTensor, _: Sgd) -> Result<()> {
        match *self {}
    }
    fn adamw_step(&mut self, _: &mut CudaTensor, _: &CudaTensor, _: &mut CudaTensor, _: &mut CudaTensor, _: AdamW, _: u32) -> Result<()> {
        match *self {}
    }
    fn fill(&mut self, _: &mut CudaTensor, _: f32) -> Result<()> {
        match *self {}
    }
    fn scale(&mut self, _: &mut CudaTensor, _: f32) -> Result<()> {
        match *self {}
    }
    fn add_to(&mut self, _: &CudaTensor, _: &mut CudaTensor) -> Result<()> {
        match *self {}
    }
    fn copy(&mut self, _: &CudaTensor, _: &mut CudaTensor) -> Result<()> {
        match *self {}
    }
    fn flush(&mut self) -> Result<()> {
        match *self {}
    }
    fn sync(&mut self) -> Result<()> {
        match *self {}
    }
}

/// The families' defaults refuse by name; with no value, they are never reached either.
impl AmpOps for CudaBackend {}
impl QuantOps for CudaBackend {}
impl crate::tensor::ConvOps for CudaBackend {}

impl Telemetry for CudaBackend {
    fn take_busy_seconds(&mut self) -> Result<Option<f64>> {
        match *self {}
    }
    fn memory(&self) -> MemoryReport {
        match *self {}
    }
    fn reset_memory_peaks(&mut self) {
        match *self {}
    }
}
