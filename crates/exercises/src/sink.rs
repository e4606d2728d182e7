//! How a running exercise talks to whoever watches it: events out, a stop flag in. The GUI's
//! sink forwards events over a channel and wakes the UI; the CLI's draws progress bars; tests
//! collect.

use gpulab_core::stop::Stop;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use super::run_control::RunControl;
use gpulab_systems::report::{Provenance, Report, Table};

#[derive(Clone, Debug)]
pub enum Event {
    /// A new stage of the run, e.g. "training on CPU".
    Phase(String),
    /// Progress within the current phase.
    Progress {
        done: u64,
        total: u64,
    },
    Log(String),
    /// A live chart point: chart id, series name, x, y.
    Point {
        chart: String,
        series: String,
        x: f64,
        y: f64,
        provenance: Provenance,
    },
    /// A results table as it stands (replaces an earlier one with the same title).
    Table(Table),
    /// A timeline as it stands (replaces an earlier one with the same title), drawn live
    /// before the report exists, e.g. exercise 6's per-replica lanes.
    Timeline(Box<gpulab_core::spans::Timeline>),
    /// The system diagram as it stands (replaces the earlier one).
    Diagram(Box<gpulab_systems::report::Diagram>),
    /// The run finished with this report.
    Finished(Box<Report>),
    /// The run failed; the message names the problem and what to do.
    Failed(String),
}

pub trait Sink {
    fn emit(&mut self, ev: Event);
    /// Looked at between steps; a run that sees it set stops and reports what it has.
    fn stop(&self) -> &Stop;
    /// `stop().is_set()`.
    fn stop_requested(&self) -> bool {
        self.stop().is_set()
    }
    /// Pause, step and speed from whoever watches (the lab); None = run flat out (CLI, tests).
    fn run_control(&self) -> Option<&RunControl> {
        None
    }
    /// Now on the clock of the run's driver telemetry (`monitor::Monitored`, which the registry
    /// wraps around exercises 1–9); None outside it.
    fn telemetry_clock(&self) -> Option<f64> {
        None
    }
    /// The mean utilisation the NVIDIA driver (NVML) reported for the GPU named like `adapter`
    /// since `from_s` on that clock; None without such readings. Measured by the run's monitor.
    fn nvml_utilisation_since(&mut self, _adapter: &str, _from_s: f64) -> Option<f64> {
        None
    }
}

/// Forwards events over a channel (to a UI thread) and calls `wake` after each.
pub struct ChannelSink {
    pub tx: Sender<Event>,
    pub stop: Stop,
    pub wake: Box<dyn Fn() + Send>,
    pub control: Arc<RunControl>,
}

impl Sink for ChannelSink {
    fn emit(&mut self, ev: Event) {
        // A closed channel means the viewer is gone; the stop flag ends the run.
        if self.tx.send(ev).is_err() {
            self.stop.set();
        }
        (self.wake)();
    }
    fn stop(&self) -> &Stop {
        &self.stop
    }
    fn run_control(&self) -> Option<&RunControl> {
        Some(&self.control)
    }
}

/// Keeps every event (tests); its `stop` may be set from elsewhere.
#[derive(Default)]
pub struct CollectSink {
    pub events: Vec<Event>,
    pub stop: Stop,
}

impl Sink for CollectSink {
    fn emit(&mut self, ev: Event) {
        self.events.push(ev);
    }
    fn stop(&self) -> &Stop {
        &self.stop
    }
}

/// The one adapter from the training protocol (`TrainEvent`: in-process runs, data-parallel
/// replicas, a checkpointed child's JSON lines) to an exercise's sink: the live charts ("loss",
/// "val_accuracy", the device watch's "gpu_busy" and "memory" per log window, a data-parallel
/// run's "replica_split" and timeline), the progress bar, resume logs, and the stop flag.
pub struct TrainBridge<'a> {
    pub sink: &'a mut dyn Sink,
    /// The run's series on the charts; a data-parallel replica's device windows and step split
    /// are "<series> replica R".
    pub series: String,
    /// Steps in the run (from `Started`).
    pub total_steps: u64,
    /// A progress bar several runs share: added to every step, and the bar's total.
    pub progress: Option<(u64, u64)>,
    /// Draw the live charts; false only moves the progress bar (a repeated round).
    pub charts: bool,
}

impl<'a> TrainBridge<'a> {
    pub fn new(sink: &'a mut dyn Sink, series: impl Into<String>) -> Self {
        TrainBridge { sink, series: series.into(), total_steps: 0, progress: None, charts: true }
    }

    fn point(&mut self, chart: &str, series: String, x: f64, y: f64, provenance: Provenance) {
        self.sink.emit(Event::Point { chart: chart.into(), series, x, y, provenance });
    }
}

impl gpulab_systems::train::TrainSink for TrainBridge<'_> {
    fn event(&mut self, ev: gpulab_systems::train::TrainEvent) {
        use gpulab_systems::train::TrainEvent as T;
        match ev {
            T::Started { total_steps, .. } => self.total_steps = total_steps,
            T::Progress { replica, step, loss, accuracy, samples_per_s, window_s, gpu_busy_s, memory, .. } => {
                // Replica 0 speaks for a data-parallel run (every replica's loss is the run's);
                // each replica's device is its own.
                let for_run = replica.is_none_or(|r| r == 0);
                if self.charts {
                    if for_run {
                        self.point("loss", self.series.clone(), step as f64, loss, Provenance::Measured);
                    }
                    let device = match replica {
                        Some(r) => format!("{} replica {r}", self.series),
                        None => self.series.clone(),
                    };
                    let window =
                        super::watch::Window { step, replica, loss, accuracy, wall_s: window_s, samples_per_s, busy_s: gpu_busy_s, memory };
                    super::watch::emit(&mut *self.sink, &device, &window);
                }
                if for_run {
                    let (done, total) = match self.progress {
                        Some((base, total)) => (base + step, total),
                        None => (step, self.total_steps),
                    };
                    self.sink.emit(Event::Progress { done, total });
                }
            }
            T::Split { replica, step, compute_ms, sync_ms } if self.charts => {
                let p = Provenance::derived("each replica's clock readings");
                let series = format!("{} replica {replica}", self.series);
                self.point("replica_split", format!("{series} compute"), step as f64, compute_ms, p.clone());
                self.point("replica_split", format!("{series} sync"), step as f64, sync_ms, p);
            }
            T::Timeline(t) if self.charts => self.sink.emit(Event::Timeline(t)),
            T::Counts { replica, counts } => {
                let name = match replica {
                    Some(r) => format!("{} replica {r}", self.series),
                    None => self.series.clone(),
                };
                self.sink.emit(Event::Table(super::device_counts::table(&[(name, counts)])));
            }
            T::Epoch(e) if self.charts => {
                self.point("val_accuracy", self.series.clone(), (e.epoch + 1) as f64, e.val_accuracy * 100.0, Provenance::Measured);
            }
            T::Skipped { path, reason, .. } => self.sink.emit(Event::Log(format!("resume skipped {path}: {reason}"))),
            T::Resumed { path, step, .. } => self.sink.emit(Event::Log(format!("resumed from {path} (step {step})"))),
            _ => {}
        }
    }
    fn stop(&self) -> &Stop {
        self.sink.stop()
    }
}
