//! The convolution ops on the GPU (`ConvOps`): shaders/conv.wgsl, one invocation per output
//! element; the convolution's GEMM is the backend's own matmul.

use super::kernels::Kernel;
use super::{GpuBackend, GpuTensor, u32_len};
use crate::error::Result;
use crate::tensor::{ConvOps, DType, ImageGeom, TensorMeta, checks};

impl GpuBackend {
    /// One conv.wgsl dispatch over the `out` elements, with `g` as the kernel's geometry.
    fn conv_kernel(
        &mut self,
        op: &'static str,
        kernel: Kernel,
        g: ImageGeom,
        out_len: usize,
        bindings: &[(u32, &wgpu::Buffer)],
    ) -> Result<()> {
        self.conv_kernel_as(DType::F32, op, kernel, g, out_len, out_len, bindings)
    }

    /// `conv_kernel` for a kernel instantiated for `dt`, with `invocations` threads (conv16's
    /// im2col stores two elements per invocation).
    #[allow(clippy::too_many_arguments)]
    fn conv_kernel_as(
        &mut self,
        dt: DType,
        op: &'static str,
        kernel: Kernel,
        g: ImageGeom,
        out_len: usize,
        invocations: usize,
        bindings: &[(u32, &wgpu::Buffer)],
    ) -> Result<()> {
        // Every index the kernel forms stays below the largest tensor it touches.
        u32_len(g.numel().max(out_len).saturating_mul(9), op)?;
        let params =
            [u32_len(out_len, op)?, u32_len(g.batch, op)?, u32_len(g.height, op)?, u32_len(g.width, op)?, u32_len(g.channels, op)?];
        let grid = self.grid(invocations);
        self.run_as(dt, kernel, 0, &params, bindings, grid)
    }

    /// im2col into 16-bit columns: one invocation per stored word (two column elements).
    fn im2col16(&mut self, x: &GpuTensor, cols: &mut GpuTensor, g: ImageGeom) -> Result<()> {
        let dt = cols.dtype();
        if let Some(why) = super::amp::unavailable(self, dt) {
            return Err(self.beyond_limits("im2col", why));
        }
        self.conv_kernel_as(dt, "im2col", Kernel::Im2col16, g, cols.numel(), cols.words(), &[(1, x.buffer()), (2, cols.buffer())])
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
        self.conv_kernel(
            "max_pool_backward",
            Kernel::MaxPoolBackward,
            g,
            grad_in.numel(),
            &[(1, grad_out.buffer()), (4, argmax.buffer()), (2, grad_in.buffer())],
        )
    }
}
