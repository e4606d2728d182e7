//! The convolutional front of the small CNN: per stage a 3×3 convolution (padding 1) as im2col +
//! the backend's GEMM, bias, ReLU and a 2×2 max-pool, or one fused op per stage where the
//! backend has one (`ConvOps::fuses_conv_stage`: the CPU's direct convolution); the `Mlp` head
//! (`MlpConfig::conv`) takes the last pooled maps as its input. Forward and backward run on any
//! backend with `ConvOps`. Under autocast (train/amp_step.rs) the convolutions take 16-bit
//! operands (columns, or the fused stage's rounded images, and weight copies) and sum in f32;
//! ReLU, pooling and their gradients stay f32 (the stem has no 16-bit pooling kernels;
//! PyTorch's autocast would also store the convolution's output in 16 bits).

use serde::{Deserialize, Serialize};

use super::dense::{Dense, LayerKind};
use super::{Param, he_normal};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{Backend, CONV_KERNEL, ConvStageGrads, ConvStageSaved, DType, Epilogue, ImageGeom, MemCategory, TensorMeta};

/// The output channels of each convolution of `--model cnn`: conv(C→16) ReLU pool,
/// conv(16→32) ReLU pool, then the dense head.
pub const CNN_CHANNELS: [usize; 2] = [16, 32];

/// The convolution stages of a CNN: their input images and output channels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvConfig {
    /// [channels, height, width] of the input images (the data set's `shape`).
    pub image: [usize; 3],
    /// Output channels of each 3×3 convolution, e.g. [16, 32].
    pub channels: Vec<usize>,
}

/// One stage: a convolution on `input` images (its geometry with batch 1) into `out` channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage {
    pub input: ImageGeom,
    pub out: usize,
}

impl Stage {
    /// Rows of the convolution's weight matrix: 9 · input channels.
    pub fn taps(&self) -> usize {
        CONV_KERNEL * CONV_KERNEL * self.input.channels
    }

    /// Multiply-adds ×2 of the stage's convolution per sample.
    pub fn flops_per_sample(&self) -> f64 {
        2.0 * (self.input.pixels() * self.taps() * self.out) as f64
    }
}

impl ConvConfig {
    pub fn stages(&self) -> Vec<Stage> {
        let [c, h, w] = self.image;
        let mut geom = ImageGeom { batch: 1, height: h, width: w, channels: c };
        self.channels
            .iter()
            .map(|&out| {
                let s = Stage { input: geom, out };
                geom = geom.with_channels(out).pooled();
                s
            })
            .collect()
    }

    /// Values per sample the dense head receives: the last stage's pooled maps.
    pub fn out_features(&self) -> usize {
        self.stages().last().map_or(self.image.iter().product(), |s| s.input.with_channels(s.out).pooled().numel())
    }

    pub fn parameter_count(&self) -> usize {
        self.stages().iter().map(|s| s.taps() * s.out + s.out).sum()
    }

    /// Multiply-adds ×2 of the convolutions' GEMMs per sample (pooling, bias and ReLU, like the
    /// MLP's, are not counted).
    pub fn forward_flops_per_sample(&self) -> f64 {
        self.stages().iter().map(|s| s.flops_per_sample()).sum()
    }

    /// The first stage's forward flops per sample: its input gradient is never computed.
    pub fn first_stage_flops_per_sample(&self) -> f64 {
        self.stages().first().map_or(0.0, |s| s.flops_per_sample())
    }

    /// Refuses images a stage cannot pool (each halves the size) and empty stages.
    pub fn validate(&self) -> Result<()> {
        let [c, h, w] = self.image;
        if c == 0 || self.channels.is_empty() || self.channels.contains(&0) {
            return Err(Error::InvalidConfig(format!(
                "a CNN needs image channels and convolution channels ≥ 1, got image {:?} and channels {:?}",
                self.image, self.channels
            )));
        }
        let need = 1usize << self.channels.len();
        if h < need || w < need {
            return Err(Error::InvalidConfig(format!(
                "model cnn pools {} times, so it needs images of at least {need}×{need} pixels; this data set's are {h}×{w}",
                self.channels.len()
            )));
        }
        Ok(())
    }

    /// e.g. "conv3x3 16-pool-conv3x3 32-pool".
    pub fn describe(&self) -> String {
        self.channels.iter().map(|c| format!("conv3x3 {c}-pool")).collect::<Vec<_>>().join("-")
    }
}

/// The trainable tensors of the convolutions: weights `[9·C_in, C_out]`, biases `[1, C_out]`.
pub struct ConvStem<B: Backend> {
    pub stages: Vec<Stage>,
    pub weights: Vec<Param<B>>,
    pub biases: Vec<Param<B>>,
}

/// He init streams of the convolutions, apart from the dense layers' (which count from 0).
const SEED_LAYER: usize = 1000;

impl<B: Backend> ConvStem<B> {
    /// `state_slots`: the optimizer-state tensors each parameter gets (`Optimizer::state_slots`).
    pub fn new(b: &mut B, cfg: &ConvConfig, state_slots: usize, seed: u64) -> Result<Self> {
        cfg.validate()?;
        if let Some(why) = b.conv_unavailable() {
            return Err(Error::InvalidConfig(format!("model cnn cannot run on {}: {why}", b.info().label())));
        }
        let stages = cfg.stages();
        let (mut weights, mut biases) = (Vec::new(), Vec::new());
        for (i, s) in stages.iter().enumerate() {
            let init = he_normal(s.taps(), s.out, seed, SEED_LAYER + i);
            let w = b.upload_f32(&init, [s.taps(), s.out], MemCategory::Parameters)?;
            weights.push(super::mlp::param(b, w, state_slots)?);
            let bias = b.zeros([1, s.out], DType::F32, MemCategory::Parameters)?;
            biases.push(super::mlp::param(b, bias, state_slots)?);
        }
        Ok(ConvStem { stages, weights, biases })
    }

    /// Every parameter: weight then bias of each stage (the order of `params`).
    pub fn params_mut(&mut self) -> impl Iterator<Item = &mut Param<B>> {
        self.weights.iter_mut().zip(self.biases.iter_mut()).flat_map(|(w, b)| [w, b])
    }

    pub fn params(&self) -> impl Iterator<Item = &Param<B>> {
        self.weights.iter().zip(&self.biases).flat_map(|(w, b)| [w, b])
    }

    /// The stages' outputs from the CHW images `x`; the last pooled maps are `ws.output()`.
    /// A stage is one fused op where the backend fuses it (with `w16`, the weights' 16-bit
    /// copies under autocast, as its weight); else its GEMM is a dense layer with ReLU
    /// (`nn::dense`) over the columns: f32, or with `w16` a `Half` layer over `ws`'s 16-bit
    /// columns, bias and ReLU in its epilogue; pooling stays f32.
    pub fn forward(&self, b: &mut B, x: &B::Tensor, ws: &mut StemWorkspace<B>, w16: Option<&[B::Tensor]>) -> Result<()> {
        for (i, s) in self.stages.iter().enumerate() {
            let g = ImageGeom { batch: ws.batch, ..s.input };
            let (done, rest) = ws.pooled.split_at_mut(i);
            let input = if i == 0 { x } else { &done[i - 1] };
            let weight = w16.map_or(&self.weights[i].value, |w16| &w16[i]);
            if b.fuses_conv_stage(g, s.out, i > 0, weight.dtype()) {
                // One op for the stage (the CPU's direct convolution): the workspace has no
                // columns or convolution output for it.
                b.conv_relu_pool(input, weight, &self.biases[i].value, &mut rest[0], &mut ws.argmax[i], g)?;
                continue;
            }
            let (cols, conv) = (need(&mut ws.cols[i], "columns")?, need(&mut ws.conv[i], "convolution output")?);
            b.im2col(input, cols, g)?;
            let kind = match w16 {
                None => LayerKind::F32(weight),
                Some(_) => LayerKind::Half(weight),
            };
            Dense { kind, bias: &self.biases[i].value }.forward(b, cols, conv, true)?;
            b.max_pool(conv, &mut rest[0], &mut ws.argmax[i], g.with_channels(s.out))?;
        }
        Ok(())
    }

    /// Every parameter's `.grad`, from the gradient of the last pooled maps in
    /// `ws.grad_pooled` (the dense head's input gradient). Under autocast (`half`: the 16-bit
    /// weight copies, and the underflow counter the rounding of each convolution's output
    /// gradient adds to) the GEMMs take 16-bit operands like the forward's.
    pub fn backward(
        &mut self,
        b: &mut B,
        x: &B::Tensor,
        ws: &mut StemWorkspace<B>,
        mut half: Option<(&[B::Tensor], Option<&mut B::Tensor>)>,
    ) -> Result<()> {
        let grads = ws.grads.as_mut().ok_or_else(|| Error::Internal("CNN backward on a forward-only workspace".into()))?;
        for i in (0..self.stages.len()).rev() {
            let s = self.stages[i];
            let g = ImageGeom { batch: ws.batch, ..s.input };
            let w16 = half.as_ref().map(|h| h.0);
            if b.fuses_conv_stage(g, s.out, i > 0, w16.map_or(DType::F32, |w| w[i].dtype())) {
                // The forward ran the fused op (the same test): so does the backward.
                let (before, from) = grads.pooled.split_at_mut(i);
                let input = if i == 0 { x } else { &ws.pooled[i - 1] };
                let w = &mut self.weights[i];
                let weight = w16.map_or(&w.value, |w16| &w16[i]);
                let saved = ConvStageSaved { x: input, weight, pooled: &ws.pooled[i], argmax: &ws.argmax[i] };
                let stats = half.as_mut().and_then(|h| h.1.as_deref_mut());
                let out = ConvStageGrads { weight: &mut w.grad, bias: &mut self.biases[i].grad, x: before.last_mut(), stats };
                b.conv_relu_pool_backward(saved, &from[0], out, g)?;
                continue;
            }
            let (conv, gconv) = (need_ref(&ws.conv[i], "convolution output")?, need(&mut grads.conv[i], "convolution gradient")?);
            let cols = need_ref(&ws.cols[i], "columns")?;
            b.max_pool_backward(&grads.pooled[i], &ws.argmax[i], gconv, g.with_channels(s.out))?;
            b.relu_backward(gconv, conv)?;
            b.sum_cols(gconv, &mut self.biases[i].grad)?;
            let cols_grad = if i > 0 {
                Some(grads.cols[i].as_mut().ok_or_else(|| Error::Internal("CNN stage without its column gradient".into()))?)
            } else {
                None
            };
            match half.as_mut() {
                None => {
                    b.matmul(cols, gconv, &mut self.weights[i].grad, true, false, false)?;
                    if let Some(gcols) = cols_grad {
                        b.matmul(gconv, &self.weights[i].value, gcols, false, true, false)?;
                    }
                }
                Some((w16, stats)) => {
                    let conv16 = grads.conv16.get_mut(i).and_then(Option::as_mut);
                    let conv16 = conv16.ok_or_else(|| Error::Internal("an autocast CNN backward on an f32 workspace".into()))?;
                    b.cast(gconv, conv16, stats.as_deref_mut())?;
                    b.matmul16(cols, conv16, &mut self.weights[i].grad, true, false, Epilogue::None, None)?;
                    if let Some(gcols) = cols_grad {
                        b.matmul16(conv16, &w16[i], gcols, false, true, Epilogue::None, None)?;
                    }
                }
            }
            if let Some(cols) = grads.cols[i].as_ref() {
                b.col2im(cols, &mut grads.pooled[i - 1], g)?;
            }
        }
        Ok(())
    }
}

/// A buffer the op path needs and a fused stage's workspace lacks.
fn need<'a, T>(t: &'a mut Option<T>, what: &str) -> Result<&'a mut T> {
    t.as_mut().ok_or_else(|| Error::Internal(format!("a CNN stage run by ops on a fused stage's workspace (no {what})")))
}

fn need_ref<'a, T>(t: &'a Option<T>, what: &str) -> Result<&'a T> {
    t.as_ref().ok_or_else(|| Error::Internal(format!("a CNN stage run by ops on a fused stage's workspace (no {what})")))
}

/// One batch size's buffers of the convolutions. A stage the backend fuses
/// (`fuses_conv_stage`) has no columns or convolution output (None).
pub struct StemWorkspace<B: Backend> {
    pub batch: usize,
    /// im2col of each stage's input, `[pixels, 9·C_in]`: f32, or 16-bit under autocast.
    pub cols: Vec<Option<B::Tensor>>,
    /// Each convolution's output after bias and ReLU, HWC rows `[pixels, C_out]`.
    pub conv: Vec<Option<B::Tensor>>,
    /// Each stage's pooled maps, CHW `[batch, C_out·H/2·W/2]`; the last feeds the dense head.
    pub pooled: Vec<B::Tensor>,
    /// Each pool's winners (u32, as `pooled`).
    pub argmax: Vec<B::Tensor>,
    /// Gradients, when training.
    pub grads: Option<StemGrads<B>>,
}

/// The gradients of a `StemWorkspace`'s tensors.
pub struct StemGrads<B: Backend> {
    pub pooled: Vec<B::Tensor>,
    pub conv: Vec<Option<B::Tensor>>,
    /// The column gradient of every unfused stage but the first (whose input is the data).
    pub cols: Vec<Option<B::Tensor>>,
    /// Under autocast, `conv` rounded to 16 bits (the backward GEMMs' operand); else empty.
    pub conv16: Vec<Option<B::Tensor>>,
}

impl<B: Backend> StemWorkspace<B> {
    /// The buffers for `batch` images; `gemm` is the convolutions' GEMM operand type (f32, or
    /// the 16-bit type under autocast).
    pub fn new(b: &mut B, cfg: &ConvConfig, batch: usize, with_grads: bool, gemm: DType) -> Result<Self> {
        let stages = cfg.stages();
        let act = MemCategory::Activations;
        let (mut cols, mut conv, mut pooled, mut argmax) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut grads = StemGrads { pooled: Vec::new(), conv: Vec::new(), cols: Vec::new(), conv16: Vec::new() };
        for (i, s) in stages.iter().enumerate() {
            let g = ImageGeom { batch, ..s.input };
            // s.input has batch 1: the pooled maps' values per sample.
            let per_sample = s.input.with_channels(s.out).pooled().numel();
            let shapes = ([g.pixels(), s.taps()], [g.pixels(), s.out], [batch, per_sample]);
            // The forward's and backward's test (`ConvStem::forward`), with the same operands.
            let ops = !b.fuses_conv_stage(g, s.out, i > 0, gemm);
            let op_buf =
                |b: &mut B, shape: [usize; 2], dt: DType, on: bool| if ops && on { b.zeros(shape, dt, act).map(Some) } else { Ok(None) };
            cols.push(op_buf(b, shapes.0, gemm, true)?);
            conv.push(op_buf(b, shapes.1, DType::F32, true)?);
            pooled.push(b.zeros(shapes.2, DType::F32, act)?);
            argmax.push(b.zeros(shapes.2, DType::U32, act)?);
            if with_grads {
                grads.pooled.push(b.zeros(shapes.2, DType::F32, act)?);
                grads.conv.push(op_buf(b, shapes.1, DType::F32, true)?);
                grads.cols.push(op_buf(b, shapes.0, DType::F32, i > 0)?);
                if gemm.is_16bit() {
                    grads.conv16.push(op_buf(b, shapes.1, gemm, true)?);
                }
            }
        }
        Ok(StemWorkspace { batch, cols, conv, pooled, argmax, grads: with_grads.then_some(grads) })
    }

    /// The last pooled maps: the dense head's input.
    pub fn output(&self) -> &B::Tensor {
        self.pooled.last().expect("a CNN has at least one stage")
    }

    /// Where the dense head writes the gradient of `output()`.
    pub fn output_grad(&mut self) -> Option<&mut B::Tensor> {
        self.grads.as_mut().and_then(|g| g.pooled.last_mut())
    }
}

/// Which model trains: the MLP, or the small CNN for image data sets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    #[default]
    Mlp,
    Cnn,
}

impl ModelKind {
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Mlp => "mlp",
            ModelKind::Cnn => "cnn",
        }
    }

    /// The model of this kind for a data set of `image` ([channels, height, width]) samples
    /// with `features` values each: the MLP `features`-hidden-classes, or the CNN's convolutions
    /// (`CNN_CHANNELS`) followed by the same dense layers.
    pub fn config(self, image: [usize; 3], features: usize, hidden: &[usize], classes: usize) -> Result<super::MlpConfig> {
        let conv = match self {
            ModelKind::Mlp => None,
            ModelKind::Cnn => {
                if image.iter().product::<usize>() != features {
                    return Err(Error::InvalidConfig(format!(
                        "model cnn needs an image data set; this one's samples are {features} values, not {image:?} images"
                    )));
                }
                Some(ConvConfig { image, channels: CNN_CHANNELS.to_vec() })
            }
        };
        let cfg = super::MlpConfig { input: features, hidden: hidden.to_vec(), classes, conv };
        cfg.validate()?;
        Ok(cfg)
    }
}

impl std::str::FromStr for ModelKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "mlp" => Ok(ModelKind::Mlp),
            "cnn" => Ok(ModelKind::Cnn),
            _ => Err(Error::InvalidConfig(format!("unknown model {s:?}; use mlp or cnn"))),
        }
    }
}
