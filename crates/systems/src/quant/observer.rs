//! Activation-range observers for static (calibrated) int8 scales. Calibration runs the f32
//! model over held-out samples and shows each layer's input to an observer; the observer's
//! absmax becomes that layer's activation scale (`tensor::scale_for_absmax`: symmetric,
//! ±127, like ONNX / TensorRT's restricted range; PyTorch's symmetric qint8 observers divide
//! by 127.5 over [−128, 127] instead).
//!
//! - `MinMax` keeps the running min and max (PyTorch's `MinMaxObserver`): every value fits,
//!   and one outlier widens the step for all.
//! - `Percentile(p)` keeps every |value| seen and takes the p-th percentile (nearest rank):
//!   the top (100 − p)% saturate at ±127 and the rest get a finer step (TensorRT's percentile
//!   calibration). It holds one f32 per observed value, so calibrate on a sample, not a data set.
//!
//! Both are deterministic: the same values in the same order give the same scale.

use serde::{Deserialize, Serialize};

use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::scale_for_absmax;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum ObserverKind {
    MinMax,
    /// The percentile of |x|, in (0, 100].
    Percentile(f64),
}

impl ObserverKind {
    pub fn validate(self) -> Result<Self> {
        match self {
            ObserverKind::Percentile(p) if !(p > 0.0 && p <= 100.0) => {
                Err(Error::InvalidConfig(format!("the calibration percentile must be in (0, 100], got {p}")))
            }
            k => Ok(k),
        }
    }

    pub fn name(self) -> String {
        match self {
            ObserverKind::MinMax => "min/max".into(),
            ObserverKind::Percentile(p) => format!("percentile {p}"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Observer {
    kind: ObserverKind,
    min: f32,
    max: f32,
    /// |x| of every finite value seen (Percentile only).
    abs: Vec<f32>,
    count: u64,
}

impl Observer {
    /// Refuses a percentile outside (0, 100].
    pub fn new(kind: ObserverKind) -> Result<Self> {
        Ok(Observer { kind: kind.validate()?, min: f32::INFINITY, max: f32::NEG_INFINITY, abs: Vec::new(), count: 0 })
    }

    pub fn kind(&self) -> ObserverKind {
        self.kind
    }

    /// Finite values observed so far (NaN and ±∞ are skipped: they carry no range).
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn observe(&mut self, values: &[f32]) {
        for &v in values.iter().filter(|v| v.is_finite()) {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
            if matches!(self.kind, ObserverKind::Percentile(_)) {
                self.abs.push(v.abs());
            }
            self.count += 1;
        }
    }

    /// The range the scale covers: max(|min|, |max|), or the percentile of |x|. An error
    /// before any finite value was observed (zero calibration samples).
    pub fn absmax(&self) -> Result<f32> {
        if self.count == 0 {
            return Err(Error::InvalidConfig("the observer saw no finite values: calibration needs at least one sample".into()));
        }
        Ok(match self.kind {
            ObserverKind::MinMax => self.min.abs().max(self.max.abs()),
            ObserverKind::Percentile(p) => {
                let mut v = self.abs.clone();
                // Nearest rank: the smallest value with at least p% of the values at or below it.
                let rank = ((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len());
                let (_, x, _) = v.select_nth_unstable_by(rank - 1, f32::total_cmp);
                *x
            }
        })
    }

    /// The int8 scale for what was observed (never zero; see `scale_for_absmax`).
    pub fn scale(&self) -> Result<f32> {
        self.absmax().map(scale_for_absmax)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_max_covers_every_value() {
        let mut o = Observer::new(ObserverKind::MinMax).unwrap();
        o.observe(&[0.5, -3.0, 2.0]);
        o.observe(&[1.0, f32::NAN, f32::INFINITY]);
        assert_eq!((o.count(), o.absmax().unwrap()), (4, 3.0));
        assert_eq!(o.scale().unwrap(), 3.0 * (1.0 / 127.0));
    }

    #[test]
    fn percentile_clips_the_outliers_by_nearest_rank() {
        let mut o = Observer::new(ObserverKind::Percentile(99.0)).unwrap();
        let mut v: Vec<f32> = (1..=1000).map(|i| i as f32 / 1000.0).collect();
        v[500] = -1e6; // one outlier in a thousand and one values
        o.observe(&v);
        o.observe(&[0.25]);
        // 1001 values: rank ceil(0.99·1001) = 991; the outlier is the largest |x|.
        let mut sorted: Vec<f32> = v.iter().chain(&[0.25]).map(|x| x.abs()).collect();
        sorted.sort_by(f32::total_cmp);
        assert_eq!(o.absmax().unwrap(), sorted[990]);
        assert!(o.absmax().unwrap() < 1.0);
        let mut all = Observer::new(ObserverKind::Percentile(100.0)).unwrap();
        all.observe(&v);
        assert_eq!(all.absmax().unwrap(), 1e6, "the 100th percentile is the max");
    }

    #[test]
    fn observers_are_deterministic_and_refuse_bad_settings() {
        let data: Vec<f32> = (0..5000).map(|i| ((i * 7919) % 1013) as f32 - 500.0).collect();
        let run = || {
            let mut o = Observer::new(ObserverKind::Percentile(99.9)).unwrap();
            data.chunks(64).for_each(|c| o.observe(c));
            o.scale().unwrap()
        };
        assert_eq!(run().to_bits(), run().to_bits());
        for p in [0.0, -1.0, 100.5, f64::NAN] {
            let e = Observer::new(ObserverKind::Percentile(p)).unwrap_err().to_string();
            assert!(e.contains("percentile") && e.contains("(0, 100]"), "{e}");
        }
        let e = Observer::new(ObserverKind::MinMax).unwrap().absmax().unwrap_err().to_string();
        assert!(e.contains("at least one sample"), "{e}");
    }
}
