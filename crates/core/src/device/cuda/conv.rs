//! The CNN's convolution ops on CUDA (`ConvOps`): shaders/cuda/conv.cu, one thread per output
//! element; the convolution's GEMM is the backend's own cuBLAS matmul (matmul16 under autocast).

use super::backend::{CudaBackend, CudaTensor};
use super::core::{grid, u32_of};
use super::kernels::Kernel;
use crate::error::Result;
use crate::tensor::{AmpOps, ConvOps, DType, ImageGeom, TensorMeta, checks};

/// The geometry as conv.cu takes it: height, width, channels.
fn dims(g: ImageGeom) -> Result<(u32, u32, u32)> {
    Ok((u32_of(g.height, "image height")?, u32_of(g.width, "image width")?, u32_of(g.channels, "channels")?))
}

impl ConvOps for CudaBackend {
    fn conv_unavailable(&self) -> Option<String> {
        None
    }

    fn im2col(&mut self, x: &CudaTensor, cols: &mut CudaTensor, g: ImageGeom) -> Result<()> {
        checks::im2col(x, cols, g)?;
        let ((h, w, c), n) = (dims(g)?, cols.numel_u64());
        if n == 0 {
            return Ok(());
        }
        let dt = cols.dtype();
        if dt.is_16bit() {
            if let Some(why) = self.amp_unavailable(dt) {
                return Err(crate::tensor::ops::unsupported(self, "im2col", &why));
            }
            let bf16 = (dt == DType::BF16) as u32;
            return launch!(self, Kernel::Im2col16, grid(n), &x.buf, &mut cols.buf, &n, &h, &w, &c, &bf16);
        }
        launch!(self, Kernel::Im2col, grid(n), &x.buf, &mut cols.buf, &n, &h, &w, &c)
    }

    fn col2im(&mut self, cols: &CudaTensor, x: &mut CudaTensor, g: ImageGeom) -> Result<()> {
        checks::col2im(cols, x, g)?;
        let ((h, w, c), n) = (dims(g)?, x.numel_u64());
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::Col2im, grid(n), &cols.buf, &mut x.buf, &n, &h, &w, &c)
    }

    fn max_pool(&mut self, x: &CudaTensor, out: &mut CudaTensor, argmax: &mut CudaTensor, g: ImageGeom) -> Result<()> {
        checks::max_pool(x, out, argmax, g)?;
        // The winners' indices into x are stored as u32.
        u32_of(g.numel(), "max_pool input elements")?;
        let ((h, w, c), n) = (dims(g)?, out.numel_u64());
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::MaxPool, grid(n), &x.buf, &mut out.buf, &mut argmax.buf, &n, &h, &w, &c)
    }

    fn max_pool_backward(&mut self, grad_out: &CudaTensor, argmax: &CudaTensor, grad_in: &mut CudaTensor, g: ImageGeom) -> Result<()> {
        checks::max_pool_backward(grad_out, argmax, grad_in, g)?;
        u32_of(g.numel(), "max_pool input elements")?;
        let ((h, w, c), n) = (dims(g)?, grad_in.numel_u64());
        if n == 0 {
            return Ok(());
        }
        launch!(self, Kernel::MaxPoolBackward, grid(n), &grad_out.buf, &argmax.buf, &mut grad_in.buf, &n, &h, &w, &c)
    }
}
