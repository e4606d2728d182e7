//! What the replicas measured, summed up: the step split into compute / exposed communication /
//! idle (derived from every replica's clock readings), bytes, throughput, and the timeline.

use serde::{Deserialize, Serialize};

use super::DpConfig;
use super::bucket::Bucket;
use super::replica::{LinkProbe, ReplicaOut};
use crate::nn::MlpConfig;
use crate::train::{StepClock, TrainConfig};
use gpulab_core::spans::{Span, Timeline};
use gpulab_core::tensor::BackendInfo;

/// Mean seconds per step on one replica (or averaged over the replicas).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepSplit {
    /// Gathering the shard and writing it to the device.
    pub data_s: f64,
    /// Forward, backward and the optimizer step.
    pub compute_s: f64,
    /// Gradient synchronisation this replica waited for beyond the slowest replica's compute.
    pub exposed_comm_s: f64,
    /// Waiting for the slowest replica to finish its backward.
    pub idle_s: f64,
}

impl StepSplit {
    pub fn total(&self) -> f64 {
        self.data_s + self.compute_s + self.exposed_comm_s + self.idle_s
    }
}

/// One data-parallel run.
#[derive(Clone, Debug)]
pub struct DpReport {
    /// What the replicas are (`ReplicaKind::label`).
    pub label: String,
    pub replicas: usize,
    pub global_batch: usize,
    pub per_replica_batch: usize,
    pub steps: u64,
    pub samples: u64,
    /// Training wall time, validation excluded: the slowest replica's. Measured.
    pub train_wall_s: f64,
    /// Derived: samples / train_wall_s.
    pub samples_per_s: f64,
    /// Mean over replicas; per replica below. Derived from the replicas' clock readings.
    pub split: StepSplit,
    pub per_replica: Vec<StepSplit>,
    /// Seconds per step inside the ring all-reduce (its waiting included), mean over replicas.
    pub allreduce_s_per_step: f64,
    /// S: the gradient bytes every replica contributes per step (parameters × 4).
    pub grad_bytes: u64,
    /// Bytes each replica sent per step, counted by the ring. Measured.
    pub bytes_sent_per_step: f64,
    pub buckets: usize,
    /// Validation accuracy after each epoch (replica 0).
    pub val_accuracy: Vec<f64>,
    pub final_val_accuracy: f64,
    /// Every replica ended with bit-identical parameters (checked, not assumed).
    pub replicas_identical: bool,
    /// Replica 0's final parameters, weights then biases per layer.
    pub params: Vec<Vec<f32>>,
    pub probe: Option<LinkProbe>,
    pub timeline: Timeline,
    pub backends: Vec<BackendInfo>,
    pub stopped_early: bool,
    /// Each replica's peak bytes of optimizer state (the ledger's): the whole state on every
    /// replica, or about 1/N of it with ZeRO-1. Measured.
    pub optimizer_state_peak: Vec<u64>,
}

pub(super) fn summarize(dp: &DpConfig, cfg: &TrainConfig, model: &MlpConfig, buckets: &[Bucket], outs: Vec<ReplicaOut>) -> DpReport {
    let n = outs.len().max(1);
    let steps = outs.iter().map(|o| o.steps.len()).min().unwrap_or(0);
    let mut per_replica = vec![StepSplit::default(); outs.len()];
    let all: Vec<&[StepClock]> = outs.iter().map(|o| o.steps.as_slice()).collect();
    for k in 0..steps {
        for (r, (t, sync, idle)) in sync_and_idle(&all, k).into_iter().enumerate() {
            let s = &mut per_replica[r];
            s.data_s += t.data_end - t.start;
            s.compute_s += (t.compute_end - t.data_end) + (t.updated - t.reduced);
            s.idle_s += idle;
            s.exposed_comm_s += sync - idle;
        }
    }
    let per_step = |s: StepSplit| StepSplit {
        data_s: s.data_s / steps.max(1) as f64,
        compute_s: s.compute_s / steps.max(1) as f64,
        exposed_comm_s: s.exposed_comm_s / steps.max(1) as f64,
        idle_s: s.idle_s / steps.max(1) as f64,
    };
    let per_replica: Vec<StepSplit> = per_replica.into_iter().map(per_step).collect();
    let mean = |f: fn(&StepSplit) -> f64| per_replica.iter().map(f).sum::<f64>() / n as f64;
    let split = StepSplit {
        data_s: mean(|s| s.data_s),
        compute_s: mean(|s| s.compute_s),
        exposed_comm_s: mean(|s| s.exposed_comm_s),
        idle_s: mean(|s| s.idle_s),
    };
    let train_wall_s = outs.iter().map(|o| o.train_wall_s).fold(0.0, f64::max);
    let samples = (steps * cfg.batch) as u64;
    let first = outs.first();
    let replicas_identical = outs.iter().all(|o| first.is_some_and(|f| bits(&o.params) == bits(&f.params)));
    let lanes: Vec<ReplicaLanes<'_>> = outs.iter().map(|o| ReplicaLanes { steps: &o.steps, comm_spans: &o.comm_spans }).collect();
    DpReport {
        label: dp.kind.label(dp.replicas),
        replicas: dp.replicas,
        global_batch: cfg.batch,
        per_replica_batch: cfg.batch / dp.replicas.max(1),
        steps: steps as u64,
        samples,
        train_wall_s,
        samples_per_s: samples as f64 / train_wall_s.max(1e-12),
        split,
        per_replica,
        allreduce_s_per_step: outs.iter().map(|o| o.comm.seconds).sum::<f64>() / n as f64 / steps.max(1) as f64,
        grad_bytes: model.parameter_count() as u64 * 4,
        bytes_sent_per_step: outs.iter().map(|o| o.comm.bytes_sent as f64).sum::<f64>() / n as f64 / steps.max(1) as f64,
        buckets: buckets.len(),
        final_val_accuracy: first.and_then(|o| o.val_accuracy.last().copied()).unwrap_or(0.0),
        val_accuracy: first.map(|o| o.val_accuracy.clone()).unwrap_or_default(),
        replicas_identical,
        params: first.map(|o| o.params.clone()).unwrap_or_default(),
        probe: first.and_then(|o| o.probe),
        timeline: timeline(dp, cfg.batch, &lanes),
        backends: outs.iter().map(|o| o.info.clone()).collect(),
        stopped_early: outs.iter().any(|o| o.stopped_early),
        optimizer_state_peak: outs.iter().map(|o| o.optimizer_state_peak).collect(),
    }
}

/// Step `k` of every replica: its clock readings, the time from its backward's end to its
/// gradients being reduced plus a sharded step's all-gather (sync), and the part of that spent
/// waiting for the slowest replica's backward (idle); the rest of sync is exposed communication.
fn sync_and_idle(replicas: &[&[StepClock]], k: usize) -> Vec<(StepClock, f64, f64)> {
    let slowest = replicas.iter().map(|s| s[k].compute_end).fold(f64::MIN, f64::max);
    replicas
        .iter()
        .map(|s| {
            let t = s[k];
            // Sharded, the all-gather after the shard's update is synchronisation too.
            let sync = (t.reduced - t.compute_end).max(0.0) + (t.end - t.updated).max(0.0);
            (t, sync, (slowest - t.compute_end).clamp(0.0, sync))
        })
        .collect()
}

/// One replica's clock readings, as far as the timeline needs them.
pub struct ReplicaLanes<'a> {
    pub steps: &'a [StepClock],
    /// All-reduces on the replica's communication thread (overlap on).
    pub comm_spans: &'a [(f64, f64)],
}

/// The per-replica timeline of a run's first `dp.timeline_steps` steps: data, compute, idle
/// (waiting for the slowest replica's backward) and exposed communication on each replica's
/// lane, and the overlapped all-reduces on its communication thread's lane. The same title
/// live (drawn while the run goes on) and in the report.
pub fn timeline(dp: &DpConfig, global_batch: usize, replicas: &[ReplicaLanes<'_>]) -> Timeline {
    let steps = replicas.iter().map(|o| o.steps.len()).min().unwrap_or(0).min(dp.timeline_steps);
    let mut spans = Vec::new();
    let all: Vec<&[StepClock]> = replicas.iter().map(|o| o.steps).collect();
    for k in 0..steps {
        for (r, (t, _, idle)) in sync_and_idle(&all, k).into_iter().enumerate() {
            let lane = format!("replica {r}");
            spans.push(Span::new(&lane, "data", t.start, t.data_end));
            spans.push(Span::new(&lane, "compute", t.data_end, t.compute_end));
            if idle > 0.0 {
                spans.push(Span::new(&lane, "idle", t.compute_end, t.compute_end + idle));
            }
            if t.reduced > t.compute_end + idle {
                spans.push(Span::new(&lane, "communication", t.compute_end + idle, t.reduced));
            }
            spans.push(Span::new(&lane, "compute", t.reduced, t.updated));
            if t.end > t.updated {
                spans.push(Span::new(&lane, "communication", t.updated, t.end));
            }
        }
    }
    let horizon = replicas.first().and_then(|o| o.steps.get(steps.saturating_sub(1))).map(|t| t.end).unwrap_or(0.0);
    for (r, o) in replicas.iter().enumerate() {
        let lane = format!("replica {r} all-reduce thread");
        spans.extend(o.comm_spans.iter().filter(|(a, _)| *a <= horizon).map(|&(a, b)| Span::new(&lane, "communication", a, b)));
    }
    let title = format!("{} · global batch {global_batch}", dp.kind.label(dp.replicas));
    let note =
        "CPU clock readings of each replica's thread, one shared origin; the lab records no GPU timestamps here (the GPU lane stays empty)"
            .to_string();
    Timeline::new(&title, spans, note)
}

fn bits(params: &[Vec<f32>]) -> Vec<u32> {
    params.iter().flatten().map(|v| v.to_bits()).collect()
}
