//! The optimizer formulas on the CPU, once: every CPU path that updates weights calls these —
//! `sgd_step`/`adamw_step` (core.rs), the mixed-precision `amp_update` (amp.rs) and ZeRO-1's
//! update of its shard (`sgd_host`/`adamw_host`, parallel/reducer.rs). The WGSL kernels share
//! shaders/optimizer_math.wgsl and the CUDA kernels shaders/cuda/optimizer.cuh: the same
//! operations in the same order (tests/it/optimizer.rs checks how closely they agree). PyTorch
//! semantics:
//!   SGD:   v = μ·v + (g + wd·p);  p −= lr·v
//!   AdamW: p *= 1 − lr·wd;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
//!          p −= step_size · m / (√v / √(1−β2^t) + ε),  step_size = lr / (1−β1^t)
//! One difference, on purpose: optimizer state that falls below f32's smallest normal value
//! (1.2e-38) is stored as zero. A weight whose gradient stays zero (a ReLU unit that never
//! fires) has its momentum decay by μ every step until it is subnormal, and x86 multiplies
//! subnormals through a microcode assist ~100× slower: `bench train` at batch 32 ran 2.5–4×
//! slower per step after a few thousand steps than in its first windows (measured on an
//! AVX-512 Xeon, issue 40). Such a value moves no weight (lr·v is far below any weight's ulp), so nothing is lost;
//! GPUs that flush subnormals do the same.

use rayon::prelude::*;

use super::lanes::wide;
use super::ops::{CHUNK, PAR_THRESHOLD};
use crate::tensor::{AdamFactors, AdamW, Sgd};

/// `x`, or zero when it is subnormal (see the module's note); branch-free, so it vectorises.
#[inline(always)]
fn flush(x: f32) -> f32 {
    if x.abs() < f32::MIN_POSITIVE { 0.0 } else { x }
}

/// SGD with momentum and weight decay on one element.
#[inline(always)]
fn sgd_one(p: &mut f32, g: f32, v: &mut f32, hp: Sgd) {
    let d = g + hp.weight_decay * *p;
    *v = flush(hp.momentum * *v + d);
    *p -= hp.lr * *v;
}

/// AdamW on one element, with the step's factors.
#[inline(always)]
fn adamw_one(p: &mut f32, g: f32, m: &mut f32, v: &mut f32, hp: AdamW, f: AdamFactors) {
    *p *= f.decay;
    *m = flush(hp.beta1 * *m + (1.0 - hp.beta1) * g);
    *v = flush(hp.beta2 * *v + (1.0 - hp.beta2) * g * g);
    *p -= f.step_size * *m / (v.sqrt() / f.bias2_sqrt + hp.eps);
}

/// One SGD step over every element (on all cores for large tensors). Parallel in chunks, each a
/// plain loop over slices compiled 16 wide (`wide`): rayon's element-wise `par_iter` called the
/// closure once an element and did not vectorise (~0.1 ms of a 1.1 ms MLP step at batch 128,
/// issue 40).
pub fn sgd(p: &mut [f32], g: &[f32], v: &mut [f32], hp: Sgd) {
    let update = |p: &mut [f32], g: &[f32], v: &mut [f32]| {
        wide(|| p.iter_mut().zip(g.iter().zip(v.iter_mut())).for_each(|(p, (g, v))| sgd_one(p, *g, v, hp)))
    };
    if p.len() >= PAR_THRESHOLD {
        p.par_chunks_mut(CHUNK).zip(g.par_chunks(CHUNK).zip(v.par_chunks_mut(CHUNK))).for_each(|(p, (g, v))| update(p, g, v));
    } else {
        update(p, g, v);
    }
}

/// One AdamW step at step number `step` (counting from 1).
pub fn adamw(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], hp: AdamW, step: u32) {
    adamw_with(p, g, m, v, hp, hp.factors(step))
}

/// `adamw` with the step's factors given (the mixed-precision update reads them from the table
/// at the on-device step count).
pub fn adamw_with(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], hp: AdamW, f: AdamFactors) {
    let update = |p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]| {
        wide(|| p.iter_mut().zip(g).zip(m.iter_mut().zip(v.iter_mut())).for_each(|((p, g), (m, v))| adamw_one(p, *g, m, v, hp, f)))
    };
    if p.len() >= PAR_THRESHOLD {
        p.par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK))
            .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
            .for_each(|((p, g), (m, v))| update(p, g, m, v));
    } else {
        update(p, g, m, v);
    }
}

#[cfg(test)]
mod tests {
    use crate::tensor::{AdamW, Sgd};

    /// A weight whose gradient stays zero: its optimizer state decays towards zero and must
    /// never be stored subnormal (the x86 slow path), at any step.
    #[test]
    fn state_that_decays_to_zero_is_never_stored_subnormal() {
        let (mut p, mut v) = ([0.5f32; 4], [1e-3f32, -2e-3, 5e-30, 1.0]);
        let hp = Sgd { lr: 0.01, momentum: 0.9, weight_decay: 0.0 };
        for step in 0..2000 {
            super::sgd(&mut p, &[0.0; 4], &mut v, hp);
            assert!(v.iter().all(|x| !x.is_subnormal()), "SGD step {step}: momentum {v:?}");
        }
        assert_eq!(v, [0.0; 4], "the momentum ends at zero");
        let (mut p, mut m, mut v) = ([0.5f32; 4], [1e-3f32; 4], [1e-6f32, 1e-30, 3e-36, 1.0]);
        let hp = AdamW { lr: 1e-3, beta1: 0.9, beta2: 0.9, eps: 1e-8, weight_decay: 0.0 };
        for step in 1..2000 {
            super::adamw(&mut p, &[0.0; 4], &mut m, &mut v, hp, step);
            assert!(m.iter().chain(&v).all(|x| !x.is_subnormal()), "AdamW step {step}: m {m:?} v {v:?}");
        }
    }
}
