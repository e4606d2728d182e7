//! The loss scaler's state as the device keeps it, so a mixed-precision step needs no read-back:
//! one small U32 tensor that the unscale, optimizer and `scaler_update` kernels read and write.
//! The host reads it only at log windows and checkpoints. Every backend uses this layout and
//! these rules; `nn::GradScaler` is the same state machine on the host (its reference).

use serde::{Deserialize, Serialize};

/// Words of the state tensor (`[1, STATE_WORDS]`, U32; f32 values stored as bits).
pub mod word {
    /// The loss scale in effect for the next step (f32 bits).
    pub const SCALE: usize = 0;
    /// `inv_scale(scale)` (f32 bits), what unscaling multiplies by.
    pub const INV_SCALE: usize = 1;
    /// Consecutive finite steps since the last growth or backoff.
    pub const TRACKER: usize = 2;
    /// Steps skipped for inf/NaN gradients, in total.
    pub const SKIPPED: usize = 3;
    /// Optimizer steps taken (skipped ones not counted): AdamW's t before this step.
    pub const STEPS: usize = 4;
    /// Set by `unscale_check` when a gradient of this step was inf or NaN; cleared by `scaler_update`.
    pub const FOUND_INF: usize = 5;
}
pub const STATE_WORDS: usize = 8;

/// The log entry `scaler_update` writes per step: the scale in effect for that step, with bit 31
/// set when the step was skipped (a positive f32 never uses the sign bit).
pub const SKIPPED_BIT: u32 = 1 << 31;

/// The growth/backoff rule `scaler_update` applies (PyTorch's `_amp_update_scale_`), or only the
/// step count when the run does not scale (bf16).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScalerRule {
    pub scaling: bool,
    pub growth_factor: f32,
    pub backoff_factor: f32,
    pub growth_interval: u32,
    pub min_scale: f32,
}

/// 1/scale as PyTorch computes it (`scale.double().reciprocal().float()`). For a normal result
/// this is the correctly rounded f32 reciprocal (an f64 quotient of a 24-bit divisor never lands on
/// an f32 rounding midpoint), which is what the GPU kernel computes exactly with integers.
pub fn inv_scale(scale: f32) -> f32 {
    (1.0 / scale as f64) as f32
}

/// The state words for a scale, growth tracker and optimizer step count (nothing skipped yet,
/// no flag raised).
pub fn state_words(scale: f32, tracker: u32, steps: u32) -> [u32; STATE_WORDS] {
    let mut w = [0u32; STATE_WORDS];
    w[word::SCALE] = scale.to_bits();
    w[word::INV_SCALE] = inv_scale(scale).to_bits();
    w[word::TRACKER] = tracker;
    w[word::STEPS] = steps;
    w
}

/// One `scaler_update` on host words: the reference every backend's kernel matches bit for bit.
/// Returns the log entry for the step.
pub fn update_words(w: &mut [u32], rule: ScalerRule) -> u32 {
    let found = w[word::FOUND_INF] != 0;
    let entry = w[word::SCALE] | if found { SKIPPED_BIT } else { 0 };
    if rule.scaling {
        let mut scale = f32::from_bits(w[word::SCALE]);
        if found {
            scale = (scale * rule.backoff_factor).max(rule.min_scale);
            w[word::TRACKER] = 0;
            w[word::SKIPPED] = w[word::SKIPPED].wrapping_add(1);
        } else {
            w[word::TRACKER] += 1;
            if w[word::TRACKER] >= rule.growth_interval {
                w[word::TRACKER] = 0;
                let grown = scale * rule.growth_factor;
                // PyTorch keeps the old scale when growing would overflow f32.
                if grown.is_finite() {
                    scale = grown;
                }
            }
        }
        w[word::SCALE] = scale.to_bits();
        w[word::INV_SCALE] = inv_scale(scale).to_bits();
    }
    if !found {
        w[word::STEPS] = w[word::STEPS].wrapping_add(1);
    }
    w[word::FOUND_INF] = 0;
    entry
}

/// AdamW's per-step factors (step_size, bias2_sqrt) for t = 1..=rows, laid out as the optimizer
/// kernels index them by the on-device step count: row t−1 holds `AdamW::factors(t)`, the same
/// values the host-stepped optimizer uses.
pub fn adam_factor_table(hp: crate::tensor::AdamW, rows: usize) -> Vec<f32> {
    (1..=rows as u32)
        .flat_map(|t| {
            let f = hp.factors(t);
            [f.step_size, f.bias2_sqrt]
        })
        .collect()
}

/// The optimizer a mixed-precision update runs, with what it reads besides its slots.
#[derive(Debug)]
pub enum AmpOptimizer<'t, T> {
    Sgd(crate::tensor::Sgd),
    /// `table` from `adam_factor_table`, with at least STEPS + 1 rows.
    AdamW(crate::tensor::AdamW, &'t T),
}

// Copy for any T: it holds only a reference to the table (a derive would demand T: Copy).
impl<T> Clone for AmpOptimizer<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for AmpOptimizer<'_, T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inv_scale_is_the_correctly_rounded_f32_reciprocal() {
        for s in [1.0f32, 3.0, 65536.0, 1e10, 12345.678, 7.0e30, 0.3] {
            let r = inv_scale(s);
            // The f32 quotient (correctly rounded by IEEE) agrees with the f64 route.
            assert_eq!(r.to_bits(), (1.0f32 / s).to_bits(), "{s}");
        }
    }
}
