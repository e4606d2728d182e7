//! The convolution ops on the GPU (`ConvOps`): shaders/conv.wgsl, one invocation per output
//! element; the convolution's GEMM is the backend's own matmul.

use super::kernels::Kernel;
use super::{GpuBackend, GpuTensor, u32_len};
use crate::error::Result;
use crate::tensor::{ConvOps, ImageGeom, TensorMeta, checks};

impl GpuBackend {
    /// One conv.wgsl dispatch over the `out` elements, with `g` as the kernel's geometry.
    fn conv_kernel(&mut self, op: &'static str, kernel: Kernel, g: ImageGeom, out_len: usize, bindings: &[(u32, &wgpu::Buffer)]) -> Result<()> {
        // Every index the kernel forms stays below the largest tensor it touches.
        u32_len(g.numel().max(out_len).saturating_mul(9), op)?;
        let params = [u32_len(out_len, op)?, u32_len(g.batch, op)?, u32_len(g.height, op)?, u32_len(g.width, op)?, u32_len(g.channels, op)?];
        let grid = self.grid(out_len);
        self.run(kernel, 0, &params, bindings, grid)
    }

    /// im2col into 16-bit columns: one invocation per stored word (two column elements).
    fn im2col16(&mut self, x: &GpuTensor, cols: &mut GpuTensor, g: ImageGeom) -> Result<()> {
        const OP: &str = "im2col";
        let dt = cols.dtype();
        if let Some(why) = super::amp::unavailable(self, dt) {
            return Err(self.beyond_limits(OP, why));
        }
        u32_len(g.numel().max(cols.numel()).saturating_mul(9), OP)?;
        let params = [u32_len(cols.numel(), OP)?, u32_len(g.batch, OP)?, u32_len(g.height, OP)?, u32_len(g.width, OP)?, u32_len(g.channels, OP)?];
        let grid = self.grid(cols.words());
        self.run_as(dt, Kernel::Im2col16, 0, &params, &[(1, x.buffer()), (2, cols.buffer())], grid)
    }
}

impl ConvOps for GpuBackend {
    fn conv_unavailable(&self) -> Option<String> {
        None
    }

    fn im2col(&mut self, x: &GpuTensor, cols: &mut GpuTensor, g: ImageGeom) -> Result<()> {
        checks::im2col(x, cols, g)?;
        if cols.dtype().is_16bit() {
            return self.im2col16(x, cols, g);
        }
        self.conv_kernel("im2col", Kernel::Im2col, g, cols.numel(), &[(1, x.buffer()), (2, cols.buffer())])
    }

    fn col2im(&mut self, cols: &GpuTensor, x: &mut GpuTensor, g: ImageGeom) -> Result<()> {
        checks::col2im(cols, x, g)?;
        self.conv_kernel("col2im", Kernel::Col2im, g, x.numel(), &[(1, cols.buffer()), (2, x.buffer())])
    }

    fn max_pool(&mut self, x: &GpuTensor, out: &mut GpuTensor, argmax: &mut GpuTensor, g: ImageGeom) -> Result<()> {
        checks::max_pool(x, out, argmax, g)?;
        self.conv_kernel("max_pool", Kernel::MaxPool, g, out.numel(), &[(1, x.buffer()), (2, out.buffer()), (3, argmax.buffer())])
    }

    fn max_pool_backward(&mut self, grad_out: &GpuTensor, argmax: &GpuTensor, grad_in: &mut GpuTensor, g: ImageGeom) -> Result<()> {
        checks::max_pool_backward(grad_out, argmax, grad_in, g)?;
        self.conv_kernel("max_pool_backward", Kernel::MaxPoolBackward, g, grad_in.numel(), &[(1, grad_out.buffer()), (4, argmax.buffer()), (2, grad_in.buffer())])
    }
}
