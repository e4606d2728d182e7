//! How a running exercise talks to whoever watches it: events out, a stop flag in. The GUI's
//! sink forwards events over a channel and wakes the UI; the CLI's draws progress bars; tests
//! collect.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// Checked between steps; a run that sees it stops and reports what it has.
    fn stop_requested(&self) -> bool;
    /// Pause, step and speed from whoever watches (the lab); None = run flat out (CLI, tests).
    fn run_control(&self) -> Option<&RunControl> {
        None
    }
}

/// Forwards events over a channel (to a UI thread) and calls `wake` after each.
pub struct ChannelSink {
    pub tx: Sender<Event>,
    pub stop: Arc<AtomicBool>,
    pub wake: Box<dyn Fn() + Send>,
    pub control: Arc<RunControl>,
}

impl Sink for ChannelSink {
    fn emit(&mut self, ev: Event) {
        // A closed channel means the viewer is gone; the stop flag ends the run.
        if self.tx.send(ev).is_err() {
            self.stop.store(true, Ordering::Relaxed);
        }
        (self.wake)();
    }
    fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    fn run_control(&self) -> Option<&RunControl> {
        Some(&self.control)
    }
}

/// Keeps every event (tests) and optionally stops after a number of them.
#[derive(Default)]
pub struct CollectSink {
    pub events: Vec<Event>,
    pub stop: Option<Arc<AtomicBool>>,
}

impl Sink for CollectSink {
    fn emit(&mut self, ev: Event) {
        self.events.push(ev);
    }
    fn stop_requested(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

/// Lets a training run report into an exercise sink: per-step loss points, the device watch
/// (`watch::emit`: GPU busy % and memory per log window) and the stop flag.
pub struct TrainBridge<'a> {
    pub sink: &'a mut dyn Sink,
    pub series: String,
    pub total_steps: u64,
}

impl gpulab_systems::train::TrainSink for TrainBridge<'_> {
    fn event(&mut self, ev: gpulab_systems::train::TrainEvent) {
        use gpulab_systems::train::TrainEvent as T;
        match ev {
            T::Started { total_steps, .. } => self.total_steps = total_steps,
            T::Progress { step, loss, window_s, gpu_busy_s, memory, .. } => {
                self.sink.emit(Event::Point {
                    chart: "loss".into(),
                    series: self.series.clone(),
                    x: step as f64,
                    y: loss,
                    provenance: Provenance::Measured,
                });
                let window =
                    super::watch::Window { step, wall_s: window_s, busy_s: gpu_busy_s, memory: super::watch::Window::memory_of(&memory) };
                super::watch::emit(&mut *self.sink, &self.series, &window);
                self.sink.emit(Event::Progress { done: step, total: self.total_steps });
            }
            T::Epoch(e) => {
                self.sink.emit(Event::Point {
                    chart: "val_accuracy".into(),
                    series: self.series.clone(),
                    x: (e.epoch + 1) as f64,
                    y: e.val_accuracy * 100.0,
                    provenance: Provenance::Measured,
                });
            }
        }
    }
    fn stop_requested(&self) -> bool {
        self.sink.stop_requested()
    }
}
