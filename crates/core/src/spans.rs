//! A cheap span recorder shared by every thread of a run: each span is a lane (a thread or the
//! GPU queue), a stage name and start/end times in seconds since the recorder was made. Spans go
//! into one Vec behind a mutex: a few thousand per run, so contention is negligible.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// The main (training) thread's lane.
pub const MAIN: &str = "main thread";
/// The GPU queue's lane (kernel times from timestamp queries).
pub const GPU: &str = "GPU queue";

/// The stages of a step, as named on the timeline and in the verdict.
pub mod stage {
    pub const LOAD: &str = "load";
    pub const COLLATE: &str = "collate";
    pub const DATA_WAIT: &str = "data wait";
    pub const UPLOAD: &str = "upload";
    pub const RECORD: &str = "record";
    pub const SUBMIT: &str = "submit";
    pub const WAIT: &str = "wait";
    pub const READBACK: &str = "readback";
    /// Gradient all-reduce the training thread waited for (data parallelism: the part not
    /// hidden behind backward).
    pub const ALLREDUCE: &str = "all-reduce";
}

/// One span. On the GPU lane, `flops` and `bytes` estimate the kernel's work (from its shapes and
/// bound buffer sizes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Span {
    pub lane: String,
    pub name: String,
    pub start_s: f64,
    pub end_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<f64>,
}

impl Span {
    pub fn new(lane: &str, name: &str, start_s: f64, end_s: f64) -> Self {
        Span { lane: lane.into(), name: name.into(), start_s, end_s, flops: None, bytes: None }
    }
    pub fn duration(&self) -> f64 {
        (self.end_s - self.start_s).max(0.0)
    }
}

/// Clone it into every thread; all clones share one clock and one span list.
#[derive(Clone)]
pub struct SpanRecorder {
    origin: Instant,
    spans: Arc<Mutex<Vec<Span>>>,
}

impl Default for SpanRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl SpanRecorder {
    pub fn new() -> Self {
        SpanRecorder { origin: Instant::now(), spans: Arc::default() }
    }

    /// Seconds since the recorder was made.
    pub fn at(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.origin).as_secs_f64()
    }

    pub fn record(&self, lane: &str, name: &str, start: Instant, end: Instant) {
        self.push(Span::new(lane, name, self.at(start), self.at(end)));
    }

    pub fn push(&self, span: Span) {
        self.spans.lock().unwrap_or_else(|p| p.into_inner()).push(span);
    }

    /// Runs `f` and records it as a span.
    pub fn time<T>(&self, lane: &str, name: &str, f: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let out = f();
        self.record(lane, name, t0, Instant::now());
        out
    }

    /// Everything recorded so far, sorted by lane then start.
    pub fn snapshot(&self) -> Vec<Span> {
        let mut v = self.spans.lock().unwrap_or_else(|p| p.into_inner()).clone();
        v.sort_by(|a, b| a.lane.cmp(&b.lane).then(a.start_s.total_cmp(&b.start_s)));
        v
    }
}

/// The lane of loader worker `i`.
pub fn worker_lane(i: usize) -> String {
    format!("loader worker {i}")
}

/// A recorded run: its lanes in display order, its spans, and a note for the GPU lane where it
/// has no timestamps.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub title: String,
    pub lanes: Vec<String>,
    pub spans: Vec<Span>,
    /// Why the GPU lane is empty, or how it was aligned with the CPU clock.
    pub gpu_note: String,
}

impl Timeline {
    /// Lanes in display order: loader workers, the main thread, the GPU queue.
    pub fn new(title: &str, spans: Vec<Span>, gpu_note: String) -> Self {
        let mut lanes: Vec<String> = Vec::new();
        for s in &spans {
            if !lanes.contains(&s.lane) {
                lanes.push(s.lane.clone());
            }
        }
        if !lanes.iter().any(|l| l == GPU) {
            lanes.push(GPU.into());
        }
        let rank = |l: &str| {
            if l.starts_with("loader") {
                0
            } else if l == MAIN {
                1
            } else if l == GPU {
                3
            } else {
                2
            }
        };
        lanes.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
        Timeline { title: title.into(), lanes, spans, gpu_note }
    }

    pub fn lane_spans<'a>(&'a self, lane: &'a str) -> impl Iterator<Item = &'a Span> + 'a {
        self.spans.iter().filter(move |s| s.lane == lane)
    }

    /// First start and last end over all spans.
    pub fn extent(&self) -> (f64, f64) {
        let lo = self.spans.iter().map(|s| s.start_s).fold(f64::INFINITY, f64::min);
        let hi = self.spans.iter().map(|s| s.end_s).fold(f64::NEG_INFINITY, f64::max);
        if lo.is_finite() && hi.is_finite() { (lo, hi) } else { (0.0, 0.0) }
    }

    /// The share of the extent the GPU lane was busy at all, percent; None without GPU spans.
    /// Derived from the timestamps (the timeline's own header).
    pub fn gpu_busy_percent(&self) -> Option<f64> {
        let gpu: Vec<&Span> = self.lane_spans(GPU).collect();
        let (t0, t1) = self.extent();
        (!gpu.is_empty()).then(|| union_length(&gpu) / (t1 - t0).max(1e-12) * 100.0)
    }

    /// Total time in spans named `name` on `lane`.
    pub fn total(&self, lane: &str, name: &str) -> f64 {
        self.lane_spans(lane).filter(|s| s.name == name).map(Span::duration).sum()
    }
}

/// Length of the union of the intervals (time a lane was busy at all).
pub fn union_length(spans: &[&Span]) -> f64 {
    let mut v: Vec<(f64, f64)> = spans.iter().map(|s| (s.start_s, s.end_s)).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut total, mut cur): (f64, Option<(f64, f64)>) = (0.0, None);
    for (a, b) in v {
        cur = match cur {
            Some((s, e)) if a <= e => Some((s, e.max(b))),
            Some((s, e)) => {
                total += e - s;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    total + cur.map_or(0.0, |(s, e)| e - s)
}
