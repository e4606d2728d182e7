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
