//! The one model-level pass: forward and backward through a model — a CNN's convolutions,
//! then the dense layers — over a view of its weights (`Weights`: the f32 masters, or
//! autocast's 16-bit copies), with the hidden outputs stored or recomputed (`Tape::recompute`).
//! f32 training (`Mlp`), autocast (`train::amp_step`), a pipeline stage and data parallelism
//! all run these two functions; a precision only says which GEMM multiplies (`matmul` or
//! `matmul16`) and where the ReLU mask is applied (its own pass, or the GEMM's epilogue).

use super::cnn::StemWorkspace;
use super::dense::{self, Dense, LayerKind};
use super::mlp::{GradWrite, Mlp, Param};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{Backend, DType, Epilogue, MemCategory, TensorMeta};

/// The weights a pass multiplies by.
pub enum Weights<'w, B: Backend> {
    /// The model's own f32 weights.
    F32,
    /// 16-bit copies of the dense layers' weights and of a CNN's convolution weights
    /// (autocast): 16-bit operands, f32 sums.
    Half { dense: &'w [B::Tensor], stem: &'w [B::Tensor] },
}

impl<B: Backend> Clone for Weights<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for Weights<'_, B> {}

impl<'w, B: Backend> Weights<'w, B> {
    /// The dense layers as the forward pass reads them.
    pub fn layers(self, model: &'w Mlp<B>) -> impl ExactSizeIterator<Item = Dense<&'w B::Tensor>> {
        model.biases.iter().enumerate().map(move |(i, bias)| {
            let kind = match self {
                Weights::F32 => LayerKind::F32(&model.weights[i].value),
                Weights::Half { dense, .. } => LayerKind::Half(&dense[i]),
            };
            Dense { kind, bias: &bias.value }
        })
    }

    /// Dense layer `i`'s weight in this view (`weights`: the model's).
    fn weight(self, weights: &'w [Param<B>], i: usize) -> &'w B::Tensor {
        match self {
            Weights::F32 => &weights[i].value,
            Weights::Half { dense, .. } => &dense[i],
        }
    }

    /// The convolutions' weight copies (None: their f32 weights).
    fn stem(self) -> Option<&'w [B::Tensor]> {
        match self {
            Weights::F32 => None,
            Weights::Half { stem, .. } => Some(stem),
        }
    }

    /// `into = grad · Wᵀ`: the gradient flowing back through a layer's weight `w`, masked by
    /// ReLU's derivative at `relu_of` (the layer's input, a hidden output) when given. The
    /// 16-bit view masks in the GEMM's epilogue and counts the rounding into `grad16`.
    fn back_through(
        self,
        b: &mut B,
        w: &B::Tensor,
        grad: &B::Tensor,
        into: &mut B::Tensor,
        relu_of: Option<&B::Tensor>,
        grad16: Option<&mut B::Tensor>,
    ) -> Result<()> {
        match (self, relu_of) {
            (Weights::F32, relu_of) => {
                b.matmul(grad, w, into, false, true, false)?;
                match relu_of {
                    Some(a) => b.relu_backward(into, a),
                    None => Ok(()),
                }
            }
            (Weights::Half { .. }, Some(a)) => b.matmul16(grad, w, into, false, true, Epilogue::ReluMask(a), grad16),
            (Weights::Half { .. }, None) => b.matmul16(grad, w, into, false, true, Epilogue::None, None),
        }
    }

    /// A weight's gradient `input ᵀ· grad`, added to the one there when `add`.
    fn weight_grad(self, b: &mut B, input: &B::Tensor, grad: &B::Tensor, into: &mut B::Tensor, add: bool) -> Result<()> {
        match self {
            Weights::F32 => b.matmul(input, grad, into, true, false, add),
            Weights::Half { .. } if add => {
                Err(Error::Unsupported("adding into gradients (a pipeline stage's micro-batches) runs in f32 only".into()))
            }
            Weights::Half { .. } => b.matmul16(input, grad, into, true, false, Epilogue::None, None),
        }
    }

    /// The type a hidden output and its gradient are held in.
    fn hidden_dtype(self) -> DType {
        match self {
            Weights::F32 => DType::F32,
            Weights::Half { dense, .. } => dense.first().map_or(DType::F32, |w| w.dtype()),
        }
    }
}

/// The buffers one pass reads and writes, borrowed from an f32 or an autocast workspace.
pub struct Tape<'t, B: Backend> {
    /// The model's input (a CNN's: its images).
    pub x: &'t B::Tensor,
    /// A CNN's convolution buffers.
    pub stem: Option<&'t mut StemWorkspace<B>>,
    /// Autocast's copy of the convolutions' output rounded to 16 bits: the dense layers' input.
    pub head_x: Option<&'t mut B::Tensor>,
    /// Every dense layer's output (the last: the logits), or only the logits when recomputing.
    pub acts: &'t mut [B::Tensor],
    /// The gradients of those outputs; backward starts from the last one's.
    pub grads: &'t mut [B::Tensor],
    /// Counts the 16-bit activation gradients: [nonzero, flushed to zero] (autocast).
    pub grad16: Option<&'t mut B::Tensor>,
    /// Activation recomputation: the hidden outputs are made again from the dense layers'
    /// input as each layer needs them, never all held at once.
    pub recompute: bool,
}

fn no_stem_buffers() -> Error {
    Error::Internal("a CNN's pass on a workspace without convolution buffers".into())
}

/// Forward pass of `t.x` into `t.acts` (the last holds the logits).
pub fn forward<B: Backend>(b: &mut B, model: &Mlp<B>, w: Weights<'_, B>, t: &mut Tape<'_, B>) -> Result<()> {
    if let Some(stem) = &model.stem {
        let sw = t.stem.as_deref_mut().ok_or_else(no_stem_buffers)?;
        stem.forward(b, t.x, sw, w.stem())?;
        if let Some(head_x) = t.head_x.as_deref_mut() {
            b.cast(sw.output(), head_x, None)?;
        }
    }
    let first = dense_input(t.x, t.stem.as_deref(), t.head_x.as_deref());
    if !t.recompute {
        return dense::forward(b, w.layers(model), first, t.acts);
    }
    // Recomputing: the hidden outputs are made and dropped on the way to the logits.
    let last = model.weights.len() - 1;
    let hidden = dense::recompute(b, w.layers(model), first, last)?;
    let head = w.layers(model).nth(last).ok_or_else(|| Error::Internal("a model without layers".into()))?;
    head.forward(b, hidden.as_ref().unwrap_or(first), &mut t.acts[0], false)
}

/// The dense layers' input: autocast's rounded copy of the convolutions' output, else their
/// output, else the model's input.
fn dense_input<'a, B: Backend>(x: &'a B::Tensor, stem: Option<&'a StemWorkspace<B>>, head_x: Option<&'a B::Tensor>) -> &'a B::Tensor {
    match (head_x, stem) {
        (Some(h), _) => h,
        (None, Some(sw)) => sw.output(),
        (None, None) => x,
    }
}

/// Backward from the output gradient already in the last of `t.grads` (the loss's, or one a
/// later pipeline stage sent): every parameter's gradient, written as `write` says, calling
/// `ready(b, model, i)` as soon as dense layer `i`'s gradients are final (last layer first),
/// and, when `input_grad` is given, the gradient of the dense layers' input (what a pipeline
/// stage sends to the stage before it). Recomputing, each layer's input is made again
/// (`dense::recompute`) and the gradient flowing back is allocated per layer and dropped once
/// the layer before has its own: the same operations on the same values as the stored path.
pub fn backward<B: Backend>(
    b: &mut B,
    model: &mut Mlp<B>,
    w: Weights<'_, B>,
    t: &mut Tape<'_, B>,
    write: GradWrite<'_, B>,
    input_grad: Option<&mut B::Tensor>,
    mut ready: impl FnMut(&mut B, &Mlp<B>, usize) -> Result<()>,
) -> Result<()> {
    let first = dense_input(t.x, t.stem.as_deref(), t.head_x.as_deref());
    let rows = first.shape()[0];
    let widths = model.cfg.widths();
    let add = matches!(write, GradWrite::Add { .. });
    let last = model.weights.len() - 1;
    // Recomputing: the gradient of the current layer's output; None: the logits' (t.grads[0]).
    let mut flowing: Option<B::Tensor> = None;
    for i in (0..=last).rev() {
        let recomputed = if t.recompute { dense::recompute(b, w.layers(model), first, i)? } else { None };
        let input = match (&recomputed, t.recompute || i == 0) {
            (Some(r), _) => r,
            (None, true) => first,
            (None, false) => &t.acts[i - 1],
        };
        let (before, from) = t.grads.split_at_mut(if t.recompute { 0 } else { i });
        let grad = flowing.as_ref().unwrap_or(&from[0]);
        w.weight_grad(b, input, grad, &mut model.weights[i].grad, add)?;
        match &write {
            GradWrite::Replace => b.sum_cols(grad, &mut model.biases[i].grad)?,
            GradWrite::Add { ones } => b.matmul(ones, grad, &mut model.biases[i].grad, false, false, true)?,
        }
        ready(b, model, i)?;
        if i == 0 {
            continue;
        }
        let weight = w.weight(&model.weights, i);
        if t.recompute {
            let mut into = b.empty([rows, widths[i]], w.hidden_dtype(), MemCategory::Activations)?;
            w.back_through(b, weight, grad, &mut into, Some(input), t.grad16.as_deref_mut())?;
            flowing = Some(into);
        } else {
            w.back_through(b, weight, grad, &mut before[i - 1], Some(&t.acts[i - 1]), t.grad16.as_deref_mut())?;
        }
    }
    let grad = flowing.as_ref().unwrap_or(&t.grads[0]);
    let weight = w.weight(&model.weights, 0);
    if let Some(stem) = model.stem.as_mut() {
        let sw = t.stem.as_deref_mut().ok_or_else(no_stem_buffers)?;
        let out = sw.output_grad().ok_or_else(|| Error::Internal("CNN backward on a forward-only workspace".into()))?;
        w.back_through(b, weight, grad, out, None, None)?;
        stem.backward(b, t.x, sw, w.stem().map(|s| (s, t.grad16.as_deref_mut())))?;
    }
    if let Some(g) = input_grad {
        w.back_through(b, weight, grad, g, None, None)?;
    }
    Ok(())
}
