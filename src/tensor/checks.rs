//! Shape and dtype checks shared by every backend, so a mistake gives the same error on each.

use super::{DType, Shape, TensorMeta};
use crate::error::{Result, ensure_shape};

fn same_dtype(op: &'static str, t: &impl TensorMeta, want: DType) -> Result<()> {
    ensure_shape(t.dtype() == want, op, || format!("expected {} tensor, got {}", want.name(), t.dtype().name()))
}

/// Returns (m, n, k) for c[m, n] = op(a)[m, k] · op(b)[k, n].
pub fn matmul(
    a: &impl TensorMeta,
    b: &impl TensorMeta,
    c: &impl TensorMeta,
    trans_a: bool,
    trans_b: bool,
) -> Result<(usize, usize, usize)> {
    for t in [a.dtype(), b.dtype(), c.dtype()] {
        ensure_shape(t == DType::F32, "matmul", || format!("only f32 is supported, got {}", t.name()))?;
    }
    dims("matmul", a, b, c, trans_a, trans_b)
}

/// `matmul` for 16-bit operands: a and b share one 16-bit type; c is f32 or that type.
pub fn matmul16(
    a: &impl TensorMeta,
    b: &impl TensorMeta,
    c: &impl TensorMeta,
    trans_a: bool,
    trans_b: bool,
) -> Result<(usize, usize, usize)> {
    let dt = a.dtype();
    ensure_shape(dt.is_16bit() && b.dtype() == dt, "matmul16", || format!("operands must share one 16-bit type, got {} and {}", dt.name(), b.dtype().name()))?;
    ensure_shape(c.dtype() == DType::F32 || c.dtype() == dt, "matmul16", || format!("output must be f32 or {}, got {}", dt.name(), c.dtype().name()))?;
    dims("matmul16", a, b, c, trans_a, trans_b)
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

pub fn same_shape(op: &'static str, a: &impl TensorMeta, b: &impl TensorMeta) -> Result<()> {
    ensure_shape(a.shape() == b.shape(), op, || format!("{:?} vs {:?}", a.shape(), b.shape()))?;
    ensure_shape(a.dtype() == b.dtype(), op, || format!("{} vs {}", a.dtype().name(), b.dtype().name()))
}

pub fn f32s(op: &'static str, ts: &[&dyn TensorMetaDyn]) -> Result<()> {
    for t in ts {
        ensure_shape(t.dtype_dyn() == DType::F32, op, || format!("expected f32, got {}", t.dtype_dyn().name()))?;
    }
    Ok(())
}

/// Object-safe view of `TensorMeta` for checks over mixed lists.
pub trait TensorMetaDyn {
    fn dtype_dyn(&self) -> DType;
}
impl<T: TensorMeta> TensorMetaDyn for T {
    fn dtype_dyn(&self) -> DType {
        self.dtype()
    }
}

/// A bias for output `y` of any dtype: f32, [1, cols].
pub fn bias_for(op: &'static str, y: &impl TensorMeta, bias: &impl TensorMeta) -> Result<()> {
    same_dtype(op, bias, DType::F32)?;
    ensure_shape(bias.shape() == [1, y.shape()[1]], op, || format!("bias {:?} for output {:?}", bias.shape(), y.shape()))
}

pub fn bias(y: &impl TensorMeta, bias: &impl TensorMeta) -> Result<()> {
    same_dtype("bias_add", y, DType::F32)?;
    same_dtype("bias_add", bias, DType::F32)?;
    ensure_shape(bias.shape() == [1, y.shape()[1]], "bias_add", || format!("bias {:?} for output {:?}", bias.shape(), y.shape()))
}

pub fn vector_out(op: &'static str, out: &impl TensorMeta, len: usize, dtype: DType) -> Result<()> {
    same_dtype(op, out, dtype)?;
    ensure_shape(out.shape() == [1, len], op, || format!("output is {:?}, expected [1, {len}]", out.shape()))
}

pub fn labels(op: &'static str, logits: &impl TensorMeta, labels: &impl TensorMeta) -> Result<()> {
    same_dtype(op, logits, DType::F32)?;
    same_dtype(op, labels, DType::U32)?;
    ensure_shape(labels.shape() == [1, logits.shape()[0]], op, || format!("labels {:?} for logits {:?}", labels.shape(), logits.shape()))
}

pub fn acc_index(op: &'static str, acc: &impl TensorMeta, index: usize, dtype: DType) -> Result<()> {
    same_dtype(op, acc, dtype)?;
    ensure_shape(acc.shape()[0] == 1 && index < acc.shape()[1], op, || format!("index {index} outside accumulator {:?}", acc.shape()))
}

pub fn data_len(op: &'static str, shape: Shape, len: usize) -> Result<()> {
    ensure_shape(shape[0] * shape[1] == len, op, || format!("{len} values for shape {shape:?}"))
}
