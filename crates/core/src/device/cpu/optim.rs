//! The optimizer formulas on the CPU, once: every CPU path that updates weights calls these —
//! `sgd_step`/`adamw_step` (core.rs), the mixed-precision `amp_update` (amp.rs) and ZeRO-1's
//! update of its shard (`sgd_host`/`adamw_host`, parallel/reducer.rs). The WGSL kernels share
//! shaders/optimizer_math.wgsl and the CUDA kernels shaders/cuda/optimizer.cuh: the same
//! operations in the same order (tests/it/optimizer.rs checks how closely they agree). PyTorch
//! semantics:
//!   SGD:   v = μ·v + (g + wd·p);  p −= lr·v
//!   AdamW: p *= 1 − lr·wd;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
//!          p −= step_size · m / (√v / √(1−β2^t) + ε),  step_size = lr / (1−β1^t)

use rayon::prelude::*;

use super::ops::PAR_THRESHOLD;
use crate::tensor::{AdamFactors, AdamW, Sgd};

/// SGD with momentum and weight decay on one element.
#[inline(always)]
fn sgd_one(p: &mut f32, g: f32, v: &mut f32, hp: Sgd) {
    let d = g + hp.weight_decay * *p;
    *v = hp.momentum * *v + d;
    *p -= hp.lr * *v;
}

/// AdamW on one element, with the step's factors.
#[inline(always)]
fn adamw_one(p: &mut f32, g: f32, m: &mut f32, v: &mut f32, hp: AdamW, f: AdamFactors) {
    *p *= f.decay;
    *m = hp.beta1 * *m + (1.0 - hp.beta1) * g;
    *v = hp.beta2 * *v + (1.0 - hp.beta2) * g * g;
    *p -= f.step_size * *m / (v.sqrt() / f.bias2_sqrt + hp.eps);
}

/// One SGD step over every element (on all cores for large tensors).
pub fn sgd(p: &mut [f32], g: &[f32], v: &mut [f32], hp: Sgd) {
    let update = |(p, (g, v)): (&mut f32, (&f32, &mut f32))| sgd_one(p, *g, v, hp);
    if p.len() >= PAR_THRESHOLD {
        p.par_iter_mut().zip(g.par_iter().zip(v.par_iter_mut())).for_each(update);
    } else {
        p.iter_mut().zip(g.iter().zip(v.iter_mut())).for_each(update);
    }
}

/// One AdamW step at step number `step` (counting from 1).
pub fn adamw(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], hp: AdamW, step: u32) {
    adamw_with(p, g, m, v, hp, hp.factors(step))
}

/// `adamw` with the step's factors given (the mixed-precision update reads them from the table
/// at the on-device step count).
pub fn adamw_with(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], hp: AdamW, f: AdamFactors) {
    let update = |((p, g), (m, v)): ((&mut f32, &f32), (&mut f32, &mut f32))| adamw_one(p, *g, m, v, hp, f);
    if p.len() >= PAR_THRESHOLD {
        p.par_iter_mut().zip(g.par_iter()).zip(m.par_iter_mut().zip(v.par_iter_mut())).for_each(update);
    } else {
        p.iter_mut().zip(g.iter()).zip(m.iter_mut().zip(v.iter_mut())).for_each(update);
    }
}
