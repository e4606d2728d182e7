//! What the serving simulation records: a monitoring sample per period, running totals, the
//! autoscaler's actions and the canary's timeline.

use serde::{Deserialize, Serialize};

use super::control::VersionStats;

/// One monitoring sample. Rates and percentiles cover the period since the previous sample;
/// the `_total` fields and `in_flight` are the state at the sample's instant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub t_h: f64,
    pub offered_rps: f64,
    pub arrived_rps: f64,
    pub served_rps: f64,
    pub rejected: u64,
    pub timed_out: u64,
    /// Workers serving (idle or busy), starting (cold start), busy now.
    pub ready: u32,
    pub starting: u32,
    pub busy: u32,
    pub queue: u64,
    pub p50_s: Option<f64>,
    pub p95_s: Option<f64>,
    pub p99_s: Option<f64>,
    /// Share of the period's answered requests (served or timed out) within the SLO latency.
    pub within_slo: Option<f64>,
    pub cost_per_h: f64,
    pub canary_share: f64,
    pub arrived_total: u64,
    pub served_total: u64,
    pub rejected_total: u64,
    pub timed_out_total: u64,
    /// Answered without error within the SLO latency since the start (absent in older files).
    #[serde(default)]
    pub good_total: u64,
    /// Queued plus inside a batch on a worker.
    pub in_flight: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SimTotals {
    pub arrived: u64,
    pub rejected: u64,
    pub timed_out: u64,
    pub served: u64,
    /// Served with an error (the model version's error rate).
    pub errors: u64,
    /// Served without error within the SLO latency.
    pub good: u64,
    pub batches: u64,
    pub batched_requests: u64,
    pub preemptions: u64,
    /// Requests put back in the queue when their worker was reclaimed.
    pub requeued: u64,
    /// The most workers alive (starting or ready) at once.
    pub max_alive: u32,
    /// ∫ requests in the system dt (Little's L × time), request-seconds.
    pub in_system_area: f64,
    /// Σ time in system over requests that left (served or timed out), seconds.
    pub sojourn_sum: f64,
    /// Σ time queued before a worker took the request, over dispatched requests, seconds.
    pub queue_wait_sum: f64,
    pub busy_area: f64,
    pub ready_area: f64,
    /// ∫ workers paid for (starting or ready) dt, worker-seconds.
    pub worker_area: f64,
    /// Dollars.
    pub cost: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaleAction {
    pub t_h: f64,
    pub from: u32,
    pub to: u32,
    /// The signal's value that drove it.
    pub signal: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CanaryEvent {
    pub t_h: f64,
    pub action: String,
    /// v2's share after the action.
    pub share: f64,
    pub v1: Option<VersionStats>,
    pub v2: Option<VersionStats>,
    pub reason: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServingResult {
    pub samples: Vec<Sample>,
    pub totals: SimTotals,
    pub scale_actions: Vec<ScaleAction>,
    pub canary: Vec<CanaryEvent>,
    /// Latency percentiles over every served request of the run, seconds.
    pub p50_s: Option<f64>,
    pub p95_s: Option<f64>,
    pub p99_s: Option<f64>,
    pub stopped_early: bool,
    /// v2's accuracy as the evaluation gate measured it (simulated), when the gate ran.
    #[serde(default)]
    pub eval_accuracy: Option<f64>,
}
