use super::{BackendBase, unsupported};
use crate::error::Result;
use crate::tensor::DType;

/// A batch of images as the convolution ops see it: `batch` images of `height`×`width` pixels
/// with `channels` channels. Two layouts of the same numbers appear:
/// - CHW images, a tensor `[batch, channels·height·width]` (the data sets' own layout, and
///   what `max_pool` writes): element (n, c, y, x) at `n·C·H·W + c·H·W + y·W + x`;
/// - HWC rows, a tensor `[batch·height·width, channels]` (what the convolution's GEMM writes):
///   element (n, y, x, c) at `((n·H + y)·W + x)·C + c`.
///
/// The convolutions are 3×3 with stride 1 and zero padding 1 (the output has the input's size);
/// `im2col`'s column `c·9 + ky·3 + kx` holds input channel c at kernel offset (ky, kx), so a
/// weight matrix `[9·C_in, C_out]` turns the columns into the convolution by one GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageGeom {
    pub batch: usize,
    pub height: usize,
    pub width: usize,
    pub channels: usize,
}

/// The convolution's kernel size (3×3, padding 1, stride 1).
pub const CONV_KERNEL: usize = 3;

impl ImageGeom {
    /// Pixels in the whole batch (the rows of the HWC layout and of the im2col matrix).
    pub fn pixels(&self) -> usize {
        self.batch * self.height * self.width
    }

    /// Values in the whole batch.
    pub fn numel(&self) -> usize {
        self.pixels() * self.channels
    }

    /// The geometry after a 2×2 max-pool with stride 2 (a last odd row or column is dropped).
    pub fn pooled(&self) -> ImageGeom {
        ImageGeom { height: self.height / 2, width: self.width / 2, ..*self }
    }

    /// The same pixels with `channels` channels.
    pub fn with_channels(&self, channels: usize) -> ImageGeom {
        ImageGeom { channels, ..*self }
    }
}

/// The convolution ops of a small CNN (`nn::cnn`): 3×3 convolution as im2col + the backend's
/// GEMM, its adjoint col2im, and 2×2 max-pooling with its backward through the winners'
/// indices. Validation of every call lives in `tensor::checks`, so each backend refuses the same
/// calls alike; a backend without them refuses by name through these defaults.
pub trait ConvOps: BackendBase {
    /// Why this backend cannot run the convolution ops, or None when it can (a CNN checks this
    /// before it allocates anything).
    fn conv_unavailable(&self) -> Option<String> {
        Some("the convolution ops (im2col, col2im, max_pool) are not implemented on this backend".into())
    }

    /// cols `[pixels, 9·C]` from CHW images x `[batch, C·H·W]`; out-of-image taps are 0.
    fn im2col(&mut self, x: &Self::Tensor, cols: &mut Self::Tensor, geom: ImageGeom) -> Result<()> {
        let _ = (x, cols, geom);
        Err(refuse(self, "im2col"))
    }

    /// The adjoint of `im2col`: x `[batch, C·H·W]` (CHW) = the sum of every column entry that
    /// `im2col` copied from that pixel (the input gradient of a convolution). Overwrites x.
    fn col2im(&mut self, cols: &Self::Tensor, x: &mut Self::Tensor, geom: ImageGeom) -> Result<()> {
        let _ = (cols, x, geom);
        Err(refuse(self, "col2im"))
    }

    /// 2×2 max-pool, stride 2, of HWC rows x `[pixels, C]` (`geom` is x's) into CHW images out
    /// `[batch, C·(H/2)·(W/2)]`; `argmax` (u32, out's shape) gets each winner's flat index into
    /// x. The first maximum in the order (0,0), (0,1), (1,0), (1,1) wins.
    fn max_pool(&mut self, x: &Self::Tensor, out: &mut Self::Tensor, argmax: &mut Self::Tensor, geom: ImageGeom) -> Result<()> {
        let _ = (x, out, argmax, geom);
        Err(refuse(self, "max_pool"))
    }

    /// The max-pool's backward: grad_in `[pixels, C]` (HWC, `geom` is the pool's input) gets
    /// each output gradient at its winner's index and 0 everywhere else. Overwrites grad_in.
    fn max_pool_backward(
        &mut self,
        grad_out: &Self::Tensor,
        argmax: &Self::Tensor,
        grad_in: &mut Self::Tensor,
        geom: ImageGeom,
    ) -> Result<()> {
        let _ = (grad_out, argmax, grad_in, geom);
        Err(refuse(self, "max_pool_backward"))
    }

    /// Whether `conv_relu_pool` and its backward run a whole stage of the CNN (the
    /// convolution of `geom`'s images into `c_out` channels, bias, ReLU, 2×2 max-pool) as one op
    /// each; `input_grad`: the backward must give the input's gradient too; `operands`: F32, or
    /// under autocast the 16-bit type of the convolution's operands. False: the stage runs as
    /// im2col, the GEMM (`matmul16` under autocast), bias-ReLU and `max_pool` (and their
    /// backward ops).
    fn fuses_conv_stage(&self, geom: ImageGeom, c_out: usize, input_grad: bool, operands: DType) -> bool {
        let _ = (geom, c_out, input_grad, operands);
        false
    }

    /// The fused stage: `pooled` and `argmax`, as `max_pool` writes them, of
    /// relu(conv3x3(x, weight) + bias), for CHW images x `[batch, C·H·W]` of `geom`, weight
    /// `[9·C, C_out]` (im2col's tap order) and bias `[1, C_out]`. A 16-bit weight (autocast's
    /// copy) gives the 16-bit op path's numerics: x rounded to its type, products summed in f32.
    fn conv_relu_pool(
        &mut self,
        x: &Self::Tensor,
        weight: &Self::Tensor,
        bias: &Self::Tensor,
        pooled: &mut Self::Tensor,
        argmax: &mut Self::Tensor,
        geom: ImageGeom,
    ) -> Result<()> {
        let _ = (x, weight, bias, pooled, argmax, geom);
        Err(refuse(self, "conv_relu_pool"))
    }

    /// The fused stage's backward from the pooled maps' gradient: the weight, bias and (when
    /// asked) input gradients, each overwritten. With a 16-bit `saved.weight` (autocast), x and
    /// the convolution's output gradient are rounded to its type (counted in `grads.stats` as
    /// `cast` counts) before the weight and input gradients read them; the bias gradient sums the
    /// unrounded f32 gradient, as `sum_cols` does on the op path.
    fn conv_relu_pool_backward(
        &mut self,
        saved: ConvStageSaved<'_, Self::Tensor>,
        grad_pooled: &Self::Tensor,
        grads: ConvStageGrads<'_, Self::Tensor>,
        geom: ImageGeom,
    ) -> Result<()> {
        let _ = (saved, grad_pooled, grads, geom);
        Err(refuse(self, "conv_relu_pool_backward"))
    }
}

/// The forward's tensors a fused stage's backward reads (`ConvOps::conv_relu_pool_backward`).
pub struct ConvStageSaved<'a, T> {
    /// The stage's CHW input images.
    pub x: &'a T,
    pub weight: &'a T,
    /// The forward's pooled maps and winners.
    pub pooled: &'a T,
    pub argmax: &'a T,
}

/// The gradients a fused stage's backward overwrites: weight `[9·C, C_out]`, bias `[1, C_out]`
/// and, when given, the input images' (CHW, x's shape).
pub struct ConvStageGrads<'a, T> {
    pub weight: &'a mut T,
    pub bias: &'a mut T,
    pub x: Option<&'a mut T>,
    /// Under autocast, the underflow counter (`cast`'s stats) the rounding of the convolution's
    /// output gradient adds to.
    pub stats: Option<&'a mut T>,
}

/// The refusal of the family's defaults, with the backend's own reason.
fn refuse<B: ConvOps + ?Sized>(b: &B, op: &'static str) -> crate::error::Error {
    unsupported(b, op, &b.conv_unavailable().unwrap_or_else(|| "not implemented".into()))
}
