//! Validation shared by every backend, so a mistake gives the same error on each (the
//! conformance test runs one table of calls on all of them). A backend validates with these
//! before it touches data; what it checks itself is only what its hardware limits.
//!
//! Shapes that do not fit are `Error::Shape`; element types that do not fit are `Error::DType`.

use super::{DType, Epilogue, Shape, TensorMeta};
use crate::error::{Result, ensure_dtype, ensure_shape};

/// Fails unless `t` is a `want` tensor.
pub fn dtype(op: &'static str, t: &impl TensorMeta, want: DType) -> Result<()> {
    let got = t.dtype();
    ensure_dtype(got == want, op, || {
        let later = if got.is_quant() { " (int8 tensors are read and written with read_i8 / write_i8 / read_i32)" } else { "" };
        format!("expected a {} tensor, got {}{later}", want.name(), got.name())
    })
}

/// Fails unless `t` is f32.
pub fn f32(op: &'static str, t: &impl TensorMeta) -> Result<()> {
    dtype(op, t, DType::F32)
}

/// Fails for the int8 types, which only `zeros`, `copy` and the `QuantOps` family handle.
pub fn not_quant(op: &'static str, t: &impl TensorMeta) -> Result<()> {
    let dt = t.dtype();
    ensure_dtype(!dt.is_quant(), op, || {
        format!(
            "{} tensors are handled only by zeros, copy and the int8 ops (quantize, dequantize, matmul_i8, read_i8 / write_i8 / read_i32)",
            dt.name()
        )
    })
}

/// Scales for a [rows, cols] tensor: f32, [1, 1] (per tensor) or [1, cols] (per channel).
/// Returns true when they are per channel.
pub fn scales(op: &'static str, scales: &impl TensorMeta, shape: Shape) -> Result<bool> {
    f32(op, scales)?;
    let s = scales.shape();
    ensure_shape(s == [1, 1] || s == [1, shape[1]], op, || {
        format!("scales {s:?} for a {shape:?} tensor: expected [1, 1] or [1, {}]", shape[1])
    })?;
    Ok(s != [1, 1] || shape[1] == 1)
}

/// `quantize`: f32 x into an i8 q of the same shape, scales as `granularity` says.
pub fn quantize(x: &impl TensorMeta, q: &impl TensorMeta, scales: &impl TensorMeta, granularity: super::QuantGranularity) -> Result<()> {
    const OP: &str = "quantize";
    f32(OP, x)?;
    dtype(OP, q, DType::I8)?;
    ensure_shape(x.shape() == q.shape(), OP, || format!("{:?} into {:?}", x.shape(), q.shape()))?;
    f32(OP, scales)?;
    let want = match granularity {
        super::QuantGranularity::PerTensor => [1, 1],
        super::QuantGranularity::PerChannel => [1, x.shape()[1]],
    };
    ensure_shape(scales.shape() == want, OP, || format!("{granularity:?} scales must be {want:?}, got {:?}", scales.shape()))
}

/// `quantize_with`: f32 x into an i8 q of the same shape with given scales; returns true for
/// per-channel scales.
pub fn quantize_with(x: &impl TensorMeta, q: &impl TensorMeta, scales_t: &impl TensorMeta) -> Result<bool> {
    const OP: &str = "quantize_with";
    f32(OP, x)?;
    dtype(OP, q, DType::I8)?;
    ensure_shape(x.shape() == q.shape(), OP, || format!("{:?} into {:?}", x.shape(), q.shape()))?;
    scales(OP, scales_t, x.shape())
}

/// `dequantize`: an i8 or i32 q into an f32 out of the same shape; returns true for per-channel
/// scales.
pub fn dequantize(q: &impl TensorMeta, scales_t: &impl TensorMeta, out: &impl TensorMeta) -> Result<bool> {
    const OP: &str = "dequantize";
    ensure_dtype(q.dtype().is_quant(), OP, || format!("expected an i8 or i32 tensor, got {}", q.dtype().name()))?;
    f32(OP, out)?;
    ensure_shape(q.shape() == out.shape(), OP, || format!("{:?} into {:?}", q.shape(), out.shape()))?;
    scales(OP, scales_t, q.shape())
}

/// `matmul_i8`: i8 operands, an i32 output; returns (m, n, k).
pub fn matmul_i8(
    a: &impl TensorMeta,
    b: &impl TensorMeta,
    c: &impl TensorMeta,
    trans_a: bool,
    trans_b: bool,
) -> Result<(usize, usize, usize)> {
    const OP: &str = "matmul_i8";
    dtype(OP, a, DType::I8)?;
    dtype(OP, b, DType::I8)?;
    dtype(OP, c, DType::I32)?;
    dims(OP, a, b, c, trans_a, trans_b)
}

/// `matmul_i8_dequant`: i8 operands, an f32 output, the epilogue's scales ([1, 1] or [1, n]
/// f32) and bias ([1, n] f32); returns (m, n, k) and whether the scales are per column.
pub fn matmul_i8_dequant<T: TensorMeta>(
    a: &T,
    b: &T,
    out: &T,
    trans_a: bool,
    trans_b: bool,
    epi: &super::Dequant<'_, T>,
) -> Result<((usize, usize, usize), bool)> {
    const OP: &str = "matmul_i8_dequant";
    dtype(OP, a, DType::I8)?;
    dtype(OP, b, DType::I8)?;
    ensure_dtype(out.dtype() == DType::F32, OP, || {
        format!("the fused epilogue writes an f32 output, got {} (matmul_i8 writes the raw i32 sums)", out.dtype().name())
    })?;
    let mnk = dims(OP, a, b, out, trans_a, trans_b)?;
    let per_column = scales(OP, epi.scales, out.shape())?;
    if let Some(bias) = epi.bias {
        bias_for(OP, out, bias)?;
    }
    if let Some(s) = epi.act_scale {
        dtype(OP, s, DType::F32)?;
        ensure_shape(s.shape() == [1, 1], OP, || format!("the activation scale is one value, [1, 1], got {:?}", s.shape()))?;
    }
    Ok((mnk, per_column))
}

/// Bytes a tensor of this shape and type holds, refusing sizes that overflow.
pub fn bytes(op: &'static str, shape: Shape, dtype: DType) -> Result<u64> {
    shape[0]
        .checked_mul(shape[1])
        .and_then(|n| n.checked_mul(dtype.size_bytes()))
        .and_then(|b| u64::try_from(b).ok())
        .ok_or_else(|| crate::error::Error::Shape { op, detail: format!("{shape:?} {} elements overflow the address space", dtype.name()) })
}

/// Returns (m, n, k) for c[m, n] = op(a)[m, k] · op(b)[k, n].
pub fn matmul(
    a: &impl TensorMeta,
    b: &impl TensorMeta,
    c: &impl TensorMeta,
    trans_a: bool,
    trans_b: bool,
) -> Result<(usize, usize, usize)> {
    f32("matmul", a)?;
    f32("matmul", b)?;
    f32("matmul", c)?;
    dims("matmul", a, b, c, trans_a, trans_b)
}

/// `matmul` for 16-bit operands: a and b share one 16-bit type; c is f32 or that type.
///
/// The epilogue and `stats` rules, one for every backend:
/// - a bias is f32 [1, n], for any output type;
/// - a ReLU mask is the ReLU's 16-bit output [m, n], and only for a 16-bit output: it fuses
///   the backward of a 16-bit ReLU, whose gradient is stored in 16 bits;
/// - `stats` ([1, 2] u32) count values rounded to 16 bits, so they need a 16-bit output (an
///   f32 output rounds nothing and would count nothing useful).
pub fn matmul16<T: TensorMeta>(
    a: &T,
    b: &T,
    c: &T,
    trans_a: bool,
    trans_b: bool,
    epilogue: &Epilogue<'_, T>,
    stats: Option<&T>,
) -> Result<(usize, usize, usize)> {
    const OP: &str = "matmul16";
    let dt = a.dtype();
    ensure_dtype(dt.is_16bit() && b.dtype() == dt, OP, || {
        format!("operands must share one 16-bit type, got {} and {}", dt.name(), b.dtype().name())
    })?;
    ensure_dtype(c.dtype() == DType::F32 || c.dtype() == dt, OP, || {
        format!("output must be f32 or {}, got {}", dt.name(), c.dtype().name())
    })?;
    let (m, n, k) = dims(OP, a, b, c, trans_a, trans_b)?;
    match epilogue {
        Epilogue::None => {}
        Epilogue::Bias { bias, .. } => bias_for(OP, c, *bias)?,
        Epilogue::ReluMask(act) => {
            ensure_dtype(c.dtype() == dt, OP, || {
                format!("a ReLU mask needs a {} output (it fuses a 16-bit ReLU's backward), got {}", dt.name(), c.dtype().name())
            })?;
            ensure_dtype(act.dtype() == dt, OP, || format!("the ReLU mask must be {}, got {}", dt.name(), act.dtype().name()))?;
            ensure_shape(act.shape() == [m, n], OP, || format!("ReLU mask {:?} for output {:?}", act.shape(), [m, n]))?;
        }
    }
    if let Some(s) = stats {
        ensure_dtype(c.dtype() == dt, OP, || format!("stats count values rounded to {}; an f32 output rounds nothing", dt.name()))?;
        acc_index(OP, s, 1, DType::U32)?;
    }
    Ok((m, n, k))
}

/// A cast between f32 and a 16-bit type, either way; returns the 16-bit type. `stats` only for
/// f32 → 16-bit, the direction that rounds.
pub fn cast<T: TensorMeta>(x: &T, out: &T, stats: Option<&T>) -> Result<DType> {
    ensure_shape(x.shape() == out.shape(), "cast", || format!("{:?} into {:?}", x.shape(), out.shape()))?;
    let (from, to) = (x.dtype(), out.dtype());
    let dt = match (from, to) {
        (DType::F32, dt) | (dt, DType::F32) if dt.is_16bit() => dt,
        _ => return Err(crate::error::Error::DType { op: "cast", detail: format!("cannot cast {} to {}", from.name(), to.name()) }),
    };
    if let Some(s) = stats {
        ensure_dtype(to.is_16bit(), "cast", || {
            format!("stats count values rounded to 16 bits; casting {} to f32 rounds nothing", from.name())
        })?;
        acc_index("cast", s, 1, DType::U32)?;
    }
    Ok(dt)
}

/// The loss scaler's state tensor: `[1, STATE_WORDS]` U32.
pub fn scaler_state(op: &'static str, state: &impl TensorMeta) -> Result<()> {
    acc_index(op, state, crate::tensor::scaler::STATE_WORDS - 1, DType::U32)?;
    ensure_shape(state.shape() == [1, crate::tensor::scaler::STATE_WORDS], op, || {
        format!("the scaler state is [1, {}], got {:?}", crate::tensor::scaler::STATE_WORDS, state.shape())
    })
}

/// GradScaler's unscale: f32 gradients and the scaler state.
pub fn unscale_check(g: &impl TensorMeta, state: &impl TensorMeta) -> Result<()> {
    f32("unscale_check", g)?;
    scaler_state("unscale_check", state)
}

/// `scaler_update`: the state and a U32 log with `slot` inside it.
pub fn scaler_update(state: &impl TensorMeta, log: &impl TensorMeta, slot: usize) -> Result<()> {
    scaler_state("scaler_update", state)?;
    acc_index("scaler_update", log, slot, DType::U32)
}

/// `amp_update`: f32 parameter, gradient and slots of one shape (as many slots as the optimizer
/// keeps), the scaler state, an AdamW factor table of at least STEPS + 1 rows (checked by row
/// count only: the step count lives on the device), and a 16-bit copy of the parameter's shape.
/// Returns the 16-bit copy's type, if any.
pub fn amp_update<T: TensorMeta>(
    p: &T,
    g: &T,
    slots: &[T],
    opt: &crate::tensor::scaler::AmpOptimizer<'_, T>,
    state: &T,
    w16: Option<&T>,
) -> Result<Option<DType>> {
    use crate::tensor::scaler::AmpOptimizer;
    f32("amp_update", p)?;
    f32("amp_update", g)?;
    same_shape("amp_update", p, g)?;
    let want = match opt {
        AmpOptimizer::Sgd(_) => 1,
        AmpOptimizer::AdamW(_, table) => {
            f32("amp_update", *table)?;
            ensure_shape(table.shape()[0] == 1 && table.shape()[1] % 2 == 0 && table.shape()[1] > 0, "amp_update", || {
                format!("the AdamW factor table is [1, 2·steps], got {:?}", table.shape())
            })?;
            2
        }
    };
    ensure_shape(slots.len() == want, "amp_update", || format!("the optimizer keeps {want} state tensors, got {}", slots.len()))?;
    for s in slots {
        f32("amp_update", s)?;
        same_shape("amp_update", p, s)?;
    }
    scaler_state("amp_update", state)?;
    match w16 {
        Some(w) => {
            ensure_dtype(w.dtype().is_16bit(), "amp_update", || format!("the working copy must be f16 or bf16, got {}", w.dtype().name()))?;
            ensure_shape(w.shape() == p.shape(), "amp_update", || {
                format!("the working copy is {:?}, the parameter {:?}", w.shape(), p.shape())
            })?;
            Ok(Some(w.dtype()))
        }
        None => Ok(None),
    }
}

fn dims(
    op: &'static str,
    a: &impl TensorMeta,
    b: &impl TensorMeta,
    c: &impl TensorMeta,
    trans_a: bool,
    trans_b: bool,
) -> Result<(usize, usize, usize)> {
    let [ar, ac] = a.shape();
    let [br, bc] = b.shape();
    let (m, k) = if trans_a { (ac, ar) } else { (ar, ac) };
    let (k2, n) = if trans_b { (bc, br) } else { (br, bc) };
    ensure_shape(k == k2, op, || format!("inner dimensions differ: a {:?} (T={trans_a}), b {:?} (T={trans_b})", a.shape(), b.shape()))?;
    ensure_shape(c.shape() == [m, n], op, || format!("output is {:?}, expected {:?}", c.shape(), [m, n]))?;
    Ok((m, n, k))
}

/// An optimizer's state count per parameter (SGD keeps 1 tensor, AdamW 2).
pub fn opt_slots(op: &'static str, got: usize, want: usize) -> Result<()> {
    ensure_shape(got == want, op, || format!("the optimizer keeps {want} state tensors, got {got}"))
}

/// Same shape and same element type.
pub fn same_shape(op: &'static str, a: &impl TensorMeta, b: &impl TensorMeta) -> Result<()> {
    same_dims(op, a, b)?;
    ensure_dtype(a.dtype() == b.dtype(), op, || format!("{} vs {}", a.dtype().name(), b.dtype().name()))
}

/// Equal shapes, of any dtypes.
pub fn same_dims(op: &'static str, a: &impl TensorMeta, b: &impl TensorMeta) -> Result<()> {
    ensure_shape(a.shape() == b.shape(), op, || format!("{:?} vs {:?}", a.shape(), b.shape()))
}

/// A bias for output `y` of any dtype: f32, [1, cols].
pub fn bias_for(op: &'static str, y: &impl TensorMeta, bias: &impl TensorMeta) -> Result<()> {
    dtype(op, bias, DType::F32)?;
    ensure_shape(bias.shape() == [1, y.shape()[1]], op, || format!("bias {:?} for output {:?}", bias.shape(), y.shape()))
}

pub fn bias(y: &impl TensorMeta, bias: &impl TensorMeta) -> Result<()> {
    f32("bias_add", y)?;
    bias_for("bias_add", y, bias)
}

pub fn vector_out(op: &'static str, out: &impl TensorMeta, len: usize, dtype: DType) -> Result<()> {
    self::dtype(op, out, dtype)?;
    ensure_shape(out.shape() == [1, len], op, || format!("output is {:?}, expected [1, {len}]", out.shape()))
}

/// Rows that an op reduces to one winner (argmax) need at least one column.
pub fn nonempty_rows(op: &'static str, x: &impl TensorMeta) -> Result<()> {
    ensure_shape(x.shape()[1] > 0, op, || "a row needs at least one column".into())
}

/// f32 logits [rows, classes ≥ 1] with u32 labels [1, rows].
pub fn labels(op: &'static str, logits: &impl TensorMeta, labels: &impl TensorMeta) -> Result<()> {
    f32(op, logits)?;
    dtype(op, labels, DType::U32)?;
    nonempty_rows(op, logits)?;
    ensure_shape(labels.shape() == [1, logits.shape()[0]], op, || format!("labels {:?} for logits {:?}", labels.shape(), logits.shape()))
}

pub fn acc_index(op: &'static str, acc: &impl TensorMeta, index: usize, dtype: DType) -> Result<()> {
    self::dtype(op, acc, dtype)?;
    ensure_shape(acc.shape()[0] == 1 && index < acc.shape()[1], op, || format!("index {index} outside accumulator {:?}", acc.shape()))
}

pub fn data_len(op: &'static str, shape: Shape, len: usize) -> Result<()> {
    ensure_shape(shape[0].checked_mul(shape[1]) == Some(len), op, || format!("{len} values for shape {shape:?}"))
}

/// The shape a tensor of `geom` must have in one of the convolution ops' layouts, refusing an
/// empty geometry and sizes that overflow.
fn image_shape(op: &'static str, geom: super::ImageGeom, what: &str, rows: usize, cols: usize) -> Result<Shape> {
    let super::ImageGeom { batch, height, width, channels } = geom;
    ensure_shape(batch > 0 && height > 0 && width > 0 && channels > 0, op, || format!("image geometry {geom:?} has an empty dimension"))?;
    let shape = [rows, cols];
    bytes(op, shape, DType::F32)
        .map_err(|_| crate::error::Error::Shape { op, detail: format!("{what} of {geom:?} overflows the address space") })?;
    Ok(shape)
}

fn expect_shape(op: &'static str, t: &impl TensorMeta, want: Shape, what: &str) -> Result<()> {
    ensure_shape(t.shape() == want, op, || format!("{what} is {:?}, expected {want:?}", t.shape()))
}

/// CHW images `[batch, C·H·W]` of `geom`.
fn chw(op: &'static str, geom: super::ImageGeom) -> Result<Shape> {
    let per = geom.channels.checked_mul(geom.height).and_then(|v| v.checked_mul(geom.width)).unwrap_or(usize::MAX);
    image_shape(op, geom, "the CHW images", geom.batch, per)
}

/// HWC rows `[pixels, C]` of `geom`.
fn hwc(op: &'static str, geom: super::ImageGeom) -> Result<Shape> {
    let pixels = geom.batch.checked_mul(geom.height).and_then(|v| v.checked_mul(geom.width)).unwrap_or(usize::MAX);
    image_shape(op, geom, "the HWC rows", pixels, geom.channels)
}

/// `im2col`: f32 CHW x into cols `[pixels, 9·C]` of f32 or a 16-bit type (a mixed-precision
/// convolution rounds its columns as it gathers them); returns (x's shape, cols' shape).
pub fn im2col(x: &impl TensorMeta, cols: &impl TensorMeta, geom: super::ImageGeom) -> Result<(Shape, Shape)> {
    conv_shapes("im2col", x, cols, geom, cols.dtype().is_16bit())
}

/// `col2im`: the same shapes as `im2col`, the other way.
pub fn col2im(cols: &impl TensorMeta, x: &impl TensorMeta, geom: super::ImageGeom) -> Result<(Shape, Shape)> {
    conv_shapes("col2im", x, cols, geom, false)
}

/// The shapes of im2col's pair; `cols16` lets the columns be 16-bit instead of f32.
fn conv_shapes(
    op: &'static str,
    x: &impl TensorMeta,
    cols: &impl TensorMeta,
    geom: super::ImageGeom,
    cols16: bool,
) -> Result<(Shape, Shape)> {
    f32(op, x)?;
    if !cols16 {
        f32(op, cols)?;
    }
    let xs = chw(op, geom)?;
    let k = geom.channels.saturating_mul(super::CONV_KERNEL * super::CONV_KERNEL);
    let cs = hwc(op, geom.with_channels(k))?;
    expect_shape(op, x, xs, "the CHW images")?;
    expect_shape(op, cols, cs, "the columns")?;
    Ok((xs, cs))
}

/// `max_pool`: f32 HWC x of `geom` (at least 2×2) into f32 CHW out and u32 argmax of the pooled
/// geometry; returns the pooled geometry.
pub fn max_pool(x: &impl TensorMeta, out: &impl TensorMeta, argmax: &impl TensorMeta, geom: super::ImageGeom) -> Result<super::ImageGeom> {
    pool_shapes("max_pool", x, out, argmax, geom)
}

/// `max_pool_backward`: f32 grad_out and u32 argmax of the pooled geometry, f32 HWC grad_in of
/// `geom`; returns the pooled geometry.
pub fn max_pool_backward(
    grad_out: &impl TensorMeta,
    argmax: &impl TensorMeta,
    grad_in: &impl TensorMeta,
    geom: super::ImageGeom,
) -> Result<super::ImageGeom> {
    pool_shapes("max_pool_backward", grad_in, grad_out, argmax, geom)
}

fn pool_shapes(
    op: &'static str,
    full: &impl TensorMeta,
    pooled: &impl TensorMeta,
    argmax: &impl TensorMeta,
    geom: super::ImageGeom,
) -> Result<super::ImageGeom> {
    f32(op, full)?;
    f32(op, pooled)?;
    dtype(op, argmax, DType::U32)?;
    ensure_shape(geom.height >= 2 && geom.width >= 2, op, || {
        format!("a 2×2 pool needs images of at least 2×2 pixels, got {}×{}", geom.height, geom.width)
    })?;
    let p = geom.pooled();
    expect_shape(op, full, hwc(op, geom)?, "the HWC tensor")?;
    let ps = chw(op, p)?;
    expect_shape(op, pooled, ps, "the pooled tensor")?;
    expect_shape(op, argmax, ps, "argmax")?;
    Ok(p)
}

/// A fused convolution stage (`conv_relu_pool`): f32 CHW x of `geom`, weight `[9·C, C_out]`
/// (f32, or autocast's 16-bit copy), bias `[1, C_out]`, and the pooled maps (f32) and winners
/// (u32) of the pooled geometry with C_out channels; returns C_out.
pub fn conv_stage(
    op: &'static str,
    x: &impl TensorMeta,
    weight: &impl TensorMeta,
    pooled: &impl TensorMeta,
    argmax: &impl TensorMeta,
    geom: super::ImageGeom,
) -> Result<usize> {
    f32(op, x)?;
    if !weight.dtype().is_16bit() {
        f32(op, weight)?;
    }
    f32(op, pooled)?;
    dtype(op, argmax, DType::U32)?;
    let k = geom.channels.saturating_mul(super::CONV_KERNEL * super::CONV_KERNEL);
    let c_out = weight.shape()[1];
    ensure_shape(weight.shape()[0] == k && c_out > 0, op, || format!("the weight is {:?}, expected [{k}, C_out ≥ 1]", weight.shape()))?;
    ensure_shape(geom.height >= 2 && geom.width >= 2, op, || {
        format!("a 2×2 pool needs images of at least 2×2 pixels, got {}×{}", geom.height, geom.width)
    })?;
    expect_shape(op, x, chw(op, geom)?, "the CHW images")?;
    let ps = chw(op, geom.with_channels(c_out).pooled())?;
    expect_shape(op, pooled, ps, "the pooled maps")?;
    expect_shape(op, argmax, ps, "argmax")?;
    Ok(c_out)
}
