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

/// The most hidden layers a model may have, and the widest one.
pub const MAX_HIDDEN_LAYERS: usize = 64;
pub const MAX_HIDDEN_WIDTH: usize = 1 << 16;

/// The most memory a model may need to train (`MlpConfig::training_bytes`): a stated cap, above
/// every lab's models (megabytes to a few hundred) and below what a lab machine holds; a model
/// past it is refused before anything is allocated instead of aborting mid-allocation.
pub const MAX_TRAINING_BYTES: u64 = 16 << 30;

/// Refuses a model whose training memory estimate (parameters, gradients, optimizer state and
/// activations for `rows` rows) is over `MAX_TRAINING_BYTES`, naming the estimate.
pub fn check_model_fits(model: &crate::nn::MlpConfig, rows: usize, cfg: &TrainConfig) -> Result<()> {
    let slots = cfg.optimizer().state_slots();
    let need = model.training_bytes(rows, slots);
    if need <= MAX_TRAINING_BYTES {
        return Ok(());
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let params: u128 = model.widths().windows(2).map(|w| (w[0] as u128) * (w[1] as u128) + w[1] as u128).sum();
    let state = if slots == 1 { "momentum" } else { "both Adam moments" };
    Err(Error::InvalidConfig(format!(
        "the model {} would need about {:.1} GiB to train (estimate: {params} parameters × 4 bytes, each with its \
         gradient and {state}, plus activations for {rows} rows), more than the {:.0} GiB gpulab trains at most; \
         use fewer or narrower hidden layers",
        model.label(),
        gib(need),
        gib(MAX_TRAINING_BYTES)
    )))
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
        if self.hidden.len() > MAX_HIDDEN_LAYERS {
            return bad(format!(
                "{} hidden layers; at most {MAX_HIDDEN_LAYERS}: a plain MLP much deeper than a few layers does not \
                 train (it has no residual connections), and every layer costs memory and time",
                self.hidden.len()
            ));
        }
        if self.hidden.contains(&0) {
            return bad(format!("hidden layer widths must be positive, got {:?}", self.hidden));
        }
        if let Some(w) = self.hidden.iter().find(|&&w| w > MAX_HIDDEN_WIDTH) {
            return bad(format!(
                "hidden layer width {w}; at most {MAX_HIDDEN_WIDTH}: one {MAX_HIDDEN_WIDTH}-wide layer after another is \
                 already 16 GiB of f32 weights"
            ));
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
