//! Mixed precision as PyTorch's AMP does it, as pure host logic: which precision a run uses,
//! and the `GradScaler` state machine. The autocast policy itself (which op runs in which
//! type) lives in `train::amp_step`, where the ops are issued.

use serde::{Deserialize, Serialize};

use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::DType;

/// The precision of a training run's matmuls (weights are always kept in f32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    F16,
    BF16,
}

impl Precision {
    pub const ALL: [Precision; 3] = [Precision::F32, Precision::F16, Precision::BF16];

    /// The storage type of 16-bit tensors; None for f32 (no autocast).
    pub fn dtype16(self) -> Option<DType> {
        match self {
            Precision::F32 => None,
            Precision::F16 => Some(DType::F16),
            Precision::BF16 => Some(DType::BF16),
        }
    }

    /// FP16's range ends at 65504 and flushes below 6e-8, so it needs loss scaling; BF16 has
    /// f32's exponent range, so it trains unscaled (PyTorch's recommendation too).
    pub fn scales_by_default(self) -> bool {
        self == Precision::F16
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "fp32",
            Precision::F16 => "fp16",
            Precision::BF16 => "bf16",
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "fp32" => Ok(Precision::F32),
            "f16" | "fp16" => Ok(Precision::F16),
            "bf16" => Ok(Precision::BF16),
            _ => Err(Error::InvalidConfig(format!("unknown precision {s:?}; use fp32, fp16 or bf16"))),
        }
    }
}

/// Mixed-precision settings of a training run. The default is plain f32, so runs that do not
/// ask for mixed precision behave exactly as before it existed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AmpConfig {
    pub precision: Precision,
    /// Dynamic loss scaling with a `GradScaler` (ignored for f32).
    pub grad_scaling: bool,
    pub scaler: GradScalerConfig,
    /// The loss is multiplied by this before backward (1 = plain cross-entropy). The underflow
    /// demonstration uses a tiny weight to make every gradient tiny.
    pub loss_weight: f32,
}

impl Default for AmpConfig {
    fn default() -> Self {
        AmpConfig::new(Precision::F32)
    }
}

impl AmpConfig {
    /// The precision with its default scaling (on for FP16, off for BF16).
    pub fn new(precision: Precision) -> Self {
        AmpConfig { precision, grad_scaling: precision.scales_by_default(), scaler: GradScalerConfig::default(), loss_weight: 1.0 }
    }

    pub fn validate(&self) -> Result<()> {
        if !self.loss_weight.is_finite() || self.loss_weight <= 0.0 {
            return Err(Error::InvalidConfig(format!("loss weight must be a positive finite number, got {}", self.loss_weight)));
        }
        // The f32 path has no loss weight; refusing beats silently ignoring it.
        if self.precision == Precision::F32 && self.loss_weight != 1.0 {
            return Err(Error::InvalidConfig("a loss weight applies to fp16/bf16 runs only".into()));
        }
        self.scaler.validate()
    }

    /// Whether a GradScaler runs (never for f32).
    pub fn scaling(&self) -> bool {
        self.precision != Precision::F32 && self.grad_scaling
    }

    /// "fp16 + GradScaler", "bf16", "fp32".
    pub fn label(&self) -> String {
        match (self.precision, self.scaling()) {
            (Precision::F32, _) => "fp32".into(),
            (p, true) => format!("{} + GradScaler", p.name()),
            (Precision::F16, false) => "fp16, no scaling".into(),
            (p, false) => p.name().into(),
        }
    }
}

/// PyTorch's `torch.amp.GradScaler` defaults, plus a floor the scale never backs off below.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GradScalerConfig {
    pub init_scale: f32,
    pub growth_factor: f32,
    pub backoff_factor: f32,
    pub growth_interval: u32,
    /// Not in PyTorch: a run whose gradients are inf at every scale (a diverged model) would
    /// otherwise back the scale off to zero.
    pub min_scale: f32,
}

impl Default for GradScalerConfig {
    fn default() -> Self {
        GradScalerConfig { init_scale: 65536.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 2000, min_scale: 1.0 }
    }
}

impl GradScalerConfig {
    pub fn validate(&self) -> Result<()> {
        let ok = self.init_scale.is_finite()
            && self.min_scale > 0.0
            && self.init_scale >= self.min_scale
            && self.growth_factor > 1.0
            && self.growth_factor.is_finite()
            && self.backoff_factor > 0.0
            && self.backoff_factor < 1.0
            && self.growth_interval > 0;
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidConfig(format!(
                "grad scaler needs init_scale ≥ min_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and growth_interval > 0; got {self:?}"
            )))
        }
    }
}

/// The scaler's mutable state: what a checkpoint stores to resume scaling where it was.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GradScalerState {
    pub scale: f32,
    /// Consecutive finite steps since the last growth or backoff.
    pub growth_tracker: u32,
}

/// What `GradScaler::update` did after one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalerStep {
    /// Gradients were finite; the optimizer stepped.
    Stepped,
    /// Gradients were finite and the interval passed: the scale grew.
    Grew,
    /// Some gradient was inf/NaN: the step was skipped and the scale backed off.
    Skipped,
}

/// Dynamic loss scaling with PyTorch's semantics: multiply the loss by `scale`; after
/// backward, unscale the gradients and check them for inf/NaN; on overflow skip the step and
/// multiply the scale by `backoff_factor`; after `growth_interval` finite steps in a row
/// multiply it by `growth_factor`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GradScaler {
    pub config: GradScalerConfig,
    pub state: GradScalerState,
}

impl GradScaler {
    pub fn new(config: GradScalerConfig) -> Result<Self> {
        config.validate()?;
        Ok(GradScaler { config, state: GradScalerState { scale: config.init_scale, growth_tracker: 0 } })
    }

    pub fn scale(&self) -> f32 {
        self.state.scale
    }

    /// The factor gradients are multiplied by to undo the scaling (computed in f64, then
    /// rounded once, as PyTorch's `scale.double().reciprocal().float()`).
    pub fn inv_scale(&self) -> f32 {
        (1.0 / self.state.scale as f64) as f32
    }

    /// Updates the scale after a step whose gradients were (`found_inf`) or were not finite.
    pub fn update(&mut self, found_inf: bool) -> ScalerStep {
        let s = &mut self.state;
        if found_inf {
            s.scale = (s.scale * self.config.backoff_factor).max(self.config.min_scale);
            s.growth_tracker = 0;
            return ScalerStep::Skipped;
        }
        s.growth_tracker += 1;
        if s.growth_tracker >= self.config.growth_interval {
            s.growth_tracker = 0;
            let grown = s.scale * self.config.growth_factor;
            // PyTorch keeps the old scale when growing would overflow f32.
            if grown.is_finite() {
                s.scale = grown;
                return ScalerStep::Grew;
            }
        }
        ScalerStep::Stepped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_parses_and_defaults_to_f32() {
        assert_eq!("BF16".parse::<Precision>().unwrap(), Precision::BF16);
        assert_eq!("fp16".parse::<Precision>().unwrap(), Precision::F16);
        assert!("f8".parse::<Precision>().is_err());
        assert_eq!(AmpConfig::default().precision, Precision::F32);
        assert!(!AmpConfig::default().scaling());
        assert!(AmpConfig::new(Precision::F16).scaling());
        assert!(!AmpConfig::new(Precision::BF16).scaling());
    }
}
