//! Monitoring's alert rules in the chapter's four layers — hardware, training, inference,
//! business — evaluated on each monitoring sample (and, for training, on the job's model).
//! Thresholds are fixed here and listed in lesson 10; every alert is as simulated as its inputs.

use serde::{Deserialize, Serialize};

use super::result::Sample;
use super::scenario::Scenario;
use super::training;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    Hardware,
    Training,
    Inference,
    Business,
}

impl Layer {
    pub const ALL: [Layer; 4] = [Layer::Hardware, Layer::Training, Layer::Inference, Layer::Business];

    pub fn name(self) -> &'static str {
        match self {
            Layer::Hardware => "hardware",
            Layer::Training => "training",
            Layer::Inference => "inference",
            Layer::Business => "business",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    pub layer: Layer,
    pub message: String,
}

/// Hardware: serving GPUs busier than this share have no headroom for a burst.
pub const HOT_UTILISATION: f64 = 0.9;
/// Training: a checkpoint interval this far (as a ratio either way) from Daly's optimum.
pub const INTERVAL_RATIO: f64 = 2.0;

/// The alerts that fire for one sample.
pub fn alerts(sc: &Scenario, s: &Sample) -> Vec<Alert> {
    let mut out = Vec::new();
    let mut fire = |layer, message: String| out.push(Alert { layer, message });
    if s.ready > 0 {
        let u = s.busy as f64 / s.ready as f64;
        if u >= HOT_UTILISATION {
            fire(Layer::Hardware, format!("GPU busy {:.0}% ≥ {:.0}%", u * 100.0, HOT_UTILISATION * 100.0));
        }
    }
    if s.ready + s.starting >= sc.autoscaler.max_workers && s.queue > 0 {
        fire(Layer::Hardware, format!("at max_workers {}, {} queued", sc.autoscaler.max_workers, s.queue));
    }
    fire_training(sc, &mut fire);
    if let Some(p95) = s.p95_s
        && p95 > sc.slo_latency_s
    {
        fire(Layer::Inference, format!("p95 {:.0} ms > SLO {:.0} ms", p95 * 1e3, sc.slo_latency_s * 1e3));
    }
    if s.timed_out + s.rejected > 0 {
        fire(Layer::Inference, format!("{} timed out, {} rejected", s.timed_out, s.rejected));
    }
    if let Some(w) = s.within_slo
        && w < sc.slo_target
    {
        fire(Layer::Business, format!("SLO {:.1}% < {:.1}%", w * 100.0, sc.slo_target * 100.0));
    }
    out
}

/// The training layer's rules: they depend on the job's design, not on the moment.
fn fire_training(sc: &Scenario, fire: &mut impl FnMut(Layer, String)) {
    let t = &sc.training;
    if t.data.read_h() > training::compute_h(t) {
        fire(Layer::Training, format!("input-bound: reads {:.1} h > compute {:.1} h", t.data.read_h(), training::compute_h(t)));
    }
    let daly = training::daly_h(t);
    let ratio = t.checkpoint_interval_h / daly;
    if t.spot && !(1.0 / INTERVAL_RATIO..=INTERVAL_RATIO).contains(&ratio) {
        fire(Layer::Training, format!("ckpt every {:.0} min, Daly {:.0} min", t.checkpoint_interval_h * 60.0, daly * 60.0));
    }
}

/// Per layer over a run: samples with an alert firing, and the first time one fired (h).
pub fn summary(sc: &Scenario, samples: &[Sample]) -> Vec<(Layer, u64, Option<f64>)> {
    let mut out: Vec<(Layer, u64, Option<f64>)> = Layer::ALL.iter().map(|&l| (l, 0, None)).collect();
    for s in samples {
        let fired = alerts(sc, s);
        for row in &mut out {
            if fired.iter().any(|a| a.layer == row.0) {
                row.1 += 1;
                row.2.get_or_insert(s.t_h);
            }
        }
    }
    out
}
