//! The one dense forward pass. A layer computes `out = input · W + bias`, then ReLU (every layer
//! but the last); the precision its weight is held in (`LayerKind`) picks the GEMM:
//!
//! - `F32`: `matmul`, then `bias_relu` (one fused pass on a GPU) or `bias_add` (f32 training
//!   and inference);
//! - `Half`: `matmul16` over a 16-bit input, f32 sums, bias and ReLU fused into the epilogue
//!   (autocast training, FP16 inference);
//! - `Int8`: the f32 input quantized (a calibrated scale, or its own absmax), then
//!   `matmul_i8_dequant`, whose epilogue scales, adds the bias and applies ReLU (exercise 9, an
//!   int8 model served).
//!
//! Training (`Mlp::forward`, `train::amp_step`), a CNN's convolutions (`nn::cnn`, each stage's
//! GEMM is a layer with ReLU), validation, the inference server and exercise 9 all run
//! `Dense::forward` through `forward` or `DenseStack`.

use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{Backend, DType, Dequant, Epilogue, MemCategory, QuantGranularity, TensorMeta};

/// One f32 layer as the host holds it: weight [inputs, outputs] row-major and bias [outputs].
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

/// The precision a layer's weight is held in, which picks its GEMM. `T` is a tensor (a layer
/// that owns its weights) or a reference to one (a view of a training model's parameters).
pub enum LayerKind<T> {
    /// An f32 weight [in, out].
    F32(T),
    /// A 16-bit (f16 or bf16) weight [in, out]; the layer's input has the same 16-bit type.
    Half(T),
    /// An int8 weight [in, out] with one f32 scale per output column (`scales`, [1, out]) and
    /// the input's calibrated scale s_x ([1, 1]), or None: each batch's own absmax (dynamic).
    Int8 { weight: T, scales: T, input_scale: Option<T> },
}

/// One dense layer: its weight in its precision, and an f32 bias [1, out].
pub struct Dense<T> {
    pub kind: LayerKind<T>,
    pub bias: T,
}

impl<T> Dense<T> {
    pub fn as_ref(&self) -> Dense<&T> {
        let kind = match &self.kind {
            LayerKind::F32(w) => LayerKind::F32(w),
            LayerKind::Half(w) => LayerKind::Half(w),
            LayerKind::Int8 { weight, scales, input_scale } => LayerKind::Int8 { weight, scales, input_scale: input_scale.as_ref() },
        };
        Dense { kind, bias: &self.bias }
    }

    pub fn weight(&self) -> &T {
        match &self.kind {
            LayerKind::F32(w) | LayerKind::Half(w) | LayerKind::Int8 { weight: w, .. } => w,
        }
    }
}

impl<T: TensorMeta> Dense<T> {
    /// The type the layer reads: the weight's 16-bit type for `Half`, else f32.
    pub fn input_dtype(&self) -> DType {
        match &self.kind {
            LayerKind::Half(w) => w.dtype(),
            LayerKind::F32(_) | LayerKind::Int8 { .. } => DType::F32,
        }
    }

    /// The type the layer writes in a stack: a hidden `Half` layer's output stays 16-bit (the
    /// next 16-bit GEMM reads it), everything else (and the logits) is f32.
    pub fn output_dtype(&self, last: bool) -> DType {
        match &self.kind {
            LayerKind::Half(w) if !last => w.dtype(),
            _ => DType::F32,
        }
    }
}

impl<T: TensorMeta> Dense<&T> {
    /// `out = input · W + bias` (then ReLU when `relu`), by the GEMM of the layer's precision.
    /// `out` is f32, or 16-bit for a `Half` layer (its epilogue rounds as it stores). An `Int8`
    /// layer quantizes `input` into an int8 buffer it allocates for the call.
    pub fn forward<B: Backend<Tensor = T>>(&self, b: &mut B, input: &T, out: &mut T, relu: bool) -> Result<()> {
        match self.kind {
            LayerKind::F32(weight) => {
                b.matmul(input, weight, out, false, false, false)?;
                if relu { b.bias_relu(out, self.bias) } else { b.bias_add(out, self.bias) }
            }
            LayerKind::Half(weight) => b.matmul16(input, weight, out, false, false, Epilogue::Bias { bias: self.bias, relu }, None),
            LayerKind::Int8 { weight, scales, input_scale } => {
                let mut xq = b.empty(input.shape(), DType::I8, MemCategory::Activations)?;
                let dynamic;
                let act_scale = match input_scale {
                    Some(sx) => {
                        b.quantize_with(input, &mut xq, sx)?;
                        sx
                    }
                    None => {
                        // The batch's own s_x stays on the device, like a calibrated one:
                        // nothing is read back between the layers.
                        let mut s = b.empty([1, 1], DType::F32, MemCategory::Activations)?;
                        b.quantize(input, &mut xq, &mut s, QuantGranularity::PerTensor)?;
                        dynamic = s;
                        &dynamic
                    }
                };
                // i32 sums finished into f32 (· s_x·s_W[j], + bias, ReLU) inside the GEMM.
                let epilogue = Dequant { scales, bias: Some(self.bias), relu, act_scale: Some(act_scale) };
                b.matmul_i8_dequant(&xq, weight, out, false, false, epilogue)
            }
        }
    }
}

/// The forward pass through a stack of layers: layer i reads `input` (i = 0) or `outs[i − 1]`
/// and writes `outs[i]`, with ReLU after every layer but the last; the logits end in the last
/// of `outs`. `outs` holds one tensor per layer, in each layer's `output_dtype`.
pub fn forward<'t, B: Backend + 't>(
    b: &mut B,
    layers: impl ExactSizeIterator<Item = Dense<&'t B::Tensor>>,
    input: &B::Tensor,
    outs: &mut [B::Tensor],
) -> Result<()> {
    let last = layers.len().checked_sub(1).ok_or_else(|| Error::InvalidConfig("a model needs at least one layer".into()))?;
    if outs.len() != last + 1 {
        return Err(Error::Internal(format!("a forward pass of {} layers given {} output buffers", last + 1, outs.len())));
    }
    for (i, layer) in layers.enumerate() {
        let (done, rest) = outs.split_at_mut(i);
        let x = if i == 0 { input } else { &done[i - 1] };
        layer.forward(b, x, &mut rest[0], i < last)?;
    }
    Ok(())
}

/// The output of the first `count` layers of a stack (ReLU after each: they are hidden
/// layers), recomputed from `input`: each output is allocated as its layer runs and dropped once
/// the next layer has read it, so at most two are held at once. Activation recomputation's
/// forward: the same `Dense::forward` as the stored pass, so the same values. None when
/// `count` is 0 (the layer's input is `input` itself).
pub fn recompute<'t, B: Backend + 't>(
    b: &mut B,
    layers: impl Iterator<Item = Dense<&'t B::Tensor>>,
    input: &B::Tensor,
    count: usize,
) -> Result<Option<B::Tensor>> {
    let rows = input.shape()[0];
    let mut out: Option<B::Tensor> = None;
    for layer in layers.take(count) {
        // A hidden layer's output type: a `Half` layer's stays 16-bit (`output_dtype`).
        let dtype = match layer.kind {
            LayerKind::Half(w) => w.dtype(),
            LayerKind::F32(_) | LayerKind::Int8 { .. } => DType::F32,
        };
        // Every element is written by the layer: no fill.
        let mut y = b.empty([rows, layer.weight().shape()[1]], dtype, MemCategory::Activations)?;
        layer.forward(b, out.as_ref().unwrap_or(input), &mut y, true)?;
        out = Some(y);
    }
    Ok(out)
}

/// Dense layers on a backend with their weights only (no gradients, no optimizer state): the
/// models inference runs — the server's, and exercise 9's FP32, FP16 and INT8 ones. The int8
/// constructors live with the quantized model (`quant::model`).
pub struct DenseStack<B: Backend> {
    layers: Vec<Dense<B::Tensor>>,
}

impl<B: Backend> DenseStack<B> {
    pub fn new(layers: Vec<Dense<B::Tensor>>) -> Result<Self> {
        if layers.is_empty() {
            return Err(Error::InvalidConfig("a model needs at least one layer".into()));
        }
        Ok(DenseStack { layers })
    }

    /// `layers` in f32, or with their weights rounded once to F16/BF16 (`Half` layers); a
    /// 16-bit type the backend cannot compute is refused by name.
    pub fn float(b: &mut B, layers: &[HostLayer], dtype: DType) -> Result<Self> {
        if dtype != DType::F32 {
            if !dtype.is_16bit() {
                return Err(Error::InvalidConfig(format!("float inference runs in F32, F16 or BF16, not {}", dtype.name())));
            }
            if let Some(why) = b.amp_unavailable(dtype) {
                return Err(Error::Unsupported(format!("{} inference is unavailable on {}: {why}", dtype.name(), b.info().label())));
            }
        }
        let layers = layers.iter().map(|l| float_layer(b, l, dtype)).collect::<Result<_>>()?;
        Self::new(layers)
    }

    pub fn layers(&self) -> &[Dense<B::Tensor>] {
        &self.layers
    }

    /// The f32 logits [rows, classes] of `x` ([rows, inputs] f32).
    pub fn forward(&self, b: &mut B, x: &B::Tensor) -> Result<B::Tensor> {
        self.run(b, x, false)?.pop().ok_or_else(|| Error::Internal("a model without layers".into()))
    }

    /// Every layer's output (after ReLU for hidden layers; 16-bit ones stay 16-bit; the last is
    /// the f32 logits).
    pub fn forward_all(&self, b: &mut B, x: &B::Tensor) -> Result<Vec<B::Tensor>> {
        self.run(b, x, true)
    }

    /// The forward pass into buffers the caller keeps (a server's workspace): see `forward`.
    pub fn forward_into(&self, b: &mut B, x: &B::Tensor, outs: &mut [B::Tensor]) -> Result<()> {
        forward(b, self.layers.iter().map(Dense::as_ref), x, outs)
    }

    /// Allocates each layer's output as it goes (a hidden output is dropped once the next layer
    /// has read it, unless `keep`); an input of another type than a layer reads is cast first
    /// (an f32 batch into a 16-bit model), and the cast copy lives to the end of the pass.
    fn run(&self, b: &mut B, x: &B::Tensor, keep: bool) -> Result<Vec<B::Tensor>> {
        let rows = x.shape()[0];
        let last = self.layers.len() - 1;
        let mut outs: Vec<B::Tensor> = Vec::new();
        let mut casts: Vec<B::Tensor> = Vec::new();
        for (i, layer) in self.layers.iter().enumerate() {
            let want = layer.input_dtype();
            let cast = outs.last().unwrap_or(x).dtype() != want;
            if cast {
                let from = outs.last().unwrap_or(x);
                let mut t = b.empty(from.shape(), want, MemCategory::Activations)?;
                b.cast(from, &mut t, None)?;
                casts.push(t);
            }
            let input = if cast { casts.last().expect("pushed above") } else { outs.last().unwrap_or(x) };
            // Every layer writes its whole output, so it needs no clear.
            let mut y = b.empty([rows, layer.weight().shape()[1]], layer.output_dtype(i == last), MemCategory::Activations)?;
            layer.as_ref().forward(b, input, &mut y, i < last)?;
            if !keep {
                outs.clear();
            }
            outs.push(y);
        }
        Ok(outs)
    }
}

fn float_layer<B: Backend>(b: &mut B, l: &HostLayer, dtype: DType) -> Result<Dense<B::Tensor>> {
    let bias = b.upload_f32(&l.bias, [1, l.shape[1]], MemCategory::Parameters)?;
    let kind = if dtype == DType::F32 {
        LayerKind::F32(b.upload_f32(&l.weight, l.shape, MemCategory::Parameters)?)
    } else {
        let w = b.upload_f32(&l.weight, l.shape, MemCategory::Other)?;
        let mut lo = b.zeros(l.shape, dtype, MemCategory::Parameters)?;
        b.cast(&w, &mut lo, None)?;
        LayerKind::Half(lo)
    };
    Ok(Dense { kind, bias })
}
