//! The platform's two controllers as pure functions: the autoscaler's desired worker count and
//! the canary's judgement of one window. The simulator calls them; tests can too.

use serde::{Deserialize, Serialize};

use super::scenario::{Autoscaler, Canary};

/// Kubernetes' HPA rule: desired = ceil(current × signal / target), unchanged within ±10% of
/// the target, clamped to [min, max]. A pool at zero with work waiting asks for one worker.
pub fn desired_workers(a: &Autoscaler, current: u32, signal: f64, work_waiting: bool) -> u32 {
    let ratio = signal / a.target;
    let raw = if current == 0 {
        u32::from(work_waiting)
    } else if (ratio - 1.0).abs() <= 0.1 {
        current
    } else {
        (current as f64 * ratio).ceil().min(1e6) as u32
    };
    raw.clamp(a.min_workers, a.max_workers)
}

/// What one version did in a canary window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VersionStats {
    pub served: u64,
    pub error_rate: f64,
    pub p95_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Judgement {
    /// Too few v2 requests in the window to judge; wait another window.
    Wait,
    Pass,
    RollBack(String),
}

/// The fewest v2 requests a window needs before the rule judges it.
pub const MIN_CANARY_SAMPLES: u64 = 30;

/// The rollback rule: v2's error rate or p95 latency regressed against v1's baseline.
pub fn judge(c: &Canary, v1: &VersionStats, v2: &VersionStats) -> Judgement {
    if v2.served < MIN_CANARY_SAMPLES || v1.served < MIN_CANARY_SAMPLES {
        return Judgement::Wait;
    }
    if v2.error_rate > v1.error_rate + c.max_error_increase {
        return Judgement::RollBack(format!(
            "error rate {:.2}% against v1's {:.2}% (limit +{:.2} points)",
            v2.error_rate * 100.0,
            v1.error_rate * 100.0,
            c.max_error_increase * 100.0
        ));
    }
    if v2.p95_s > v1.p95_s * c.max_latency_ratio {
        return Judgement::RollBack(format!(
            "p95 latency {:.0} ms against v1's {:.0} ms (limit ×{:.2})",
            v2.p95_s * 1e3,
            v1.p95_s * 1e3,
            c.max_latency_ratio
        ));
    }
    Judgement::Pass
}

pub use gpulab_core::stats::quantile;

/// A speed curve's batch time for `n` requests: linear between points, extrapolated from the
/// last two beyond the end (and flat below the first).
pub fn curve_seconds(curve: &[super::scenario::BatchTime], n: usize) -> f64 {
    let n = n as f64;
    let Some(first) = curve.first() else { return 0.0 };
    if curve.len() == 1 || n <= first.batch as f64 {
        return first.seconds;
    }
    let i = curve.iter().position(|p| p.batch as f64 >= n).unwrap_or(curve.len() - 1).max(1);
    let (a, b) = (&curve[i - 1], &curve[i]);
    // A curve that falls beyond its last point must not extrapolate to zero or below.
    (a.seconds + (n - a.batch as f64) * (b.seconds - a.seconds) / (b.batch - a.batch) as f64).max(1e-6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::Scenario;

    #[test]
    fn hpa_rule_scales_in_proportion_and_respects_the_bounds() {
        let a = Scenario::preset("steady-day").unwrap().autoscaler; // target 4, 1..=12
        assert_eq!(desired_workers(&a, 2, 8.0, true), 4);
        assert_eq!(desired_workers(&a, 2, 4.2, true), 2, "within the 10% tolerance");
        assert_eq!(desired_workers(&a, 4, 1.0, false), 1);
        assert_eq!(desired_workers(&a, 4, 1000.0, true), 12, "clamped to max");
        assert_eq!(desired_workers(&a, 4, 0.0, false), 1, "clamped to min");
    }

    #[test]
    fn quantile_by_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(quantile(&mut v, 0.95), Some(95.0));
        assert_eq!(quantile(&mut v, 0.5), Some(50.0));
        assert_eq!(quantile(&mut [], 0.5), None);
    }

    #[test]
    fn the_rule_rolls_back_on_errors_or_latency_and_waits_for_samples() {
        let c = Scenario::preset("bad-release").unwrap().canary;
        let v1 = VersionStats { served: 1000, error_rate: 0.002, p95_s: 0.2 };
        assert_eq!(judge(&c, &v1, &VersionStats { served: 5, error_rate: 1.0, p95_s: 9.0 }), Judgement::Wait);
        assert!(
            matches!(judge(&c, &v1, &VersionStats { served: 100, error_rate: 0.05, p95_s: 0.2 }), Judgement::RollBack(r) if r.contains("error rate"))
        );
        assert!(
            matches!(judge(&c, &v1, &VersionStats { served: 100, error_rate: 0.0, p95_s: 0.35 }), Judgement::RollBack(r) if r.contains("p95"))
        );
        assert_eq!(judge(&c, &v1, &VersionStats { served: 100, error_rate: 0.003, p95_s: 0.22 }), Judgement::Pass);
    }
}
