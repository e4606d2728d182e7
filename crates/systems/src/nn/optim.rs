use serde::{Deserialize, Serialize};

use gpulab_core::tensor::{AdamW, Sgd};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    Sgd,
    AdamW,
}

impl std::str::FromStr for OptimizerKind {
    type Err = gpulab_core::error::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "sgd" => Ok(OptimizerKind::Sgd),
            "adamw" | "adam" => Ok(OptimizerKind::AdamW),
            _ => Err(gpulab_core::error::Error::InvalidConfig(format!("unknown optimizer {s:?}; use sgd or adamw"))),
        }
    }
}

impl OptimizerKind {
    /// The name the settings and `--optimizer` take.
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::AdamW => "adamw",
        }
    }
}

/// The optimizer and its hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Optimizer {
    Sgd(Sgd),
    AdamW(AdamW),
}

impl Optimizer {
    pub fn new(kind: OptimizerKind, lr: f32, momentum: f32, weight_decay: f32) -> Self {
        match kind {
            OptimizerKind::Sgd => Optimizer::Sgd(Sgd { lr, momentum, weight_decay }),
            OptimizerKind::AdamW => Optimizer::AdamW(AdamW { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay }),
        }
    }

    /// Tensors of state per parameter: momentum (SGD) or both moments (AdamW).
    pub fn state_slots(&self) -> usize {
        match self {
            Optimizer::Sgd(_) => 1,
            Optimizer::AdamW(_) => 2,
        }
    }
}
