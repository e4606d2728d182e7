//! The same MLP forward pass in f32 or a 16-bit float type, built from host layers: the FP32
//! reference and the FP16 column exercise 9 compares int8 with. FP16 weights are cast once
//! when the model is built; each forward casts its input, runs `matmul16` (f32 sums) with the
//! bias and ReLU fused, keeps hidden activations in 16 bits and returns f32 logits.

use super::HostLayer;
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{DType, Epilogue, MemCategory, prelude::*};

pub struct FloatMlp<B: Backend> {
    /// (weight in `dtype`, f32 bias [1, outputs], [inputs, outputs]).
    layers: Vec<(B::Tensor, B::Tensor, [usize; 2])>,
    dtype: DType,
}

impl<B: Backend> FloatMlp<B> {
    /// `dtype` is F32, F16 or BF16; a 16-bit type the backend cannot compute is refused by name.
    pub fn new(b: &mut B, layers: &[HostLayer], dtype: DType) -> Result<Self> {
        if layers.is_empty() {
            return Err(Error::InvalidConfig("a model needs at least one layer".into()));
        }
        if dtype != DType::F32 {
            if !matches!(dtype, DType::F16 | DType::BF16) {
                return Err(Error::InvalidConfig(format!("float inference runs in F32, F16 or BF16, not {}", dtype.name())));
            }
            if let Some(why) = b.amp_unavailable(dtype) {
                return Err(Error::Unsupported(format!("{} inference is unavailable on {}: {why}", dtype.name(), b.info().label())));
            }
        }
        let mut out = Vec::new();
        for l in layers {
            let bias = b.upload_f32(&l.bias, [1, l.shape[1]], MemCategory::Parameters)?;
            let weight = if dtype == DType::F32 {
                b.upload_f32(&l.weight, l.shape, MemCategory::Parameters)?
            } else {
                let w = b.upload_f32(&l.weight, l.shape, MemCategory::Other)?;
                let mut lo = b.zeros(l.shape, dtype, MemCategory::Parameters)?;
                b.cast(&w, &mut lo, None)?;
                lo
            };
            out.push((weight, bias, l.shape));
        }
        Ok(FloatMlp { layers: out, dtype })
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Logits [rows, classes] (f32) of `x` ([rows, inputs] f32).
    pub fn forward(&self, b: &mut B, x: &B::Tensor) -> Result<B::Tensor> {
        self.run(b, x, false)?.pop().ok_or_else(|| Error::Internal("a model without layers".into()))
    }

    /// Every layer's output (after ReLU for hidden layers; 16-bit ones read as f32).
    pub fn forward_all(&self, b: &mut B, x: &B::Tensor) -> Result<Vec<B::Tensor>> {
        self.run(b, x, true)
    }

    fn run(&self, b: &mut B, x: &B::Tensor, keep: bool) -> Result<Vec<B::Tensor>> {
        let rows = x.shape()[0];
        let last = self.layers.len() - 1;
        let mut outs: Vec<B::Tensor> = Vec::new();
        let x16 = if self.dtype == DType::F32 {
            None
        } else {
            let mut t = b.zeros(x.shape(), self.dtype, MemCategory::Activations)?;
            b.cast(x, &mut t, None)?;
            Some(t)
        };
        for (i, (w, bias, shape)) in self.layers.iter().enumerate() {
            let input = outs.last().or(x16.as_ref()).unwrap_or(x);
            let y = if self.dtype == DType::F32 {
                let mut y = b.zeros([rows, shape[1]], DType::F32, MemCategory::Activations)?;
                b.matmul(input, w, &mut y, false, false, false)?;
                b.bias_add(&mut y, bias)?;
                if i < last {
                    b.relu(&mut y)?;
                }
                y
            } else {
                let dt = if i < last { self.dtype } else { DType::F32 };
                let mut y = b.zeros([rows, shape[1]], dt, MemCategory::Activations)?;
                b.matmul16(input, w, &mut y, false, false, Epilogue::Bias { bias, relu: i < last }, None)?;
                y
            };
            if !keep {
                outs.clear();
            }
            outs.push(y);
        }
        Ok(outs)
    }
}
