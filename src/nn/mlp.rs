use serde::{Deserialize, Serialize};

use super::{Accumulators, Optimizer, he_normal};
use crate::error::{Error, Result};
use crate::tensor::{Backend, DType, MemCategory, TensorMeta};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MlpConfig {
    pub input: usize,
    pub hidden: Vec<usize>,
    pub classes: usize,
}

impl MlpConfig {
    /// Layer widths from input to output, e.g. [784, 256, 128, 10].
    pub fn widths(&self) -> Vec<usize> {
        std::iter::once(self.input).chain(self.hidden.iter().copied()).chain(std::iter::once(self.classes)).collect()
    }

    pub fn parameter_count(&self) -> usize {
        self.widths().windows(2).map(|w| w[0] * w[1] + w[1]).sum()
    }

    /// Multiply-adds ×2 of one forward pass per sample.
    pub fn forward_flops_per_sample(&self) -> f64 {
        self.widths().windows(2).map(|w| 2.0 * (w[0] * w[1]) as f64).sum()
    }

    pub fn validate(&self) -> Result<()> {
        if self.input == 0 || self.classes < 2 || self.hidden.contains(&0) {
            return Err(Error::InvalidConfig(format!(
                "model widths {:?} must all be positive, with at least 2 classes",
                self.widths()
            )));
        }
        Ok(())
    }

    pub fn describe(&self) -> String {
        self.widths().iter().map(|w| w.to_string()).collect::<Vec<_>>().join("-")
    }
}

/// One trainable tensor with its gradient and optimizer state.
pub struct Param<B: Backend> {
    pub value: B::Tensor,
    pub grad: B::Tensor,
    pub state: Vec<B::Tensor>,
}

/// Weights `[in, out]` and bias `[1, out]` of each layer.
pub struct Mlp<B: Backend> {
    pub cfg: MlpConfig,
    pub weights: Vec<Param<B>>,
    pub biases: Vec<Param<B>>,
    pub optimizer: Optimizer,
    /// Optimizer steps taken (AdamW's bias correction counts from 1).
    pub step: u32,
}

/// Per-batch-size buffers: the input, labels, every layer's output and its gradient, and the
/// running loss / correct-count accumulators that are read back only now and then.
pub struct Workspace<B: Backend> {
    pub batch: usize,
    pub x: B::Tensor,
    pub y: B::Tensor,
    pub acts: Vec<B::Tensor>,
    pub grads: Vec<B::Tensor>,
    pub acc: Accumulators<B>,
}

impl<B: Backend> Workspace<B> {
    pub fn new(b: &mut B, cfg: &MlpConfig, batch: usize, with_grads: bool) -> Result<Self> {
        let widths = cfg.widths();
        let mut acts = Vec::new();
        let mut grads = Vec::new();
        for &w in &widths[1..] {
            acts.push(b.zeros([batch, w], DType::F32, MemCategory::Activations)?);
            if with_grads {
                grads.push(b.zeros([batch, w], DType::F32, MemCategory::Activations)?);
            }
        }
        Ok(Workspace {
            batch,
            x: b.zeros([batch, cfg.input], DType::F32, MemCategory::Inputs)?,
            y: b.zeros([1, batch], DType::U32, MemCategory::Inputs)?,
            acts,
            grads,
            acc: Accumulators::new(b, batch, false)?,
        })
    }

    /// The logits of the latest forward pass.
    pub fn logits(&self) -> &B::Tensor {
        self.acts.last().expect("a model has at least one layer")
    }
}

impl<B: Backend> Mlp<B> {
    /// Builds the model with He-initialised weights (same seed, same weights on every backend).
    pub fn new(b: &mut B, cfg: MlpConfig, optimizer: Optimizer, seed: u64) -> Result<Self> {
        cfg.validate()?;
        let widths = cfg.widths();
        let mut weights = Vec::new();
        let mut biases = Vec::new();
        for (layer, w) in widths.windows(2).enumerate() {
            let init = he_normal(w[0], w[1], seed, layer);
            let weight = b.upload_f32(&init, [w[0], w[1]], MemCategory::Parameters)?;
            weights.push(Self::param(b, weight, &optimizer)?);
            let bias = b.zeros([1, w[1]], DType::F32, MemCategory::Parameters)?;
            biases.push(Self::param(b, bias, &optimizer)?);
        }
        Ok(Mlp { cfg, weights, biases, optimizer, step: 0 })
    }

    fn param(b: &mut B, value: B::Tensor, opt: &Optimizer) -> Result<Param<B>> {
        let shape = value.shape();
        let grad = b.zeros(shape, DType::F32, MemCategory::Gradients)?;
        let state = (0..opt.state_slots()).map(|_| b.zeros(shape, DType::F32, MemCategory::OptimizerState)).collect::<Result<_>>()?;
        Ok(Param { value, grad, state })
    }

    /// Forward pass of `ws.x` into `ws.acts` (the last one holds the logits).
    pub fn forward(&self, b: &mut B, ws: &mut Workspace<B>) -> Result<()> {
        forward_layers(b, self.weights.iter().zip(&self.biases).map(|(w, bi)| (&w.value, &bi.value)), ws)
    }

    /// Loss (accumulated into `ws.loss_sum`), correct count, and gradients of every parameter.
    pub fn backward(&mut self, b: &mut B, ws: &mut Workspace<B>) -> Result<()> {
        self.backward_with(b, ws, |_, _, _| Ok(()))
    }

    /// `backward`, calling `ready(b, model, i)` as soon as layer `i`'s weight and bias
    /// gradients are final (layers in backward order, last first), before the gradient flows
    /// on to layer `i − 1`: data parallelism starts all-reducing a finished bucket there while
    /// the rest of backward runs (overlap).
    pub fn backward_with(&mut self, b: &mut B, ws: &mut Workspace<B>, mut ready: impl FnMut(&mut B, &Mlp<B>, usize) -> Result<()>) -> Result<()> {
        let last = self.weights.len() - 1;
        let scale = 1.0 / ws.batch as f32;
        ws.acc.record(b, &ws.acts[last], &ws.y, Some(&mut ws.grads[last]), scale)?;
        for i in (0..=last).rev() {
            let input = if i == 0 { &ws.x } else { &ws.acts[i - 1] };
            b.matmul(input, &ws.grads[i], &mut self.weights[i].grad, true, false, false)?;
            b.sum_cols(&ws.grads[i], &mut self.biases[i].grad)?;
            ready(b, self, i)?;
            if i > 0 {
                let (before, after) = ws.grads.split_at_mut(i);
                b.matmul(&after[0], &self.weights[i].value, &mut before[i - 1], false, true, false)?;
                b.relu_backward(&mut before[i - 1], &ws.acts[i - 1])?;
            }
        }
        Ok(())
    }

    /// One optimizer step over every parameter.
    pub fn update(&mut self, b: &mut B) -> Result<()> {
        self.step += 1;
        let opt = self.optimizer;
        for p in self.weights.iter_mut().chain(self.biases.iter_mut()) {
            match (opt, p.state.as_mut_slice()) {
                (super::Optimizer::Sgd(hp), [v]) => b.sgd_step(&mut p.value, &p.grad, v, hp)?,
                (super::Optimizer::AdamW(hp), [m, v]) => b.adamw_step(&mut p.value, &p.grad, m, v, hp, self.step)?,
                _ => unreachable!("state_slots matches the optimizer"),
            }
        }
        Ok(())
    }

    /// All parameter values, weights then biases per layer, read back to the host.
    pub fn read_parameters(&self, b: &mut B) -> Result<Vec<Vec<f32>>> {
        self.weights.iter().zip(&self.biases).flat_map(|(w, bi)| [&w.value, &bi.value]).map(|t| b.read_f32(t)).collect()
    }
}

/// The forward pass over layers given as (weight `[in, out]`, bias `[1, out]`) pairs: matmul,
/// bias, ReLU between layers, logits in the last of `ws.acts`. `Mlp::forward` and the
/// inference server's weights-only model (serve/) both run this one function.
pub fn forward_layers<'t, B: Backend + 't>(b: &mut B, layers: impl ExactSizeIterator<Item = (&'t B::Tensor, &'t B::Tensor)>, ws: &mut Workspace<B>) -> Result<()> {
    let last = layers.len().checked_sub(1).ok_or_else(|| Error::InvalidConfig("a model needs at least one layer".into()))?;
    for (i, (weight, bias)) in layers.enumerate() {
        let (done, rest) = ws.acts.split_at_mut(i);
        let input = if i == 0 { &ws.x } else { &done[i - 1] };
        let out = &mut rest[0];
        b.matmul(input, weight, out, false, false, false)?;
        b.bias_add(out, bias)?;
        if i < last {
            b.relu(out)?;
        }
    }
    Ok(())
}
