//! Optimizer hyper-parameters, shared by every backend's update kernels.

use serde::{Deserialize, Serialize};

/// SGD with momentum, PyTorch semantics: v = μ·v + (g + wd·p); p -= lr·v.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Sgd {
    pub lr: f32,
    pub momentum: f32,
    pub weight_decay: f32,
}

/// AdamW (decoupled weight decay), PyTorch semantics; `step` counts from 1.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct AdamW {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

/// Per-step AdamW factors, computed once on the host so every backend uses the same values.
#[derive(Clone, Copy, Debug)]
pub struct AdamFactors {
    /// 1 − lr·wd (decoupled weight decay)
    pub decay: f32,
    /// lr / (1 − β1^t)
    pub step_size: f32,
    /// √(1 − β2^t)
    pub bias2_sqrt: f32,
}

impl AdamW {
    pub fn factors(&self, step: u32) -> AdamFactors {
        let t = step.max(1) as i32;
        let bc1 = 1.0 - (self.beta1 as f64).powi(t);
        let bc2 = 1.0 - (self.beta2 as f64).powi(t);
        AdamFactors { decay: 1.0 - self.lr * self.weight_decay, step_size: (self.lr as f64 / bc1) as f32, bias2_sqrt: bc2.sqrt() as f32 }
    }
}

/// An f32 optimizer step's rule, for `CoreOps::optimizer_steps`: SGD, or AdamW at `step`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptStep {
    Sgd(Sgd),
    AdamW(AdamW, u32),
}

impl OptStep {
    /// State tensors per parameter: SGD's velocity; AdamW's two moments.
    pub fn slots(self) -> usize {
        match self {
            OptStep::Sgd(_) => 1,
            OptStep::AdamW(..) => 2,
        }
    }
}

/// One parameter as a multi-tensor optimizer step sees it: its value, gradient and optimizer
/// state (`OptStep::slots` tensors), and for the mixed-precision step the 16-bit working copy
/// the update also writes (none for a bias, or an f32 step).
pub struct ParamRefs<'a, T> {
    pub value: &'a mut T,
    pub grad: &'a T,
    pub state: &'a mut [T],
    pub w16: Option<&'a mut T>,
}
