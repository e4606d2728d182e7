//! The one progress protocol: what a training run reports as it goes, in process (a
//! `TrainSink`), from data-parallel replicas (tagged with their rank), and from a checkpointed
//! child process (one JSON line per event: `to_line` / `parse_line`, the same type's serde form).

use gpulab_core::stop::Stop;
use serde::{Deserialize, Serialize};

use super::EpochSummary;
use super::strategy::StepClock;
use gpulab_core::spans::Timeline;
use gpulab_core::tensor::{BackendInfo, MemCategory, MemoryReport};

/// What a training run reports. Lines written by older versions (without the fields marked
/// `default`) still parse.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TrainEvent {
    /// The backend the run trains on (a child process says it first).
    Backend {
        info: BackendInfo,
    },
    /// Before the first step: total steps planned.
    Started {
        total_steps: u64,
        steps_per_epoch: u64,
    },
    /// A checkpoint that failed validation on resume, and why.
    Skipped {
        path: String,
        kind: String,
        reason: String,
    },
    /// Training continues from this checkpoint.
    Resumed {
        path: String,
        step: u64,
        epoch: usize,
        batch: usize,
    },
    /// No checkpoint to resume from (or none asked for): training starts at step 0.
    Fresh,
    /// A log window (every `log_every` steps and at an epoch's end): mean loss and accuracy over
    /// its steps (a data-parallel run's: over every replica's rows), its wall seconds, its GPU
    /// busy seconds (timestamps; None without them) and the ledger's current bytes per category
    /// (empty ones left out) at its end. `replica` names the data-parallel replica whose device
    /// the window describes. Measured.
    #[serde(rename = "step")]
    Progress {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replica: Option<usize>,
        step: u64,
        epoch: usize,
        loss: f64,
        #[serde(default)]
        accuracy: f64,
        #[serde(default)]
        samples_per_s: f64,
        #[serde(default)]
        window_s: f64,
        #[serde(default, rename = "busy_s")]
        gpu_busy_s: Option<f64>,
        #[serde(default)]
        memory: Vec<(MemCategory, u64)>,
    },
    /// One data-parallel replica's latest step at a log window: compute, and waiting for the
    /// gradient sync (ms). Derived from its clock readings.
    Split {
        replica: usize,
        step: u64,
        compute_ms: f64,
        sync_ms: f64,
    },
    /// One replica's clock readings of the run's first steps, sent once (the coordinator draws
    /// the live timeline from every replica's).
    Lanes {
        replica: usize,
        steps: Vec<StepClock>,
        comm_spans: Vec<(f64, f64)>,
    },
    /// A timeline as it stands (a data-parallel run's replica lanes).
    Timeline(Box<Timeline>),
    /// A checkpoint write is starting.
    Saving {
        step: u64,
    },
    /// A checkpoint is on disk. `write_s` covers encode, write, fsyncs and rename. Measured.
    Saved {
        step: u64,
        path: String,
        bytes: u64,
        write_s: f64,
    },
    /// After each epoch: its training figures and the validation pass.
    Epoch(EpochSummary),
    /// The device work of the training steps (a GPU run's counts; a replica's own device).
    /// Measured.
    Counts {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replica: Option<usize>,
        counts: super::run::RunCounts,
    },
    /// The run is over (a child process says so last). Also the model trained ("CNN 1x8x8 …"
    /// or "MLP 64-32-10") and its parameter count.
    Finished {
        steps: u64,
        val_accuracy: f64,
        train_wall_s: f64,
        #[serde(default)]
        model: String,
        #[serde(default)]
        parameters: u64,
    },
    Failed {
        message: String,
    },
}

impl TrainEvent {
    /// The event as one JSON line (without the newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("training events serialise")
    }

    /// Parses one line; anything else is the caller's "unexpected output".
    pub fn parse_line(line: &str) -> Option<TrainEvent> {
        serde_json::from_str(line.trim()).ok()
    }
}

/// The current bytes of a ledger report, categories that hold nothing left out (what a
/// `Progress` event carries).
pub fn memory_held(report: &MemoryReport) -> Vec<(MemCategory, u64)> {
    report.categories.iter().filter(|c| c.1 > 0).map(|c| (c.0, c.1)).collect()
}

pub trait TrainSink {
    fn event(&mut self, ev: TrainEvent);
    /// Looked at between steps; once set, the run ends early (its report says so).
    fn stop(&self) -> &Stop {
        Stop::never()
    }
}

/// Discards events.
pub struct NullSink;

impl TrainSink for NullSink {
    fn event(&mut self, _ev: TrainEvent) {}
}

impl<F: FnMut(TrainEvent)> TrainSink for F {
    fn event(&mut self, ev: TrainEvent) {
        self(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The child's lines keep their meaning: a window is an "event":"step" line with the names
    /// older lines used (busy_s), and an old line without the newer fields still reads.
    #[test]
    fn lines_keep_the_child_protocols_names_and_read_old_lines() {
        let ev = TrainEvent::Progress {
            replica: None,
            step: 7,
            epoch: 1,
            loss: 0.5,
            accuracy: 0.25,
            samples_per_s: 10.0,
            window_s: 0.125,
            gpu_busy_s: Some(0.0625),
            memory: vec![(MemCategory::Parameters, 1024)],
        };
        let line = ev.to_line();
        assert!(line.starts_with(r#"{"event":"step","step":7"#) && line.contains(r#""busy_s":0.0625"#), "{line}");
        assert!(!line.contains("replica"), "{line}");
        assert_eq!(TrainEvent::parse_line(&line), Some(ev));
        let old = r#"{"event":"step","step":3,"epoch":0,"loss":1.5}"#;
        assert!(
            matches!(TrainEvent::parse_line(old), Some(TrainEvent::Progress { step: 3, window_s, gpu_busy_s: None, .. }) if window_s == 0.0)
        );
        let old_epoch = r#"{"event":"epoch","epoch":2,"val_loss":0.5,"val_accuracy":0.75}"#;
        assert!(matches!(TrainEvent::parse_line(old_epoch), Some(TrainEvent::Epoch(e)) if e.epoch == 2 && e.val_accuracy == 0.75));
        assert_eq!(TrainEvent::parse_line(r#"{"event":"nope"}"#), None);
    }
}
