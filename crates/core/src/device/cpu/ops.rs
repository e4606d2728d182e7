//! The CPU kernels. Reductions run in a fixed order so results are deterministic whatever the
//! thread count (checkpoint resume relies on bit-exact CPU runs).

use rayon::prelude::*;

/// Below this many elements, rayon's fork/join costs more than the work.
pub const PAR_THRESHOLD: usize = 1 << 15;
pub const CHUNK: usize = 1 << 13;

#[allow(clippy::too_many_arguments)]
pub fn gemm(a: &[f32], b: &[f32], c: &mut [f32], m: usize, n: usize, k: usize, ta: bool, tb: bool, acc: bool, threads: usize) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !acc {
            c.fill(0.0);
        }
        return;
    }
    // Row-major strides: element (i, j) of a stored [r, c] matrix is at i*c + j.
    let (a_rs, a_cs) = if ta { (1, m as isize) } else { (k as isize, 1) };
    let (b_rs, b_cs) = if tb { (1, k as isize) } else { (n as isize, 1) };
    let par = if 2 * m * n * k >= 1 << 20 && threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // SAFETY: the strides above describe the slices exactly (checked shapes: a has m*k, b k*n,
    // c m*n elements), and c does not alias a or b (it is borrowed mutably).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            acc,
            a.as_ptr(),
            a_cs,
            a_rs,
            b.as_ptr(),
            b_cs,
            b_rs,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// `dst = src`, on all cores for a large buffer (a batch of inputs each step: one core's copy
/// left the other idle).
pub fn copy(dst: &mut [f32], src: &[f32]) {
    if dst.len() >= PAR_THRESHOLD {
        dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| d.copy_from_slice(s));
    } else {
        dst.copy_from_slice(src);
    }
}

pub fn map_inplace(x: &mut [f32], f: impl Fn(f32) -> f32 + Sync + Send) {
    if x.len() >= PAR_THRESHOLD {
        x.par_chunks_mut(CHUNK).for_each(|c| c.iter_mut().for_each(|v| *v = f(*v)));
    } else {
        x.iter_mut().for_each(|v| *v = f(*v));
    }
}

pub fn zip_inplace(x: &mut [f32], y: &[f32], f: impl Fn(f32, f32) -> f32 + Sync + Send) {
    if x.len() >= PAR_THRESHOLD {
        x.par_chunks_mut(CHUNK).zip(y.par_chunks(CHUNK)).for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, &b)| *a = f(*a, b)));
    } else {
        x.iter_mut().zip(y).for_each(|(a, &b)| *a = f(*a, b));
    }
}

/// `y += bias` on every row, then ReLU when `relu`: one pass over `y` (a separate ReLU pass read
/// and wrote every hidden output a second time).
pub fn bias_add(y: &mut [f32], bias: &[f32], cols: usize, relu: bool) {
    if cols == 0 {
        return; // chunks of zero columns do not exist (and would panic)
    }
    let add = |row: &mut [f32]| {
        if relu {
            row.iter_mut().zip(bias).for_each(|(v, b)| *v = (*v + b).max(0.0))
        } else {
            row.iter_mut().zip(bias).for_each(|(v, b)| *v += b)
        }
    };
    if y.len() >= PAR_THRESHOLD {
        y.par_chunks_mut(cols).for_each(add);
    } else {
        y.chunks_mut(cols).for_each(add);
    }
}

pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

/// loss = logsumexp(x) − x[label]; grad = (softmax(x) − onehot(label)) · scale.
/// An out-of-range label yields a NaN loss (the data loaders reject such labels earlier).
pub fn softmax_xent(logits: &[f32], labels: &[u32], loss: &mut [f32], grad: Option<&mut [f32]>, cols: usize, scale: f32) {
    let row_fn = |(r, (row, l)): (usize, (&[f32], &mut f32)), g: Option<&mut [f32]>| {
        let label = labels[r] as usize;
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = row.iter().map(|&v| (v - max).exp()).sum();
        let lse = max + sum.ln();
        *l = if label < cols { lse - row[label] } else { f32::NAN };
        if let Some(g) = g {
            for (j, (gv, &v)) in g.iter_mut().zip(row).enumerate() {
                let p = (v - max).exp() / sum;
                *gv = (p - if j == label { 1.0 } else { 0.0 }) * scale;
            }
        }
    };
    match grad {
        Some(g) => {
            logits.chunks_exact(cols).zip(loss.iter_mut()).enumerate().zip(g.chunks_exact_mut(cols)).for_each(|(x, g)| row_fn(x, Some(g)))
        }
        None => logits.chunks_exact(cols).zip(loss.iter_mut()).enumerate().for_each(|x| row_fn(x, None)),
    }
}

pub fn sum_cols(x: &[f32], out: &mut [f32], cols: usize) {
    out.fill(0.0);
    if cols == 0 {
        return;
    }
    for row in x.chunks_exact(cols) {
        out.iter_mut().zip(row).for_each(|(o, v)| *o += v);
    }
}

/// `sum_cols` of 16-bit values, widened as they are added (the same sums in the same order as
/// `sum_cols` of their widened copy, without that copy).
pub fn sum_cols_16(dt: crate::tensor::DType, x: &[u16], out: &mut [f32], cols: usize) {
    out.fill(0.0);
    if cols == 0 {
        return;
    }
    for row in x.chunks_exact(cols) {
        match dt {
            // bf16 widens by a shift, which vectorises.
            crate::tensor::DType::BF16 => out.iter_mut().zip(row).for_each(|(o, &v)| *o += f32::from_bits((v as u32) << 16)),
            _ => out.iter_mut().zip(row).for_each(|(o, &v)| *o += crate::tensor::float16::widen(dt, v)),
        }
    }
}

pub fn sum_rows(x: &[f32], out: &mut [f32], cols: usize) {
    if cols == 0 {
        out.fill(0.0);
        return;
    }
    out.iter_mut().zip(x.chunks_exact(cols)).for_each(|(o, row)| *o = row.iter().sum());
}

pub fn sum(x: &[f32]) -> f32 {
    x.iter().sum()
}

/// f(i, chunk) for every `len`-element chunk of `out` (a row of a matrix, one image plane), on
/// all cores when there are many elements: the index arithmetic runs once per chunk, not once
/// per element.
pub fn chunks<T: Send>(out: &mut [T], len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if len == 0 {
        return;
    }
    if out.len() >= PAR_THRESHOLD {
        out.par_chunks_mut(len).enumerate().for_each(|(i, c)| f(i, c));
    } else {
        out.chunks_mut(len).enumerate().for_each(|(i, c)| f(i, c));
    }
}

/// `chunks` over two outputs cut alike: f(i, the i-th `len` elements of a, those of b).
pub fn chunks_pair<T: Send, U: Send>(a: &mut [T], b: &mut [U], len: usize, f: impl Fn(usize, &mut [T], &mut [U]) + Sync) {
    if len == 0 {
        return;
    }
    if a.len() >= PAR_THRESHOLD {
        a.par_chunks_mut(len).zip(b.par_chunks_mut(len)).enumerate().for_each(|(i, (x, y))| f(i, x, y));
    } else {
        a.chunks_mut(len).zip(b.chunks_mut(len)).enumerate().for_each(|(i, (x, y))| f(i, x, y));
    }
}
