//! A post-training-quantized MLP forward pass: weights int8 per output channel (or per
//! tensor), activations int8 per tensor with static scales calibrated on held-out samples
//! (`calibrate`) or dynamic scales taken from each batch, i32 accumulation, then f32 again
//! for bias and ReLU:
//!
//!   x_q = quantize(x, s_x);  acc = x_q · W_q (exact i32);  y = acc · (s_x · s_W[j]) + b
//!
//! The GEMM and the rescale are one op, `matmul_i8_dequant`, whose epilogue finishes each i32 sum
//! into f32 (scale, bias, ReLU) where the GEMM computes it (`nn::dense::LayerKind::Int8`).
//!
//! `quantize_model` turns an f32 model's host weights (`Mlp::read_parameters` or a
//! checkpoint's tensors) into a host `QuantizedModel` (what `quant::export` saves and
//! `quant::load` reads); `DenseStack::quantized` puts one on a backend as `Int8` layers of the one
//! dense forward pass (`nn::dense`). `DenseStack::mixed` keeps every layer but one in f32, to find
//! the layer that quantization hurts most.

use serde::{Deserialize, Serialize};

use super::{Observer, ObserverKind};
use crate::nn::{Dense, DenseStack, HostLayer, LayerKind};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{DType, MemCategory, QuantGranularity, prelude::*};

/// The absmax of each layer's input over `samples` ([n, inputs] row-major, n ≥ 1), run through
/// the f32 model on `b` in batches of `batch`: the static activation scales.
pub fn calibrate<B: Backend>(b: &mut B, layers: &[HostLayer], samples: &[f32], batch: usize, kind: ObserverKind) -> Result<Vec<f32>> {
    let inputs = layers.first().map(|l| l.shape[0]).ok_or_else(|| Error::InvalidConfig("a model needs at least one layer".into()))?;
    if samples.is_empty() || !samples.len().is_multiple_of(inputs) || batch == 0 {
        return Err(Error::InvalidConfig(format!(
            "calibration needs at least one sample of {inputs} values and a batch ≥ 1 (got {} values, batch {batch})",
            samples.len()
        )));
    }
    let mut observers: Vec<Observer> = layers.iter().map(|_| Observer::new(kind)).collect::<Result<_>>()?;
    let model = DenseStack::float(b, layers, DType::F32)?;
    for chunk in samples.chunks(batch * inputs) {
        let rows = chunk.len() / inputs;
        observers[0].observe(chunk);
        let mut x = b.upload_f32(chunk, [rows, inputs], MemCategory::Inputs)?;
        for (i, layer) in model.layers().iter().enumerate().take(layers.len() - 1) {
            let mut y = b.empty([rows, layers[i].shape[1]], DType::F32, MemCategory::Activations)?;
            layer.as_ref().forward(b, &x, &mut y, true)?;
            observers[i + 1].observe(&b.read_f32(&y)?);
            x = y;
        }
    }
    observers.iter().map(|o| o.absmax()).collect()
}

/// Where each layer's activation scale comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActScales {
    /// Calibrated once (`calibrate`), fixed at inference: values beyond the range saturate.
    Static,
    /// The absmax of each batch's own input, per layer (PyTorch's dynamic quantization): no
    /// calibration, never saturates; like a static scale it stays on the device, multiplied
    /// into s_W[j] by the GEMM's epilogue (`Dequant::act_scale`).
    Dynamic,
}

impl ActScales {
    pub fn name(self) -> &'static str {
        match self {
            ActScales::Static => "static",
            ActScales::Dynamic => "dynamic",
        }
    }
}

pub fn granularity_name(g: QuantGranularity) -> &'static str {
    match g {
        QuantGranularity::PerChannel => "per-channel",
        QuantGranularity::PerTensor => "per-tensor",
    }
}

/// One quantized layer on the host: int8 weight [inputs, outputs] row-major, one f32 scale per
/// output channel (all equal for per-tensor weights), the static input scale when there is one,
/// and the f32 bias.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedLayer {
    pub weight: Vec<i8>,
    pub shape: [usize; 2],
    pub weight_scales: Vec<f32>,
    pub input_scale: Option<f32>,
    pub bias: Vec<f32>,
}

/// A whole quantized model on the host: what `quant::export` writes and `quant::load` reads.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedModel {
    pub layers: Vec<QuantizedLayer>,
    pub weights: QuantGranularity,
    pub activations: ActScales,
}

impl QuantizedModel {
    /// [inputs, hidden…, classes].
    pub fn widths(&self) -> Vec<usize> {
        self.layers.first().map(|l| l.shape[0]).into_iter().chain(self.layers.iter().map(|l| l.shape[1])).collect()
    }
    /// Bytes of the int8 weights plus their f32 scales.
    pub fn weight_bytes(&self) -> u64 {
        self.layers.iter().map(|l| (l.weight.len() + 4 * l.weight_scales.len()) as u64).sum()
    }
}

/// Quantizes each layer's weight on `b` (per channel or per tensor); `act_absmax` (from
/// `calibrate`) gives each layer's static input scale, None makes the scales dynamic.
pub fn quantize_model<B: Backend>(
    b: &mut B,
    layers: &[HostLayer],
    act_absmax: Option<&[f32]>,
    weights: QuantGranularity,
) -> Result<QuantizedModel> {
    if let Some(why) = b.quant_unavailable() {
        return Err(Error::InvalidConfig(format!("int8 inference is not available on {}: {why}", b.info().label())));
    }
    if layers.is_empty() || act_absmax.is_some_and(|a| a.len() != layers.len()) {
        return Err(Error::InvalidConfig(format!("{} activation ranges for {} layers", act_absmax.map_or(0, |a| a.len()), layers.len())));
    }
    let mut out = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let w = b.upload_f32(&l.weight, l.shape, MemCategory::Other)?;
        let mut q = b.empty(l.shape, DType::I8, MemCategory::Other)?;
        let cols = if weights == QuantGranularity::PerChannel { l.shape[1] } else { 1 };
        let mut ws = b.zeros([1, cols], DType::F32, MemCategory::Other)?;
        b.quantize(&w, &mut q, &mut ws, weights)?;
        let mut weight_scales = b.read_f32(&ws)?;
        if cols == 1 {
            weight_scales = vec![weight_scales[0]; l.shape[1]];
        }
        out.push(QuantizedLayer {
            weight: b.read_i8(&q)?,
            shape: l.shape,
            weight_scales,
            input_scale: act_absmax.map(|a| gpulab_core::tensor::scale_for_absmax(a[i])),
            bias: l.bias.clone(),
        });
    }
    Ok(QuantizedModel { layers: out, weights, activations: if act_absmax.is_some() { ActScales::Static } else { ActScales::Dynamic } })
}

impl<B: Backend> DenseStack<B> {
    /// `layers` quantized on `b` (int8 weights per channel) with the static activation scales
    /// from `act_absmax` (`calibrate`).
    pub fn quantize(b: &mut B, layers: &[HostLayer], act_absmax: &[f32]) -> Result<Self> {
        if act_absmax.len() != layers.len() || layers.is_empty() {
            return Err(Error::InvalidConfig(format!("{} activation ranges for {} layers", act_absmax.len(), layers.len())));
        }
        let m = quantize_model(b, layers, Some(act_absmax), QuantGranularity::PerChannel)?;
        Self::quantized(b, &m)
    }

    /// Puts a quantized model (from `quantize_model` or `quant::load`) on `b`: `Int8` layers.
    pub fn quantized(b: &mut B, m: &QuantizedModel) -> Result<Self> {
        Self::new(m.layers.iter().map(|l| int8_layer(b, l)).collect::<Result<_>>()?)
    }

    /// Only layer `only` int8 (from `m`), every other layer f32 (from `float`): the accuracy
    /// this gives, against all-f32, is that layer's sensitivity to quantization.
    pub fn mixed(b: &mut B, m: &QuantizedModel, float: &[HostLayer], only: usize) -> Result<Self> {
        if float.len() != m.layers.len() || only >= float.len() {
            return Err(Error::InvalidConfig(format!(
                "layer {only} of a model with {} quantized and {} f32 layers",
                m.layers.len(),
                float.len()
            )));
        }
        let mut layers = Vec::new();
        for (i, (q, f)) in m.layers.iter().zip(float).enumerate() {
            layers.push(if i == only {
                int8_layer(b, q)?
            } else {
                Dense {
                    kind: LayerKind::F32(b.upload_f32(&f.weight, f.shape, MemCategory::Parameters)?),
                    bias: b.upload_f32(&f.bias, [1, f.shape[1]], MemCategory::Parameters)?,
                }
            });
        }
        Self::new(layers)
    }
}

fn int8_layer<B: Backend>(b: &mut B, l: &QuantizedLayer) -> Result<Dense<B::Tensor>> {
    let mut weight = b.empty(l.shape, DType::I8, MemCategory::Parameters)?;
    b.write_i8(&mut weight, &l.weight)?;
    let kind = LayerKind::Int8 {
        weight,
        scales: b.upload_f32(&l.weight_scales, [1, l.shape[1]], MemCategory::Parameters)?,
        input_scale: l.input_scale.map(|sx| b.upload_f32(&[sx], [1, 1], MemCategory::Parameters)).transpose()?,
    };
    Ok(Dense { kind, bias: b.upload_f32(&l.bias, [1, l.shape[1]], MemCategory::Parameters)? })
}
