//! A post-training-quantized MLP forward pass: weights int8 per output channel (or per
//! tensor), activations int8 per tensor with static scales calibrated on held-out samples
//! (`calibrate`) or dynamic scales taken from each batch, i32 accumulation, then f32 again
//! for bias and ReLU:
//!
//!   x_q = quantize(x, s_x);  acc = x_q · W_q (exact i32);  y = acc · (s_x · s_W[j]) + b
//!
//! The GEMM and the rescale are one op, `matmul_i8_dequant`, whose epilogue finishes each i32 sum
//! into f32 (scale, bias, ReLU) where the GEMM computes it.
//!
//! `quantize_model` turns an f32 model's host weights (`Mlp::read_parameters` or a
//! checkpoint's tensors) into a host `QuantizedModel` (what `quant::export` saves and
//! `quant::load` reads); `QuantMlp::from_model` puts one on a backend. `QuantMlp::mixed` keeps
//! every layer but one in f32, to find the layer that quantization hurts most.

use serde::{Deserialize, Serialize};

use super::{Observer, ObserverKind};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{DType, Dequant, MemCategory, QuantGranularity, prelude::*};

/// One f32 layer, as the host holds it: weight [inputs, outputs] row-major and bias [outputs].
#[derive(Clone, Debug)]
pub struct HostLayer {
    pub weight: Vec<f32>,
    pub shape: [usize; 2],
    pub bias: Vec<f32>,
}

impl HostLayer {
    /// Layers from `Mlp::read_parameters`'s order (weight, bias per layer) and the widths.
    pub fn from_parameters(params: &[Vec<f32>], widths: &[usize]) -> Result<Vec<HostLayer>> {
        let layers = widths.len().saturating_sub(1);
        if params.len() != 2 * layers {
            return Err(Error::InvalidConfig(format!(
                "{} parameter tensors for {layers} layers (expected a weight and a bias each)",
                params.len()
            )));
        }
        widths
            .windows(2)
            .zip(params.chunks_exact(2))
            .map(|(w, p)| {
                if p[0].len() != w[0] * w[1] || p[1].len() != w[1] {
                    return Err(Error::InvalidConfig(format!(
                        "a layer {}→{} got a weight of {} and a bias of {} values",
                        w[0],
                        w[1],
                        p[0].len(),
                        p[1].len()
                    )));
                }
                Ok(HostLayer { weight: p[0].clone(), shape: [w[0], w[1]], bias: p[1].clone() })
            })
            .collect()
    }
}

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
    let params: Vec<(B::Tensor, B::Tensor)> = layers
        .iter()
        .map(|l| {
            Ok((
                b.upload_f32(&l.weight, l.shape, MemCategory::Parameters)?,
                b.upload_f32(&l.bias, [1, l.shape[1]], MemCategory::Parameters)?,
            ))
        })
        .collect::<Result<_>>()?;
    for chunk in samples.chunks(batch * inputs) {
        let rows = chunk.len() / inputs;
        observers[0].observe(chunk);
        let mut x = b.upload_f32(chunk, [rows, inputs], MemCategory::Inputs)?;
        for (i, (w, bias)) in params.iter().enumerate().take(layers.len() - 1) {
            let mut y = b.zeros([rows, layers[i].shape[1]], DType::F32, MemCategory::Activations)?;
            b.matmul(&x, w, &mut y, false, false, false)?;
            b.bias_add(&mut y, bias)?;
            b.relu(&mut y)?;
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
        let mut q = b.zeros(l.shape, DType::I8, MemCategory::Other)?;
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

enum Layer<B: Backend> {
    Int8 {
        weight: B::Tensor,
        /// s_W[j] as [1, outputs].
        weight_scales: B::Tensor,
        /// The calibrated s_x as [1, 1] (static scales), or None: each batch's own (dynamic).
        input_scale: Option<B::Tensor>,
        bias: B::Tensor,
        shape: [usize; 2],
    },
    F32 {
        weight: B::Tensor,
        bias: B::Tensor,
        shape: [usize; 2],
    },
}

pub struct QuantMlp<B: Backend> {
    layers: Vec<Layer<B>>,
    /// Per-channel weight scales per layer (for reports).
    pub weight_scales: Vec<Vec<f32>>,
}

impl<B: Backend> QuantMlp<B> {
    /// Static activation scales from `act_absmax`, int8 weights per channel.
    pub fn new(b: &mut B, layers: &[HostLayer], act_absmax: &[f32]) -> Result<Self> {
        if act_absmax.len() != layers.len() || layers.is_empty() {
            return Err(Error::InvalidConfig(format!("{} activation ranges for {} layers", act_absmax.len(), layers.len())));
        }
        let m = quantize_model(b, layers, Some(act_absmax), QuantGranularity::PerChannel)?;
        Self::from_model(b, &m)
    }

    /// Puts a quantized model (from `quantize_model` or `quant::load`) on `b`.
    pub fn from_model(b: &mut B, m: &QuantizedModel) -> Result<Self> {
        let layers = m.layers.iter().map(|l| int8_layer(b, l)).collect::<Result<_>>()?;
        Ok(QuantMlp { layers, weight_scales: m.layers.iter().map(|l| l.weight_scales.clone()).collect() })
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
                Layer::F32 {
                    weight: b.upload_f32(&f.weight, f.shape, MemCategory::Parameters)?,
                    bias: b.upload_f32(&f.bias, [1, f.shape[1]], MemCategory::Parameters)?,
                    shape: f.shape,
                }
            });
        }
        Ok(QuantMlp { layers, weight_scales: m.layers.iter().map(|l| l.weight_scales.clone()).collect() })
    }

    /// Logits [rows, classes] of `x` ([rows, inputs] f32).
    pub fn forward(&self, b: &mut B, x: &B::Tensor) -> Result<B::Tensor> {
        self.run(b, x, false)?.pop().ok_or_else(|| Error::Internal("a quantized model without layers".into()))
    }

    /// Every layer's f32 output (after ReLU for hidden layers; the last is the logits).
    pub fn forward_all(&self, b: &mut B, x: &B::Tensor) -> Result<Vec<B::Tensor>> {
        self.run(b, x, true)
    }

    fn run(&self, b: &mut B, x: &B::Tensor, keep: bool) -> Result<Vec<B::Tensor>> {
        let rows = x.shape()[0];
        let last = self.layers.len().saturating_sub(1);
        let mut outs: Vec<B::Tensor> = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            let input = outs.last().unwrap_or(x);
            let relu = i < last;
            let y = match l {
                Layer::Int8 { weight, weight_scales, input_scale, bias, shape } => {
                    let mut xq = b.zeros([rows, shape[0]], DType::I8, MemCategory::Activations)?;
                    let dynamic;
                    let sx = match input_scale {
                        Some(sx) => {
                            b.quantize_with(input, &mut xq, sx)?;
                            sx
                        }
                        None => {
                            // The batch's own s_x stays on the device, like a calibrated one:
                            // nothing is read back between the layers.
                            let mut s = b.zeros([1, 1], DType::F32, MemCategory::Activations)?;
                            b.quantize(input, &mut xq, &mut s, QuantGranularity::PerTensor)?;
                            dynamic = s;
                            &dynamic
                        }
                    };
                    // i32 sums finished into f32 (· s_x·s_W[j], + bias, ReLU) inside the GEMM.
                    let mut y = b.zeros([rows, shape[1]], DType::F32, MemCategory::Activations)?;
                    b.matmul_i8_dequant(
                        &xq,
                        weight,
                        &mut y,
                        false,
                        false,
                        Dequant { scales: weight_scales, bias: Some(bias), relu, act_scale: Some(sx) },
                    )?;
                    y
                }
                Layer::F32 { weight, bias, shape } => {
                    let mut y = b.zeros([rows, shape[1]], DType::F32, MemCategory::Activations)?;
                    b.matmul(input, weight, &mut y, false, false, false)?;
                    b.bias_add(&mut y, bias)?;
                    if relu {
                        b.relu(&mut y)?;
                    }
                    y
                }
            };
            if !keep {
                outs.clear();
            }
            outs.push(y);
        }
        Ok(outs)
    }
}

fn int8_layer<B: Backend>(b: &mut B, l: &QuantizedLayer) -> Result<Layer<B>> {
    let mut weight = b.zeros(l.shape, DType::I8, MemCategory::Parameters)?;
    b.write_i8(&mut weight, &l.weight)?;
    Ok(Layer::Int8 {
        weight,
        weight_scales: b.upload_f32(&l.weight_scales, [1, l.shape[1]], MemCategory::Parameters)?,
        input_scale: l.input_scale.map(|sx| b.upload_f32(&[sx], [1, 1], MemCategory::Parameters)).transpose()?,
        bias: b.upload_f32(&l.bias, [1, l.shape[1]], MemCategory::Parameters)?,
        shape: l.shape,
    })
}
