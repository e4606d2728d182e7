//! A post-training-quantized MLP forward pass: weights int8 per output channel, activations
//! int8 per tensor with static scales calibrated on held-out samples (`calibrate`), i32
//! accumulation, then f32 again for bias and ReLU:
//!
//!   x_q = quantize_with(x, s_x);  acc = x_q · W_q (exact i32);  y = acc · (s_x · s_W[j]) + b
//!
//! Built from an f32 model's host weights, so it serves any trained `nn::Mlp`
//! (`Mlp::read_parameters`) or a checkpoint's tensors.

use super::{Observer, ObserverKind};
use crate::error::{Error, Result};
use crate::tensor::{prelude::*, DType, MemCategory, QuantGranularity};

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
            return Err(Error::InvalidConfig(format!("{} parameter tensors for {layers} layers (expected a weight and a bias each)", params.len())));
        }
        widths
            .windows(2)
            .zip(params.chunks_exact(2))
            .map(|(w, p)| {
                if p[0].len() != w[0] * w[1] || p[1].len() != w[1] {
                    return Err(Error::InvalidConfig(format!("a layer {}→{} got a weight of {} and a bias of {} values", w[0], w[1], p[0].len(), p[1].len())));
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
    if samples.is_empty() || samples.len() % inputs != 0 || batch == 0 {
        return Err(Error::InvalidConfig(format!("calibration needs at least one sample of {inputs} values and a batch ≥ 1 (got {} values, batch {batch})", samples.len())));
    }
    let mut observers: Vec<Observer> = layers.iter().map(|_| Observer::new(kind)).collect::<Result<_>>()?;
    let params: Vec<(B::Tensor, B::Tensor)> = layers
        .iter()
        .map(|l| Ok((b.upload_f32(&l.weight, l.shape, MemCategory::Parameters)?, b.upload_f32(&l.bias, [1, l.shape[1]], MemCategory::Parameters)?)))
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

struct QuantLayer<B: Backend> {
    weight: B::Tensor,
    /// s_x · s_W[j], [1, outputs]: turns the i32 accumulators back into f32.
    out_scales: B::Tensor,
    act_scale: B::Tensor,
    bias: B::Tensor,
    shape: [usize; 2],
}

pub struct QuantMlp<B: Backend> {
    layers: Vec<QuantLayer<B>>,
    /// Per-channel weight scales per layer, read back once (for reports).
    pub weight_scales: Vec<Vec<f32>>,
}

impl<B: Backend> QuantMlp<B> {
    /// Quantizes each layer's weight per output channel on `b`; `act_absmax` (from
    /// `calibrate`) gives each layer's static input scale.
    pub fn new(b: &mut B, layers: &[HostLayer], act_absmax: &[f32]) -> Result<Self> {
        if let Some(why) = b.quant_unavailable() {
            return Err(Error::InvalidConfig(format!("int8 inference is not available on {}: {why}", b.info().label())));
        }
        if act_absmax.len() != layers.len() || layers.is_empty() {
            return Err(Error::InvalidConfig(format!("{} activation ranges for {} layers", act_absmax.len(), layers.len())));
        }
        let mut out = Vec::new();
        let mut weight_scales = Vec::new();
        for (l, &absmax) in layers.iter().zip(act_absmax) {
            let w = b.upload_f32(&l.weight, l.shape, MemCategory::Other)?;
            let mut weight = b.zeros(l.shape, DType::I8, MemCategory::Parameters)?;
            let mut ws = b.zeros([1, l.shape[1]], DType::F32, MemCategory::Other)?;
            b.quantize(&w, &mut weight, &mut ws, QuantGranularity::PerChannel)?;
            let ws = b.read_f32(&ws)?;
            let sx = crate::tensor::scale_for_absmax(absmax);
            let combined: Vec<f32> = ws.iter().map(|s| sx * s).collect();
            out.push(QuantLayer {
                weight,
                out_scales: b.upload_f32(&combined, [1, l.shape[1]], MemCategory::Parameters)?,
                act_scale: b.upload_f32(&[sx], [1, 1], MemCategory::Parameters)?,
                bias: b.upload_f32(&l.bias, [1, l.shape[1]], MemCategory::Parameters)?,
                shape: l.shape,
            });
            weight_scales.push(ws);
        }
        Ok(QuantMlp { layers: out, weight_scales })
    }

    /// Logits [rows, classes] of `x` ([rows, inputs] f32).
    pub fn forward(&self, b: &mut B, x: &B::Tensor) -> Result<B::Tensor> {
        let rows = x.shape()[0];
        let last = self.layers.len() - 1;
        let mut h: Option<B::Tensor> = None;
        for (i, l) in self.layers.iter().enumerate() {
            let input = h.as_ref().unwrap_or(x);
            let mut xq = b.zeros([rows, l.shape[0]], DType::I8, MemCategory::Activations)?;
            b.quantize_with(input, &mut xq, &l.act_scale)?;
            let mut acc = b.zeros([rows, l.shape[1]], DType::I32, MemCategory::Activations)?;
            b.matmul_i8(&xq, &l.weight, &mut acc, false, false)?;
            let mut y = b.zeros([rows, l.shape[1]], DType::F32, MemCategory::Activations)?;
            b.dequantize(&acc, &l.out_scales, &mut y)?;
            b.bias_add(&mut y, &l.bias)?;
            if i < last {
                b.relu(&mut y)?;
            }
            h = Some(y);
        }
        h.ok_or_else(|| Error::Internal("a quantized model without layers".into()))
    }
}
