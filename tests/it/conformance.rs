//! One table of valid and invalid calls, run on the CPU and on the GPU: both backends must
//! accept the same calls and refuse the others with the same error message (validation lives
//! once, in `tensor::checks`). The CPU's outcome must also be the one the table expects, so
//! a check that silently disappears from both backends fails too.

use gpulab::Error;
use gpulab::device::CpuBackend;
use gpulab::tensor::{DType, Dequant, Epilogue, ImageGeom, MemCategory as M, QuantGranularity, Shape, prelude::*};

use crate::common::backend_tests;
use gpulab::tensor::scaler::{AmpOptimizer, ScalerRule};

const RULE: ScalerRule = ScalerRule { scaling: true, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 3, min_scale: 1.0 };
const SGD: gpulab::tensor::Sgd = gpulab::tensor::Sgd { lr: 0.1, momentum: 0.9, weight_decay: 0.0 };

#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    Ok,
    Shape,
    DType,
    /// `Error::UnsupportedOp` for this op (none in the table today: kept for the next op
    /// family declared before it is implemented); the message names the backend, so only the op and
    /// the variant are compared across backends.
    #[allow(dead_code)]
    Unsupported(&'static str),
}

/// What a call did, in a form comparable across backends.
#[derive(Debug, PartialEq)]
enum Outcome {
    Ok,
    Err { kind: &'static str, message: String },
}

fn outcome(r: gpulab::Result<()>) -> Outcome {
    match r {
        Ok(()) => Outcome::Ok,
        Err(e) => {
            let kind = match &e {
                Error::Shape { .. } => "shape",
                Error::DType { .. } => "dtype",
                Error::UnsupportedOp { op, .. } => return Outcome::Err { kind: "unsupported", message: op.to_string() },
                _ => "other",
            };
            Outcome::Err { kind, message: e.to_string() }
        }
    }
}

fn matches(expect: Expect, got: &Outcome) -> bool {
    match (expect, got) {
        (Expect::Ok, Outcome::Ok) => true,
        (Expect::Shape, Outcome::Err { kind, .. }) => *kind == "shape",
        (Expect::DType, Outcome::Err { kind, .. }) => *kind == "dtype",
        (Expect::Unsupported(op), Outcome::Err { kind, message }) => *kind == "unsupported" && message == op,
        _ => false,
    }
}

type Call<B> = Box<dyn Fn(&mut B) -> gpulab::Result<()>>;

fn t<B: Backend>(b: &mut B, shape: Shape, dt: DType) -> gpulab::Result<B::Tensor> {
    b.zeros(shape, dt, M::Other)
}

use DType::{BF16, F32, I8, I32, U32};

/// The table: (case, expected outcome, call). Every call builds its own tensors.
#[allow(unused_mut)]
fn table<B: Backend + 'static>() -> Vec<(&'static str, Expect, Call<B>)> {
    let mut v: Vec<(&'static str, Expect, Call<B>)> = Vec::new();
    macro_rules! case {
        ($name:expr, $expect:expr, |$b:ident| $body:expr) => {
            v.push(($name, $expect, Box::new(|$b: &mut B| $body)))
        };
    }
    // Host transfers.
    case!("upload: wrong length", Expect::Shape, |b| b.upload_f32(&[1.0; 5], [2, 3], M::Other).map(drop));
    case!("upload_u32: wrong length", Expect::Shape, |b| b.upload_u32(&[1; 7], [2, 3], M::Other).map(drop));
    case!("write_f32: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        b.write_f32(&mut x0, &[1.0; 6])
    });
    case!("write_f32: wrong length", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        b.write_f32(&mut x0, &[1.0; 5])
    });
    case!("write_f32: into u32", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], U32)?;
        b.write_f32(&mut x0, &[1.0; 6])
    });
    case!("write_f32: into i8", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], I8)?;
        b.write_f32(&mut x0, &[1.0; 6])
    });
    case!("write_u32: into f32", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        b.write_u32(&mut x0, &[1; 6])
    });
    case!("read_u32: of f32", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        b.read_u32(&x0).map(drop)
    });
    case!("read_f32: of u32", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], U32)?;
        b.read_f32(&x0).map(drop)
    });
    case!("read_f32: of i8", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], I8)?;
        b.read_f32(&x0).map(drop)
    });
    case!("read_u32: of i32", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], I32)?;
        b.read_u32(&x0).map(drop)
    });
    case!("zeros: i8", Expect::Ok, |b| t(b, [3, 5], I8).map(drop));
    case!("zeros: i32", Expect::Ok, |b| t(b, [3, 5], I32).map(drop));
    // matmul
    case!("matmul: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [3, 4], F32)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.matmul(&x0, &x1, &mut x2, false, false, false)
    });
    case!("matmul: transposed ok", Expect::Ok, |b| {
        let mut x0 = t(b, [3, 2], F32)?;
        let mut x1 = t(b, [4, 3], F32)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.matmul(&x0, &x1, &mut x2, true, true, true)
    });
    case!("matmul: inner dims", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [4, 4], F32)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.matmul(&x0, &x1, &mut x2, false, false, false)
    });
    case!("matmul: output shape", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [3, 4], F32)?;
        let mut x2 = t(b, [4, 2], F32)?;
        b.matmul(&x0, &x1, &mut x2, false, false, false)
    });
    case!("matmul: u32 operand", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], U32)?;
        let mut x1 = t(b, [3, 4], F32)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.matmul(&x0, &x1, &mut x2, false, false, false)
    });
    case!("matmul: bf16 output", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [3, 4], F32)?;
        let mut x2 = t(b, [2, 4], BF16)?;
        b.matmul(&x0, &x1, &mut x2, false, false, false)
    });
    // Element-wise and reductions.
    case!("bias_add: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 3], F32)?;
        b.bias_add(&mut x0, &x1)
    });
    case!("bias_add: bias length", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], F32)?;
        b.bias_add(&mut x0, &x1)
    });
    case!("bias_add: u32 bias", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 3], U32)?;
        b.bias_add(&mut x0, &x1)
    });
    case!("relu: u32", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], U32)?;
        b.relu(&mut x0)
    });
    case!("relu_backward: shapes", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [3, 2], F32)?;
        b.relu_backward(&mut x0, &x1)
    });
    case!("relu_backward: dtypes", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], U32)?;
        b.relu_backward(&mut x0, &x1)
    });
    case!("softmax_xent: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], U32)?;
        let mut x2 = t(b, [1, 2], F32)?;
        let mut x3 = t(b, [2, 3], F32)?;
        b.softmax_xent(&x0, &x1, &mut x2, Some(&mut x3), 1.0)
    });
    case!("softmax_xent: f32 labels", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], F32)?;
        let mut x2 = t(b, [1, 2], F32)?;
        b.softmax_xent(&x0, &x1, &mut x2, None, 1.0)
    });
    case!("softmax_xent: label count", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 3], U32)?;
        let mut x2 = t(b, [1, 2], F32)?;
        b.softmax_xent(&x0, &x1, &mut x2, None, 1.0)
    });
    case!("softmax_xent: loss length", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], U32)?;
        let mut x2 = t(b, [1, 3], F32)?;
        b.softmax_xent(&x0, &x1, &mut x2, None, 1.0)
    });
    case!("softmax_xent: grad shape", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], U32)?;
        let mut x2 = t(b, [1, 2], F32)?;
        let mut x3 = t(b, [3, 2], F32)?;
        b.softmax_xent(&x0, &x1, &mut x2, Some(&mut x3), 1.0)
    });
    case!("softmax_xent: no classes", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 0], F32)?;
        let mut x1 = t(b, [1, 2], U32)?;
        let mut x2 = t(b, [1, 2], F32)?;
        b.softmax_xent(&x0, &x1, &mut x2, None, 1.0)
    });
    case!("sum_cols: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 3], F32)?;
        b.sum_cols(&x0, &mut x1)
    });
    case!("sum_cols: bf16 input", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [1, 3], F32)?;
        b.sum_cols(&x0, &mut x1)
    });
    case!("sum_cols: no columns", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 0], F32)?;
        let mut x1 = t(b, [1, 0], F32)?;
        b.sum_cols(&x0, &mut x1)
    });
    case!("sum_cols: output length", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], F32)?;
        b.sum_cols(&x0, &mut x1)
    });
    case!("sum_cols: u32 input", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], U32)?;
        let mut x1 = t(b, [1, 3], F32)?;
        b.sum_cols(&x0, &mut x1)
    });
    case!("sum_rows: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], F32)?;
        b.sum_rows(&x0, &mut x1)
    });
    case!("sum_rows: no columns", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 0], F32)?;
        let mut x1 = t(b, [1, 2], F32)?;
        b.sum_rows(&x0, &mut x1)
    });
    case!("sum_rows: u32 output", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], U32)?;
        b.sum_rows(&x0, &mut x1)
    });
    case!("accumulate_sum: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 4], F32)?;
        b.accumulate_sum(&x0, &mut x1, 3)
    });
    case!("accumulate_sum: index out of range", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 4], F32)?;
        b.accumulate_sum(&x0, &mut x1, 4)
    });
    case!("accumulate_sum: u32 accumulator", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 4], U32)?;
        b.accumulate_sum(&x0, &mut x1, 0)
    });
    case!("argmax_rows: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], U32)?;
        b.argmax_rows(&x0, &mut x1)
    });
    case!("argmax_rows: no columns", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 0], F32)?;
        let mut x1 = t(b, [1, 2], U32)?;
        b.argmax_rows(&x0, &mut x1)
    });
    case!("argmax_rows: f32 output", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], F32)?;
        b.argmax_rows(&x0, &mut x1)
    });
    case!("count_correct: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], U32)?;
        let mut x2 = t(b, [1, 2], U32)?;
        b.count_correct(&x0, &x1, &mut x2, 1)
    });
    case!("count_correct: index out of range", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], U32)?;
        let mut x2 = t(b, [1, 2], U32)?;
        b.count_correct(&x0, &x1, &mut x2, 2)
    });
    case!("count_correct: f32 accumulator", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 2], U32)?;
        let mut x2 = t(b, [1, 2], F32)?;
        b.count_correct(&x0, &x1, &mut x2, 0)
    });
    case!("sgd_step: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], F32)?;
        let mut x2 = t(b, [2, 3], F32)?;
        b.sgd_step(&mut x0, &x1, &mut x2, gpulab::tensor::Sgd { lr: 0.1, momentum: 0.9, weight_decay: 0.0 })
    });
    case!("sgd_step: velocity shape", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], F32)?;
        let mut x2 = t(b, [3, 2], F32)?;
        b.sgd_step(&mut x0, &x1, &mut x2, gpulab::tensor::Sgd { lr: 0.1, momentum: 0.9, weight_decay: 0.0 })
    });
    case!("adamw_step: moment dtype", Expect::DType, |b| {
        let hp = gpulab::tensor::AdamW { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 };
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], F32)?;
        let mut x2 = t(b, [2, 3], U32)?;
        let mut x3 = t(b, [2, 3], F32)?;
        b.adamw_step(&mut x0, &x1, &mut x2, &mut x3, hp, 1)
    });
    case!("fill: u32", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], U32)?;
        b.fill(&mut x0, 7.0)
    });
    case!("fill: bf16", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], BF16)?;
        b.fill(&mut x0, 0.5)
    });
    case!("fill: i8", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], I8)?;
        b.fill(&mut x0, 1.0)
    });
    case!("scale: u32", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], U32)?;
        b.scale(&mut x0, 2.0)
    });
    case!("copy: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], F32)?;
        b.copy(&x0, &mut x1)
    });
    case!("copy: i8", Expect::Ok, |b| {
        let mut x0 = t(b, [3, 3], I8)?;
        let mut x1 = t(b, [3, 3], I8)?;
        b.copy(&x0, &mut x1)
    });
    case!("copy: shapes", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [3, 2], F32)?;
        b.copy(&x0, &mut x1)
    });
    case!("copy: dtypes", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], U32)?;
        b.copy(&x0, &mut x1)
    });
    // Mixed precision: casts.
    case!("cast: f32 → bf16 with stats", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], BF16)?;
        let mut x2 = t(b, [1, 2], U32)?;
        b.cast(&x0, &mut x1, Some(&mut x2))
    });
    case!("cast: bf16 → f32", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [2, 3], F32)?;
        b.cast(&x0, &mut x1, None)
    });
    case!("cast: bf16 → f32 with stats", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [2, 3], F32)?;
        let mut x2 = t(b, [1, 2], U32)?;
        b.cast(&x0, &mut x1, Some(&mut x2))
    });
    case!("cast: f32 → f32", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], F32)?;
        b.cast(&x0, &mut x1, None)
    });
    case!("cast: shapes", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [3, 2], BF16)?;
        b.cast(&x0, &mut x1, None)
    });
    case!("cast: stats too short", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], BF16)?;
        let mut x2 = t(b, [1, 1], U32)?;
        b.cast(&x0, &mut x1, Some(&mut x2))
    });
    case!("cast: f32 stats", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], BF16)?;
        let mut x2 = t(b, [1, 2], F32)?;
        b.cast(&x0, &mut x1, Some(&mut x2))
    });
    // Mixed precision: matmul16 and its epilogues.
    case!("matmul16: f32 output", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], BF16)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::None, None)
    });
    case!("matmul16: bf16 output, stats", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], BF16)?;
        let mut x2 = t(b, [2, 4], BF16)?;
        let mut x3 = t(b, [1, 2], U32)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::None, Some(&mut x3))
    });
    case!("matmul16: mixed operands", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], F32)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::None, None)
    });
    case!("matmul16: f32 operands", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [3, 4], F32)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::None, None)
    });
    case!("matmul16: u32 output", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], BF16)?;
        let mut x2 = t(b, [2, 4], U32)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::None, None)
    });
    case!("matmul16: inner dims", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [4, 4], BF16)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::None, None)
    });
    case!("matmul16: bias + relu", Expect::Ok, |b| {
        let mut x0 = t(b, [1, 4], F32)?;
        let bias = x0;
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], BF16)?;
        let mut x2 = t(b, [2, 4], BF16)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::Bias { bias: &bias, relu: true }, None)
    });
    case!("matmul16: bias length", Expect::Shape, |b| {
        let mut x0 = t(b, [1, 3], F32)?;
        let bias = x0;
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], BF16)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::Bias { bias: &bias, relu: false }, None)
    });
    case!("matmul16: bf16 bias", Expect::DType, |b| {
        let mut x0 = t(b, [1, 4], BF16)?;
        let bias = x0;
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], BF16)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::Bias { bias: &bias, relu: false }, None)
    });
    case!("matmul16: ReLU mask, bf16 output, stats", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 4], BF16)?;
        let act = x0;
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], BF16)?;
        let mut x2 = t(b, [2, 4], BF16)?;
        let mut x3 = t(b, [1, 2], U32)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::ReluMask(&act), Some(&mut x3))
    });
    case!("matmul16: ReLU mask into f32", Expect::DType, |b| {
        let mut x0 = t(b, [2, 4], BF16)?;
        let act = x0;
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], BF16)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::ReluMask(&act), None)
    });
    case!("matmul16: ReLU mask shape", Expect::Shape, |b| {
        let mut x0 = t(b, [4, 2], BF16)?;
        let act = x0;
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], BF16)?;
        let mut x2 = t(b, [2, 4], BF16)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::ReluMask(&act), None)
    });
    case!("matmul16: f32 ReLU mask", Expect::DType, |b| {
        let mut x0 = t(b, [2, 4], F32)?;
        let act = x0;
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], BF16)?;
        let mut x2 = t(b, [2, 4], BF16)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::ReluMask(&act), None)
    });
    case!("matmul16: stats with f32 output", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], BF16)?;
        let mut x2 = t(b, [2, 4], F32)?;
        let mut x3 = t(b, [1, 2], U32)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::None, Some(&mut x3))
    });
    case!("matmul16: stats too short", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [3, 4], BF16)?;
        let mut x2 = t(b, [2, 4], BF16)?;
        let mut x3 = t(b, [1, 1], U32)?;
        b.matmul16(&x0, &x1, &mut x2, false, false, Epilogue::None, Some(&mut x3))
    });
    case!("unscale_check: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 8], U32)?;
        b.unscale_check(&mut x0, &mut x1)
    });
    case!("unscale_check: f32 state", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 8], F32)?;
        b.unscale_check(&mut x0, &mut x1)
    });
    case!("unscale_check: short state", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 1], U32)?;
        b.unscale_check(&mut x0, &mut x1)
    });
    case!("unscale_check: bf16 gradients", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], BF16)?;
        let mut x1 = t(b, [1, 8], U32)?;
        b.unscale_check(&mut x0, &mut x1)
    });
    case!("scaler_update: slot outside the log", Expect::Shape, |b| {
        let mut s = t(b, [1, 8], U32)?;
        let mut l = t(b, [1, 4], U32)?;
        b.scaler_update(&mut s, RULE, &mut l, 4)
    });
    case!("amp_update: sgd with two slots", Expect::Shape, |b| {
        let mut p = t(b, [2, 3], F32)?;
        let g = t(b, [2, 3], F32)?;
        let mut sl = vec![t(b, [2, 3], F32)?, t(b, [2, 3], F32)?];
        let s = t(b, [1, 8], U32)?;
        b.amp_update(&mut p, &g, &mut sl, AmpOptimizer::Sgd(SGD), &s, None)
    });
    case!("amp_update: f32 working copy", Expect::DType, |b| {
        let mut p = t(b, [2, 3], F32)?;
        let g = t(b, [2, 3], F32)?;
        let mut sl = vec![t(b, [2, 3], F32)?];
        let s = t(b, [1, 8], U32)?;
        let mut w = t(b, [2, 3], F32)?;
        b.amp_update(&mut p, &g, &mut sl, AmpOptimizer::Sgd(SGD), &s, Some(&mut w))
    });
    // Int8.
    case!("quantize: per channel", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], I8)?;
        let mut x2 = t(b, [1, 3], F32)?;
        b.quantize(&x0, &mut x1, &mut x2, QuantGranularity::PerChannel)
    });
    case!("quantize: per tensor", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], I8)?;
        let mut x2 = t(b, [1, 1], F32)?;
        b.quantize(&x0, &mut x1, &mut x2, QuantGranularity::PerTensor)
    });
    case!("quantize: per-tensor scales for per channel", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], I8)?;
        let mut x2 = t(b, [1, 1], F32)?;
        b.quantize(&x0, &mut x1, &mut x2, QuantGranularity::PerChannel)
    });
    case!("quantize: into i32", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], I32)?;
        let mut x2 = t(b, [1, 3], F32)?;
        b.quantize(&x0, &mut x1, &mut x2, QuantGranularity::PerChannel)
    });
    case!("quantize: shape", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [3, 2], I8)?;
        let mut x2 = t(b, [1, 3], F32)?;
        b.quantize(&x0, &mut x1, &mut x2, QuantGranularity::PerChannel)
    });
    case!("quantize_with: per channel", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], I8)?;
        let mut x2 = t(b, [1, 3], F32)?;
        b.quantize_with(&x0, &mut x1, &x2)
    });
    case!("quantize_with: scales of rows", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], I8)?;
        let mut x2 = t(b, [1, 2], F32)?;
        b.quantize_with(&x0, &mut x1, &x2)
    });
    case!("quantize_with: u32 scales", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [2, 3], I8)?;
        let mut x2 = t(b, [1, 1], U32)?;
        b.quantize_with(&x0, &mut x1, &x2)
    });
    case!("dequantize: i8", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], I8)?;
        let mut x1 = t(b, [1, 1], F32)?;
        let mut x2 = t(b, [2, 3], F32)?;
        b.dequantize(&x0, &x1, &mut x2)
    });
    case!("dequantize: i32 per channel", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], I32)?;
        let mut x1 = t(b, [1, 3], F32)?;
        let mut x2 = t(b, [2, 3], F32)?;
        b.dequantize(&x0, &x1, &mut x2)
    });
    case!("dequantize: f32 input", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        let mut x1 = t(b, [1, 1], F32)?;
        let mut x2 = t(b, [2, 3], F32)?;
        b.dequantize(&x0, &x1, &mut x2)
    });
    case!("dequantize: scales of rows", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], I8)?;
        let mut x1 = t(b, [1, 2], F32)?;
        let mut x2 = t(b, [2, 3], F32)?;
        b.dequantize(&x0, &x1, &mut x2)
    });
    case!("matmul_i8: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], I8)?;
        let mut x1 = t(b, [3, 4], I8)?;
        let mut x2 = t(b, [2, 4], I32)?;
        b.matmul_i8(&x0, &x1, &mut x2, false, false)
    });
    case!("matmul_i8: f32 output", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], I8)?;
        let mut x1 = t(b, [3, 4], I8)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.matmul_i8(&x0, &x1, &mut x2, false, false)
    });
    case!("matmul_i8: inner dims", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], I8)?;
        let mut x1 = t(b, [4, 4], I8)?;
        let mut x2 = t(b, [2, 4], I32)?;
        b.matmul_i8(&x0, &x1, &mut x2, false, false)
    });
    case!("matmul_i8_dequant: ok, per tensor", Expect::Ok, |b| {
        let x0 = t(b, [2, 3], I8)?;
        let x1 = t(b, [3, 4], I8)?;
        let mut x2 = t(b, [2, 4], F32)?;
        let s = t(b, [1, 1], F32)?;
        b.matmul_i8_dequant(&x0, &x1, &mut x2, false, false, Dequant { scales: &s, bias: None, relu: false, act_scale: None })
    });
    case!("matmul_i8_dequant: per column, bias, relu, transposed", Expect::Ok, |b| {
        let x0 = t(b, [3, 2], I8)?;
        let x1 = t(b, [4, 3], I8)?;
        let mut x2 = t(b, [2, 4], F32)?;
        let s = t(b, [1, 4], F32)?;
        let bias = t(b, [1, 4], F32)?;
        b.matmul_i8_dequant(&x0, &x1, &mut x2, true, true, Dequant { scales: &s, bias: Some(&bias), relu: true, act_scale: None })
    });
    case!("matmul_i8_dequant: i32 output", Expect::DType, |b| {
        let x0 = t(b, [2, 3], I8)?;
        let x1 = t(b, [3, 4], I8)?;
        let mut x2 = t(b, [2, 4], I32)?;
        let s = t(b, [1, 1], F32)?;
        b.matmul_i8_dequant(&x0, &x1, &mut x2, false, false, Dequant { scales: &s, bias: None, relu: false, act_scale: None })
    });
    case!("matmul_i8_dequant: f32 operand", Expect::DType, |b| {
        let x0 = t(b, [2, 3], F32)?;
        let x1 = t(b, [3, 4], I8)?;
        let mut x2 = t(b, [2, 4], F32)?;
        let s = t(b, [1, 1], F32)?;
        b.matmul_i8_dequant(&x0, &x1, &mut x2, false, false, Dequant { scales: &s, bias: None, relu: false, act_scale: None })
    });
    case!("matmul_i8_dequant: inner dims", Expect::Shape, |b| {
        let x0 = t(b, [2, 3], I8)?;
        let x1 = t(b, [4, 4], I8)?;
        let mut x2 = t(b, [2, 4], F32)?;
        let s = t(b, [1, 1], F32)?;
        b.matmul_i8_dequant(&x0, &x1, &mut x2, false, false, Dequant { scales: &s, bias: None, relu: false, act_scale: None })
    });
    case!("matmul_i8_dequant: output shape", Expect::Shape, |b| {
        let x0 = t(b, [2, 3], I8)?;
        let x1 = t(b, [3, 4], I8)?;
        let mut x2 = t(b, [4, 2], F32)?;
        let s = t(b, [1, 1], F32)?;
        b.matmul_i8_dequant(&x0, &x1, &mut x2, false, false, Dequant { scales: &s, bias: None, relu: false, act_scale: None })
    });
    case!("matmul_i8_dequant: scales of rows", Expect::Shape, |b| {
        let x0 = t(b, [2, 3], I8)?;
        let x1 = t(b, [3, 4], I8)?;
        let mut x2 = t(b, [2, 4], F32)?;
        let s = t(b, [1, 2], F32)?;
        b.matmul_i8_dequant(&x0, &x1, &mut x2, false, false, Dequant { scales: &s, bias: None, relu: false, act_scale: None })
    });
    case!("matmul_i8_dequant: u32 scales", Expect::DType, |b| {
        let x0 = t(b, [2, 3], I8)?;
        let x1 = t(b, [3, 4], I8)?;
        let mut x2 = t(b, [2, 4], F32)?;
        let s = t(b, [1, 4], U32)?;
        b.matmul_i8_dequant(&x0, &x1, &mut x2, false, false, Dequant { scales: &s, bias: None, relu: false, act_scale: None })
    });
    case!("matmul_i8_dequant: bias length", Expect::Shape, |b| {
        let x0 = t(b, [2, 3], I8)?;
        let x1 = t(b, [3, 4], I8)?;
        let mut x2 = t(b, [2, 4], F32)?;
        let s = t(b, [1, 4], F32)?;
        let bias = t(b, [1, 3], F32)?;
        b.matmul_i8_dequant(&x0, &x1, &mut x2, false, false, Dequant { scales: &s, bias: Some(&bias), relu: false, act_scale: None })
    });
    case!("matmul_i8_dequant: i8 bias", Expect::DType, |b| {
        let x0 = t(b, [2, 3], I8)?;
        let x1 = t(b, [3, 4], I8)?;
        let mut x2 = t(b, [2, 4], F32)?;
        let s = t(b, [1, 4], F32)?;
        let bias = t(b, [1, 4], I8)?;
        b.matmul_i8_dequant(&x0, &x1, &mut x2, false, false, Dequant { scales: &s, bias: Some(&bias), relu: true, act_scale: None })
    });
    case!("write_i8: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], I8)?;
        b.write_i8(&mut x0, &[1; 6])
    });
    case!("write_i8: into f32", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], F32)?;
        b.write_i8(&mut x0, &[1; 6])
    });
    case!("write_i8: wrong length", Expect::Shape, |b| {
        let mut x0 = t(b, [2, 3], I8)?;
        b.write_i8(&mut x0, &[1; 5])
    });
    case!("read_i8: of i32", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], I32)?;
        b.read_i8(&x0).map(drop)
    });
    case!("read_i32: ok", Expect::Ok, |b| {
        let mut x0 = t(b, [2, 3], I32)?;
        b.read_i32(&x0).map(drop)
    });
    case!("read_many: of i8", Expect::DType, |b| {
        let mut x0 = t(b, [2, 3], I8)?;
        b.read_many(&[&x0]).map(drop)
    });
    // The convolution ops: 2 images of 3×5 pixels, 2 channels (cols [30, 18], pooled 1×2).
    const G: ImageGeom = ImageGeom { batch: 2, height: 3, width: 5, channels: 2 };
    case!("im2col: ok", Expect::Ok, |b| {
        let x0 = t(b, [2, 30], F32)?;
        let mut x1 = t(b, [30, 18], F32)?;
        b.im2col(&x0, &mut x1, G)
    });
    case!("im2col: columns of the wrong width", Expect::Shape, |b| {
        let x0 = t(b, [2, 30], F32)?;
        let mut x1 = t(b, [30, 9], F32)?;
        b.im2col(&x0, &mut x1, G)
    });
    case!("im2col: images in HWC rows", Expect::Shape, |b| {
        let x0 = t(b, [30, 2], F32)?;
        let mut x1 = t(b, [30, 18], F32)?;
        b.im2col(&x0, &mut x1, G)
    });
    case!("im2col: u32 input", Expect::DType, |b| {
        let x0 = t(b, [2, 30], U32)?;
        let mut x1 = t(b, [30, 18], F32)?;
        b.im2col(&x0, &mut x1, G)
    });
    case!("im2col: empty geometry", Expect::Shape, |b| {
        let x0 = t(b, [0, 30], F32)?;
        let mut x1 = t(b, [0, 18], F32)?;
        b.im2col(&x0, &mut x1, ImageGeom { batch: 0, ..G })
    });
    case!("col2im: ok", Expect::Ok, |b| {
        let x0 = t(b, [30, 18], F32)?;
        let mut x1 = t(b, [2, 30], F32)?;
        b.col2im(&x0, &mut x1, G)
    });
    case!("col2im: output of the wrong size", Expect::Shape, |b| {
        let x0 = t(b, [30, 18], F32)?;
        let mut x1 = t(b, [2, 29], F32)?;
        b.col2im(&x0, &mut x1, G)
    });
    case!("max_pool: ok", Expect::Ok, |b| {
        let x0 = t(b, [30, 2], F32)?;
        let mut x1 = t(b, [2, 4], F32)?;
        let mut x2 = t(b, [2, 4], U32)?;
        b.max_pool(&x0, &mut x1, &mut x2, G)
    });
    case!("max_pool: f32 argmax", Expect::DType, |b| {
        let x0 = t(b, [30, 2], F32)?;
        let mut x1 = t(b, [2, 4], F32)?;
        let mut x2 = t(b, [2, 4], F32)?;
        b.max_pool(&x0, &mut x1, &mut x2, G)
    });
    case!("max_pool: output not pooled", Expect::Shape, |b| {
        let x0 = t(b, [30, 2], F32)?;
        let mut x1 = t(b, [2, 30], F32)?;
        let mut x2 = t(b, [2, 30], U32)?;
        b.max_pool(&x0, &mut x1, &mut x2, G)
    });
    case!("max_pool: one-pixel-high images", Expect::Shape, |b| {
        let x0 = t(b, [10, 2], F32)?;
        let mut x1 = t(b, [2, 0], F32)?;
        let mut x2 = t(b, [2, 0], U32)?;
        b.max_pool(&x0, &mut x1, &mut x2, ImageGeom { height: 1, ..G })
    });
    case!("max_pool_backward: ok", Expect::Ok, |b| {
        let x0 = t(b, [2, 4], F32)?;
        let x1 = t(b, [2, 4], U32)?;
        let mut x2 = t(b, [30, 2], F32)?;
        b.max_pool_backward(&x0, &x1, &mut x2, G)
    });
    case!("max_pool_backward: input gradient of the wrong size", Expect::Shape, |b| {
        let x0 = t(b, [2, 4], F32)?;
        let x1 = t(b, [2, 4], U32)?;
        let mut x2 = t(b, [2, 30], F32)?;
        b.max_pool_backward(&x0, &x1, &mut x2, G)
    });
    v
}

/// Runs the table; each accepted call is flushed so the GPU's own validation runs too.
fn run<B: Backend + 'static>(b: &mut B) -> Vec<(&'static str, Expect, Outcome)> {
    table::<B>()
        .into_iter()
        .map(|(name, expect, call)| {
            let got = outcome(call(b).and_then(|()| b.flush()));
            (name, expect, got)
        })
        .collect()
}

#[test]
fn cpu_outcomes_are_the_tables() {
    let mut cpu = CpuBackend::new();
    let bad: Vec<String> =
        run(&mut cpu).into_iter().filter(|(_, e, o)| !matches(*e, o)).map(|(n, e, o)| format!("{n}: expected {e:?}, got {o:?}")).collect();
    assert!(bad.is_empty(), "CPU outcomes differ from the table:\n{}", bad.join("\n"));
    assert_eq!(cpu.memory().total_current, 0, "every tensor of the table was released");
}

/// The int8 family's ops, which a backend without it (`quant_unavailable`) refuses by name.
const QUANT_OPS: [&str; 8] =
    ["quantize", "quantize_with", "dequantize", "matmul_i8", "matmul_i8_dequant", "read_i8", "write_i8", "read_i32"];

/// The convolution ops, which a backend without them (`conv_unavailable`) refuses by name.
const CONV_OPS: [&str; 4] = ["im2col", "col2im", "max_pool", "max_pool_backward"];

/// Every GPU backend accepts and refuses exactly what the CPU does — except that a backend
/// which declares the int8 family or the convolution ops unavailable refuses those by name.
fn accepts_and_refuses_exactly_like_the_cpu<B: Backend + 'static>(b: &mut B) {
    let want = run(&mut CpuBackend::new());
    let got = run(b);
    b.sync().expect("the accepted calls ran without GPU errors");
    let no_quant = b.quant_unavailable().is_some();
    let no_conv = b.conv_unavailable().is_some();
    let mut diffs = Vec::new();
    for ((name, _, cpu), (_, _, other)) in want.iter().zip(&got) {
        let declared = matches!(other, Outcome::Err { kind: "unsupported", message } if (no_quant && QUANT_OPS.contains(&message.as_str())) || (no_conv && CONV_OPS.contains(&message.as_str())));
        if cpu != other && !declared {
            diffs.push(format!("{name}:\n  cpu {cpu:?}\n  {} {other:?}", b.info().kind));
        }
    }
    assert!(diffs.is_empty(), "the backends disagree on {} of {} calls:\n{}", diffs.len(), want.len(), diffs.join("\n"));
}

backend_tests!(vs_cpu: accepts_and_refuses_exactly_like_the_cpu);

/// Opening CUDA either works (a device and the feature) or refuses with the reason the
/// settings panel shows; never a panic. Without the feature it names the rebuild.
#[test]
fn cuda_opens_or_says_why() {
    let device: gpulab::device::Device = "cuda".parse().unwrap();
    match device.open(None) {
        Ok(engine) => assert!(matches!(engine, gpulab::device::Engine::Cuda(_))),
        Err(err) if cfg!(feature = "cuda") => assert!(matches!(err, Error::CudaUnavailable(ref why) if !why.is_empty()), "{err}"),
        Err(err) => {
            assert_eq!(err.to_string(), gpulab::device::cuda::unavailable().to_string());
            assert!(err.to_string().contains("rebuild with --features cuda"), "{err}");
        }
    }
}

#[test]
fn backend_kind_keeps_the_report_spelling() {
    use gpulab::tensor::BackendKind;
    for (kind, s) in [(BackendKind::Cpu, "\"cpu\""), (BackendKind::Gpu, "\"gpu\""), (BackendKind::Cuda, "\"cuda\"")] {
        assert_eq!(serde_json::to_string(&kind).unwrap(), s);
        assert_eq!(serde_json::from_str::<BackendKind>(s).unwrap(), kind);
    }
    // Every registered backend is written in reports as its id.
    for b in &gpulab::device::registry::BACKENDS {
        assert_eq!(serde_json::to_string(&b.kind).unwrap(), format!("\"{}\"", b.id));
    }
    assert_eq!(CpuBackend::new().info().kind, BackendKind::Cpu);
}
