use serde::{Deserialize, Serialize};

use crate::nn::{AmpConfig, ModelKind, Optimizer, OptimizerKind};
use gpulab_core::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub hidden: Vec<usize>,
    pub batch: usize,
    pub epochs: usize,
    pub lr: f32,
    pub optimizer: OptimizerKind,
    pub momentum: f32,
    pub weight_decay: f32,
    pub seed: u64,
    /// Loss and accuracy are read back from the device every this many steps (and at epoch end).
    pub log_every: usize,
    /// Mixed precision; the default is plain f32.
    #[serde(default)]
    pub amp: AmpConfig,
    /// The MLP, or the small CNN (image data sets only; every backend and precision).
    #[serde(default)]
    pub model: ModelKind,
    /// Micro-batches per optimizer step (gradient accumulation): each step's batch is cut
    /// into this many equal parts, their gradients summed (each scaled by 1/batch, so the sum
    /// is the whole batch's mean) and the optimizer steps once. 1: the whole batch at once.
    #[serde(default = "one")]
    pub accumulate: usize,
    /// Activation recomputation (checkpointing): training keeps only the dense layers' first
    /// input and the logits, and backward recomputes each hidden layer's output from there.
    #[serde(default)]
    pub recompute: bool,
}

fn one() -> usize {
    1
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            hidden: vec![128, 64],
            batch: 64,
            epochs: 10,
            lr: 0.05,
            optimizer: OptimizerKind::Sgd,
            momentum: 0.9,
            weight_decay: 0.0,
            seed: 42,
            log_every: 20,
            amp: AmpConfig::default(),
            model: ModelKind::Mlp,
            accumulate: 1,
            recompute: false,
        }
    }
}

impl TrainConfig {
    /// Rejects settings that cannot train, with a message that says what would.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if self.batch == 0 {
            return bad("batch size must be at least 1".into());
        }
        if self.batch > 1 << 20 {
            return bad(format!("batch size {} is absurdly large; try 32–1024", self.batch));
        }
        if self.epochs == 0 {
            return bad("epochs must be at least 1".into());
        }
        if !self.lr.is_finite() || self.lr <= 0.0 {
            return bad(format!("learning rate must be a positive finite number, got {}", self.lr));
        }
        if !self.momentum.is_finite() || !(0.0..1.0).contains(&self.momentum) {
            return bad(format!("momentum must be in [0, 1), got {}", self.momentum));
        }
        if !self.weight_decay.is_finite() || self.weight_decay < 0.0 {
            return bad(format!("weight decay must be ≥ 0, got {}", self.weight_decay));
        }
        if self.hidden.contains(&0) {
            return bad(format!("hidden layer widths must be positive, got {:?}", self.hidden));
        }
        if self.accumulate == 0 {
            return bad("accumulate must be at least 1 (1 = no gradient accumulation)".into());
        }
        if !self.batch.is_multiple_of(self.accumulate) {
            let (lo, hi) = (self.batch / self.accumulate * self.accumulate, self.batch.div_ceil(self.accumulate) * self.accumulate);
            let lo = if lo == 0 { String::new() } else { format!("{lo} or ") };
            return bad(format!(
                "batch {} does not split into {} equal micro-batches; choose a batch that is a multiple of {} ({lo}{hi}) or another accumulate",
                self.batch, self.accumulate, self.accumulate
            ));
        }
        if self.log_every == 0 {
            return bad("log_every must be at least 1".into());
        }
        self.amp.validate()
    }

    /// Rows of one micro-batch (the whole batch when not accumulating).
    pub fn micro_batch(&self) -> usize {
        self.batch / self.accumulate.max(1)
    }

    pub fn optimizer(&self) -> Optimizer {
        Optimizer::new(self.optimizer, self.lr, self.momentum, self.weight_decay)
    }
}
