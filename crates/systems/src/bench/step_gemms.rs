//! The dense GEMMs of an f32 MLP training step alone: the same shapes on the same backend, timed
//! in windows of 10 like the step itself. Their median against the step's says how close the
//! step comes to its own GEMMs' throughput — what is left to win outside them (issue 40).

use gpulab_core::error::Result;
use gpulab_core::tensor::{Backend, DType, MemCategory};
use gpulab_core::timing::time_op;

/// One layer's operands: its input, weight, output and weight gradient.
struct Layer<T> {
    x: T,
    w: T,
    y: T,
    dw: T,
}

/// Median ms per step of the GEMMs a training step of `widths` runs at `batch` rows: every
/// layer's forward and weight gradient, and every layer's input gradient but the first's
/// (nothing computes the data's). `windows` runs of 10 steps each, by the one op timer. The
/// operands are zeros: a GEMM's time does not depend on its values, and random ones fed back
/// through the input gradient would grow without bound.
pub fn dense_gemms_ms<B: Backend>(b: &mut B, widths: &[usize], batch: usize, windows: usize) -> Result<f64> {
    let zeros = |b: &mut B, shape: [usize; 2]| b.zeros(shape, DType::F32, MemCategory::Activations);
    let mut layers = Vec::new();
    for w in widths.windows(2) {
        let (x, wt) = (zeros(b, [batch, w[0]])?, zeros(b, [w[0], w[1]])?);
        let (y, dw) = (zeros(b, [batch, w[1]])?, zeros(b, [w[0], w[1]])?);
        layers.push(Layer { x, w: wt, y, dw });
    }
    let window = |b: &mut B| -> Result<()> {
        for _ in 0..10 {
            for (i, l) in layers.iter_mut().enumerate() {
                b.matmul(&l.x, &l.w, &mut l.y, false, false, false)?;
                b.matmul(&l.x, &l.y, &mut l.dw, true, false, false)?;
                if i > 0 {
                    b.matmul(&l.y, &l.w, &mut l.x, false, true, false)?;
                }
            }
            b.flush()?;
        }
        Ok(())
    };
    Ok(time_op(b, windows.max(3), window)? * 1e3 / 10.0)
}
