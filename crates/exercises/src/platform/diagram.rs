//! The chapter's architecture as a `report::Diagram`: object storage → training data → GPU
//! training cluster → checkpoint storage → model registry → GPU inference cluster → API gateway
//! → monitoring, each box with the simulation's figures at one monitoring sample and the
//! scenario settings it was built from. The lab redraws it live; the report attaches it as SVG.

use super::simulated;
use gpulab_systems::platform::Sample;
use gpulab_systems::platform::monitoring;
use gpulab_systems::platform::scenario::Scenario;
use gpulab_systems::platform::training::{self, JobOutcome};
use gpulab_systems::report::{Diagram, DiagramNode};

/// The boxes' labels, in the chain's order (the tests check the SVG names each).
pub const STAGES: [&str; 8] = [
    "Object storage",
    "Training data",
    "GPU training cluster",
    "Checkpoint storage",
    "Model registry",
    "GPU inference cluster",
    "API gateway",
    "Monitoring",
];

/// What the registry has seen of the rollout so far (from the samples' canary share).
#[derive(Clone, Copy, Debug, Default)]
pub struct Rollout {
    pub max_share: f64,
}

impl Rollout {
    pub fn observe(&mut self, s: &Sample) {
        self.max_share = self.max_share.max(s.canary_share);
    }

    fn lines(&self, sc: &Scenario, s: &Sample) -> Vec<String> {
        let share = s.canary_share;
        if share >= 1.0 {
            vec!["v2 production".into(), "v1 archived".into()]
        } else if share > 0.0 {
            vec!["v1 production".into(), format!("v2 canary at {:.0}%", share * 100.0)]
        } else if self.max_share > 0.0 {
            vec!["v1 production".into(), "v2 rolled back, archived".into()]
        } else if sc.canary.enabled {
            vec!["v1 production".into(), format!("v2 staging (canary at {:.1} h)", sc.canary.start_h)]
        } else {
            vec!["v1 production".into()]
        }
    }
}

/// Requests answered without error within the SLO latency, of those answered (served, timed out
/// or rejected), since the start: the report's `within_slo` formula over the sample's totals.
fn slo_so_far(s: &Sample) -> Option<f64> {
    let answered = s.served_total + s.timed_out_total + s.rejected_total;
    (answered > 0).then(|| s.good_total as f64 / answered as f64)
}

fn kv(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn node(id: &str, i: usize, metrics: Vec<String>, settings: Vec<(String, String)>) -> DiagramNode {
    // A snake over two rows of four: left to right, then back right to left.
    let (col, row) = if i < 4 { (i as u32, 0) } else { (7 - i as u32, 1) };
    DiagramNode { id: id.into(), label: STAGES[i].into(), col, row, metrics, settings, alerts: Vec::new() }
}

/// The diagram at sample `s`; `job` is the training job's mean outcome at the scenario's interval.
pub fn build(sc: &Scenario, s: &Sample, job: &JobOutcome, rollout: &Rollout) -> Diagram {
    let t = &sc.training;
    let d = &t.data;
    let (p, a, g, k) = (&sc.pool, &sc.autoscaler, &sc.gateway, &sc.canary);
    let read_h = d.read_h();
    let compute_h = training::compute_h(t);
    let ms = |v: Option<f64>| v.map_or("—".to_string(), |x| format!("{:.0} ms", x * 1e3));
    let mut nodes = vec![
        node(
            "storage",
            0,
            vec![format!("read {} GB/s", d.read_gb_per_s), format!("data set {} GB", d.dataset_gb)],
            kv(&[("training.data.read_gb_per_s", d.read_gb_per_s.to_string()), ("training.data.dataset_gb", d.dataset_gb.to_string())]),
        ),
        node(
            "data",
            1,
            vec![
                format!(
                    "{} epoch{}: {:.1} h of reads",
                    gpulab_core::format::number(d.epochs),
                    if d.epochs == 1.0 { "" } else { "s" },
                    read_h
                ),
                if read_h > compute_h { "input-bound: GPUs wait".into() } else { format!("reads < compute {compute_h:.1} h") },
            ],
            kv(&[("training.data.epochs", d.epochs.to_string()), ("training.work_h", t.work_h.to_string())]),
        ),
        node(
            "training",
            2,
            vec![
                format!("{}, {}", gpulab_core::format::plural(u64::from(t.gpus), "GPU"), if t.spot { "spot" } else { "on demand" }),
                format!("wall {:.1} h, lost {:.1} h", job.wall_h, job.lost_h),
                format!("{:.1} preemptions (mean)", job.preemptions),
            ],
            kv(&[
                ("training.gpus", t.gpus.to_string()),
                ("training.gpu.name", t.gpu.name.clone()),
                ("training.gpu.on_demand_per_h", format!("${}", t.gpu.on_demand_per_h)),
                ("training.gpu.spot_per_h", format!("${}", t.gpu.spot_per_h)),
                ("training.spot", t.spot.to_string()),
                ("training.mtbf_h", t.mtbf_h.to_string()),
                ("training.precision_speedup", t.precision_speedup.to_string()),
            ]),
        ),
        node(
            "checkpoints",
            3,
            vec![
                format!("every {:.0} min, {} s each", t.checkpoint_interval_h * 60.0, t.checkpoint_write_s),
                format!("Daly's optimum {:.0} min", training::daly_h(t) * 60.0),
            ],
            kv(&[
                ("training.checkpoint_interval_h", t.checkpoint_interval_h.to_string()),
                ("training.checkpoint_write_s", t.checkpoint_write_s.to_string()),
                ("training.restart_s", t.restart_s.to_string()),
            ]),
        ),
        node(
            "registry",
            4,
            rollout.lines(sc, s),
            kv(&[
                ("canary.enabled", k.enabled.to_string()),
                ("canary.start_h", k.start_h.to_string()),
                ("canary.steps", format!("{:?}", k.steps)),
                ("canary.window_s", k.window_s.to_string()),
                ("canary.max_error_increase", k.max_error_increase.to_string()),
                ("canary.max_latency_ratio", k.max_latency_ratio.to_string()),
            ]),
        ),
        node(
            "inference",
            5,
            vec![
                format!("{} serving, {} starting", s.ready, s.starting),
                format!("{} busy, {} queued", s.busy, s.queue),
                format!("${:.2}/h", s.cost_per_h),
            ],
            kv(&[
                ("pool.gpu.name", p.gpu.name.clone()),
                ("pool.max_batch", p.max_batch.to_string()),
                ("pool.max_queue_delay_s", p.max_queue_delay_s.to_string()),
                ("pool.cold_start_s", p.cold_start_s.to_string()),
                ("pool.spot_share", p.spot_share.to_string()),
                ("pool.curve_source", p.curve_source.clone()),
                ("autoscaler.signal", a.signal.name().to_string()),
                ("autoscaler.target", a.target.to_string()),
                ("autoscaler.min_workers", a.min_workers.to_string()),
                ("autoscaler.max_workers", a.max_workers.to_string()),
                ("autoscaler.scale_up_cooldown_s", a.scale_up_cooldown_s.to_string()),
                ("autoscaler.scale_down_cooldown_s", a.scale_down_cooldown_s.to_string()),
            ]),
        ),
        node(
            "gateway",
            6,
            vec![
                format!("{:.1} req/s offered", s.offered_rps),
                format!("p50 {} · p95 {}", ms(s.p50_s), ms(s.p95_s)),
                format!("{} rejected, {} timed out", s.rejected_total, s.timed_out_total),
            ],
            kv(&[
                ("gateway.rate_limit_rps", g.rate_limit_rps.to_string()),
                ("gateway.timeout_s", g.timeout_s.to_string()),
                ("traffic.base_rps", sc.traffic.base_rps.to_string()),
                ("traffic.diurnal_amplitude", sc.traffic.diurnal_amplitude.to_string()),
            ]),
        ),
        node(
            "monitoring",
            7,
            vec![
                // The whole run so far (the verdict's share at the end: good ÷ answered), then
                // this sample's window, each said so.
                format!(
                    "SLO so far {} (target {} %)",
                    slo_so_far(s).map_or("—".into(), |w| format!("{:.2} %", w * 100.0)),
                    gpulab_core::format::number(sc.slo_target * 100.0)
                ),
                s.within_slo.map_or("this window: —".into(), |w| format!("this window {:.2} %", w * 100.0)),
                format!("{} of {} served", s.served_total, s.arrived_total),
            ],
            kv(&[
                ("sample_every_s", sc.sample_every_s.to_string()),
                ("slo_latency_s", sc.slo_latency_s.to_string()),
                ("slo_target", sc.slo_target.to_string()),
                ("alert: hardware utilisation ≥", monitoring::HOT_UTILISATION.to_string()),
                ("alert: checkpoint interval off Daly's by ×", monitoring::INTERVAL_RATIO.to_string()),
            ]),
        ),
    ];
    if let Some(m) = nodes.last_mut() {
        m.alerts = monitoring::alerts(sc, s).into_iter().map(|a| format!("{}: {}", a.layer.name(), a.message)).collect();
    }
    Diagram {
        title: format!("Platform architecture · scenario “{}”", sc.name),
        caption: format!("at {:.2} h simulated", s.t_h),
        nodes,
        edges: (0..STAGES.len() - 1).map(|i| (i, i + 1)).collect(),
        provenance: simulated(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_core::stop::Stop;
    use gpulab_systems::platform;

    /// The monitoring box's "so far" at the last sample is the verdict's SLO share as printed
    /// (before, the box showed only the last window's share, which disagreed with the verdict).
    #[test]
    fn the_monitoring_box_ends_on_the_verdicts_slo_share() {
        for name in ["steady-day", "bad-release"] {
            let mut sc = Scenario::preset(name).unwrap();
            sc.duration_h = 3.0;
            let r = platform::simulate(&sc, &Stop::new(), &mut |_| {}).unwrap();
            let job = JobOutcome { wall_h: 1.0, lost_h: 0.0, restart_h: 0.0, checkpoint_h: 0.0, preemptions: 0.0, finished: true };
            let d = build(&sc, r.samples.last().unwrap(), &job, &Rollout::default());
            let monitoring = d.nodes.iter().find(|n| n.id == "monitoring").unwrap();
            let want = format!("SLO so far {:.2} %", super::super::report::serving_numbers(&sc, &r).within_slo * 100.0);
            assert!(
                monitoring.metrics[0].starts_with(&want),
                "{name}: box says {:?}, the verdict's share is {want}",
                monitoring.metrics[0]
            );
        }
    }
}
