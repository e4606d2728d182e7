use serde::{Deserialize, Serialize};

use super::cnn::{ConvConfig, ConvStem, StemWorkspace};
use super::dense::Dense;
use super::pass::{self, Tape, Weights};
use super::{Accumulators, Optimizer, he_normal};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{Backend, DType, MemCategory, OptStep, ParamRefs, TensorMeta};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MlpConfig {
    /// Values per sample the model reads (a CNN's: its images, C·H·W).
    pub input: usize,
    pub hidden: Vec<usize>,
    pub classes: usize,
    /// Convolutions before the dense layers (a CNN); None for a plain MLP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conv: Option<ConvConfig>,
}

impl MlpConfig {
    /// The dense layers' input: the convolutions' output for a CNN, else the model's input.
    pub fn dense_input(&self) -> usize {
        self.conv.as_ref().map_or(self.input, |c| c.out_features())
    }

    /// Dense layer widths from their input to the output, e.g. [784, 256, 128, 10].
    pub fn widths(&self) -> Vec<usize> {
        std::iter::once(self.dense_input()).chain(self.hidden.iter().copied()).chain(std::iter::once(self.classes)).collect()
    }

    pub fn parameter_count(&self) -> usize {
        self.widths().windows(2).map(|w| w[0] * w[1] + w[1]).sum::<usize>() + self.conv.as_ref().map_or(0, |c| c.parameter_count())
    }

    /// Multiply-adds ×2 of one forward pass per sample (a CNN's convolutions included).
    pub fn forward_flops_per_sample(&self) -> f64 {
        self.widths().windows(2).map(|w| 2.0 * (w[0] * w[1]) as f64).sum::<f64>()
            + self.conv.as_ref().map_or(0.0, |c| c.forward_flops_per_sample())
    }

    /// Multiply-adds ×2 of one training step per sample: the forward pass, every weight's
    /// gradient (as many again) and every layer's input gradient except the model's first
    /// layer's, whose input is the data — no backend computes that one, so "3 × forward"
    /// overstated the MLP's step by 40 %.
    pub fn training_flops_per_sample(&self) -> f64 {
        let first = match &self.conv {
            Some(c) => c.first_stage_flops_per_sample(),
            None => self.widths().windows(2).next().map_or(0.0, |w| 2.0 * (w[0] * w[1]) as f64),
        };
        3.0 * self.forward_flops_per_sample() - first
    }

    /// About how many bytes training this model holds, for refusing one that cannot fit before
    /// anything is allocated: each f32 parameter with its gradient and `state_slots` optimizer
    /// tensors, and for each of `rows` rows every layer's output and its gradient (a CNN's
    /// feature maps and their unfolded inputs too). A lower bound: validation's workspace,
    /// 16-bit copies and kernels' scratch come on top. Saturates instead of overflowing.
    pub fn training_bytes(&self, rows: usize, state_slots: usize) -> u64 {
        let widths: Vec<u128> = self.widths().iter().map(|&w| w as u128).collect();
        let mut params: u128 = widths.windows(2).map(|w| w[0] * w[1] + w[1]).sum();
        let mut per_row: u128 = widths.iter().sum();
        if let Some(c) = &self.conv {
            params += c.parameter_count() as u128;
            for s in c.stages() {
                let pixels = (s.input.height * s.input.width) as u128;
                per_row += pixels * (s.out as u128 * 2 + s.taps() as u128);
            }
        }
        let bytes = 4 * (params * (2 + state_slots as u128) + 2 * rows as u128 * per_row);
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }

    pub fn validate(&self) -> Result<()> {
        if self.input == 0 || self.classes < 2 || self.hidden.contains(&0) {
            return Err(Error::InvalidConfig(format!("model widths {:?} must all be positive, with at least 2 classes", self.widths())));
        }
        match &self.conv {
            Some(c) if c.image.iter().product::<usize>() != self.input => Err(Error::InvalidConfig(format!(
                "CNN images {:?} hold {} values, but the model's input is {}",
                c.image,
                c.image.iter().product::<usize>(),
                self.input
            ))),
            Some(c) => c.validate(),
            None => Ok(()),
        }
    }

    /// The model named with its kind: "MLP 784-256-128-10", or a CNN's `describe` (which starts
    /// with "CNN"); what an error names when two models differ.
    pub fn label(&self) -> String {
        if self.conv.is_some() { self.describe() } else { format!("MLP {}", self.describe()) }
    }

    /// "784-256-128-10" for an MLP; "CNN 3x32x32 conv3x3 16-pool-conv3x3 32-pool-2048-10" for a CNN.
    pub fn describe(&self) -> String {
        let dense = self.widths().iter().map(|w| w.to_string()).collect::<Vec<_>>().join("-");
        match &self.conv {
            Some(c) => format!("CNN {} {}-{dense}", c.image.map(|v| v.to_string()).join("x"), c.describe()),
            None => dense,
        }
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
    /// The convolutions of a CNN (`cfg.conv`), before the dense layers.
    pub stem: Option<ConvStem<B>>,
    pub optimizer: Optimizer,
    /// Optimizer steps taken (AdamW's bias correction counts from 1).
    pub step: u32,
}

/// How `Mlp::backward_layers` writes the parameter gradients.
pub enum GradWrite<'t, B: Backend> {
    /// Overwrite them: one batch per optimizer step.
    Replace,
    /// Add to them (gradient accumulation over micro-batches): weights through the matmul's
    /// accumulate flag, biases as `ones` ([1, rows] of 1.0) · the output gradient, the same
    /// column sums.
    Add { ones: &'t B::Tensor },
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
    /// A CNN's convolution buffers.
    pub stem: Option<StemWorkspace<B>>,
    /// Activation recomputation: `acts` and `grads` hold only the logits and their gradient;
    /// backward recomputes each hidden output from the dense layers' input (`recomputing`).
    pub recompute: bool,
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
            stem: cfg.conv.as_ref().map(|c| StemWorkspace::new(b, c, batch, with_grads, DType::F32)).transpose()?,
            recompute: false,
        })
    }

    /// A training workspace for activation recomputation: of the dense layers' outputs and
    /// gradients it holds only the logits' (a CNN's convolution buffers are kept whole).
    pub fn recomputing(b: &mut B, cfg: &MlpConfig, batch: usize) -> Result<Self> {
        let classes = cfg.classes;
        Ok(Workspace {
            batch,
            x: b.zeros([batch, cfg.input], DType::F32, MemCategory::Inputs)?,
            y: b.zeros([1, batch], DType::U32, MemCategory::Inputs)?,
            acts: vec![b.zeros([batch, classes], DType::F32, MemCategory::Activations)?],
            grads: vec![b.zeros([batch, classes], DType::F32, MemCategory::Activations)?],
            acc: Accumulators::new(b, batch, false)?,
            stem: cfg.conv.as_ref().map(|c| StemWorkspace::new(b, c, batch, true, DType::F32)).transpose()?,
            recompute: true,
        })
    }

    /// The buffers as the model-level pass borrows them.
    fn tape(&mut self) -> Tape<'_, B> {
        Tape {
            x: &self.x,
            stem: self.stem.as_mut(),
            head_x: None,
            acts: &mut self.acts,
            grads: &mut self.grads,
            grad16: self.acc.grad16.as_mut(),
            recompute: self.recompute,
        }
    }

    /// The logits of the latest forward pass.
    pub fn logits(&self) -> &B::Tensor {
        self.acts.last().expect("a model has at least one layer")
    }
}

impl<B: Backend> Mlp<B> {
    /// Builds the model with He-initialised weights (same seed, same weights on every backend).
    pub fn new(b: &mut B, cfg: MlpConfig, optimizer: Optimizer, seed: u64) -> Result<Self> {
        Self::new_from_layer(b, cfg, optimizer, seed, 0)
    }

    /// `new` for the layers `first_layer…` of a larger model (a pipeline stage): each layer
    /// gets the weights the whole model's layer of that index starts from.
    pub fn new_from_layer(b: &mut B, cfg: MlpConfig, optimizer: Optimizer, seed: u64, first_layer: usize) -> Result<Self> {
        Self::build(b, cfg, optimizer, seed, first_layer, optimizer.state_slots())
    }

    /// `new` without optimizer state: for a strategy that keeps it itself (ZeRO-1 keeps only
    /// the state of the parameters' ranges its replica updates). `update` cannot run on it.
    pub fn without_optimizer_state(b: &mut B, cfg: MlpConfig, optimizer: Optimizer, seed: u64) -> Result<Self> {
        Self::build(b, cfg, optimizer, seed, 0, 0)
    }

    fn build(b: &mut B, cfg: MlpConfig, optimizer: Optimizer, seed: u64, first_layer: usize, slots: usize) -> Result<Self> {
        cfg.validate()?;
        let widths = cfg.widths();
        let mut weights = Vec::new();
        let mut biases = Vec::new();
        for (layer, w) in widths.windows(2).enumerate() {
            let init = he_normal(w[0], w[1], seed, first_layer + layer);
            let weight = b.upload_f32(&init, [w[0], w[1]], MemCategory::Parameters)?;
            weights.push(param(b, weight, slots)?);
            let bias = b.zeros([1, w[1]], DType::F32, MemCategory::Parameters)?;
            biases.push(param(b, bias, slots)?);
        }
        let stem = cfg.conv.as_ref().map(|c| ConvStem::new(b, c, slots, seed)).transpose()?;
        Ok(Mlp { cfg, weights, biases, stem, optimizer, step: 0 })
    }

    /// Forward pass of `ws.x` into `ws.acts` (the last one holds the logits).
    pub fn forward(&self, b: &mut B, ws: &mut Workspace<B>) -> Result<()> {
        pass::forward(b, self, Weights::F32, &mut ws.tape())
    }

    /// The dense layers as the forward pass reads them: f32 weights and biases.
    pub fn dense_layers(&self) -> impl ExactSizeIterator<Item = Dense<&B::Tensor>> {
        Weights::F32.layers(self)
    }

    /// Loss (accumulated into `ws.loss_sum`), correct count, and gradients of every parameter.
    pub fn backward(&mut self, b: &mut B, ws: &mut Workspace<B>) -> Result<()> {
        self.backward_with(b, ws, |_, _, _| Ok(()))
    }

    /// `backward`, calling `ready(b, model, i)` as soon as layer `i`'s weight and bias
    /// gradients are final (layers in backward order, last first), before the gradient flows
    /// on to layer `i − 1`: data parallelism starts all-reducing a finished bucket there while
    /// the rest of backward runs (overlap).
    pub fn backward_with(
        &mut self,
        b: &mut B,
        ws: &mut Workspace<B>,
        ready: impl FnMut(&mut B, &Mlp<B>, usize) -> Result<()>,
    ) -> Result<()> {
        let rows = ws.batch;
        self.backward_mean(b, ws, rows, ready)
    }

    /// `backward_with`, the loss gradient scaled by 1/`mean_over` rather than 1/rows: a
    /// micro-batch's share of a larger batch's mean (gradient accumulation).
    pub fn backward_mean(
        &mut self,
        b: &mut B,
        ws: &mut Workspace<B>,
        mean_over: usize,
        ready: impl FnMut(&mut B, &Mlp<B>, usize) -> Result<()>,
    ) -> Result<()> {
        let scale = 1.0 / mean_over as f32;
        let head = if ws.recompute { 0 } else { self.weights.len() - 1 };
        ws.acc.record(b, &ws.acts[head], &ws.y, Some(&mut ws.grads[head]), scale)?;
        self.backward_layers(b, ws, GradWrite::Replace, None, ready)
    }

    /// Backward from the output gradient already in the last of `ws.grads` (the loss's, or
    /// one a later pipeline stage sent): every parameter's gradient, written as `write` says,
    /// and, when `input_grad` is given, the gradient of the input `ws.x` (what a pipeline
    /// stage sends to the stage before it).
    pub fn backward_layers(
        &mut self,
        b: &mut B,
        ws: &mut Workspace<B>,
        write: GradWrite<'_, B>,
        input_grad: Option<&mut B::Tensor>,
        ready: impl FnMut(&mut B, &Mlp<B>, usize) -> Result<()>,
    ) -> Result<()> {
        pass::backward(b, self, Weights::F32, &mut ws.tape(), write, input_grad, ready)
    }

    /// Every parameter, in `update`'s order: dense weights, dense biases, then a CNN's.
    pub fn params_mut(&mut self) -> impl Iterator<Item = &mut Param<B>> {
        let stem = self.stem.iter_mut().flat_map(|s| s.params_mut());
        self.weights.iter_mut().chain(self.biases.iter_mut()).chain(stem)
    }

    /// One optimizer step over every parameter, as one multi-tensor call (a GPU updates many
    /// parameters per dispatch).
    pub fn update(&mut self, b: &mut B) -> Result<()> {
        self.step += 1;
        let rule = self.opt_step();
        let stem = self.stem.iter_mut().flat_map(|s| s.params_mut());
        let mut params: Vec<ParamRefs<'_, B::Tensor>> = self
            .weights
            .iter_mut()
            .chain(self.biases.iter_mut())
            .chain(stem)
            .map(|p| ParamRefs { value: &mut p.value, grad: &p.grad, state: &mut p.state, w16: None })
            .collect();
        b.optimizer_steps(&mut params, rule)
    }

    /// The f32 optimizer's rule at the current step.
    pub fn opt_step(&self) -> OptStep {
        match self.optimizer {
            super::Optimizer::Sgd(hp) => OptStep::Sgd(hp),
            super::Optimizer::AdamW(hp) => OptStep::AdamW(hp, self.step),
        }
    }

    /// How many parameters `update` steps.
    pub fn param_count(&self) -> usize {
        self.weights.len() + self.biases.len() + self.stem.iter().map(|s| s.weights.len() + s.biases.len()).sum::<usize>()
    }

    /// All parameter values, weights then biases per dense layer, then (a CNN) weights and
    /// biases per convolution, read back to the host.
    pub fn read_parameters(&self, b: &mut B) -> Result<Vec<Vec<f32>>> {
        let stem = self.stem.iter().flat_map(|s| s.params());
        self.weights.iter().zip(&self.biases).flat_map(|(w, bi)| [w, bi]).chain(stem).map(|p| b.read_f32(&p.value)).collect()
    }
}

/// A parameter with a zero gradient and `slots` zero optimizer-state tensors of its shape.
pub(super) fn param<B: Backend>(b: &mut B, value: B::Tensor, slots: usize) -> Result<Param<B>> {
    let shape = value.shape();
    let grad = b.zeros(shape, DType::F32, MemCategory::Gradients)?;
    let state = (0..slots).map(|_| b.zeros(shape, DType::F32, MemCategory::OptimizerState)).collect::<Result<_>>()?;
    Ok(Param { value, grad, state })
}
