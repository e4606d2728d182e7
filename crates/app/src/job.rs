//! One exercise run on a worker thread, and what the UI has received from it so far. The worker
//! reports through a `ChannelSink`; the UI drains the channel each frame with a time budget into
//! bounded histories.

use gpulab_core::stop::Stop;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpulab_exercises::{self as exercises, ChannelSink, Event, LiveChartSpec, RunControl, Settings};
use gpulab_systems::report::{Diagram, Provenance, Report, Table};

/// Most points kept per live series; beyond it the history is thinned to half (every other point).
pub const MAX_POINTS_PER_SERIES: usize = 200_000;
/// Log lines kept.
pub const MAX_LOG_LINES: usize = 500;

#[derive(Clone, Debug)]
pub struct LiveSeries {
    pub name: String,
    pub points: Vec<[f64; 2]>,
    pub provenance: Provenance,
}

#[derive(Clone, Debug)]
pub struct LiveChart {
    pub id: String,
    pub series: Vec<LiveSeries>,
}

/// Where a run stands.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    Running,
    Stopping,
    Finished,
    Failed(String),
}

/// Everything the UI shows about one run (the latest of an exercise).
pub struct RunView {
    pub exercise: String,
    pub status: Status,
    pub phase: String,
    pub progress: Option<(u64, u64)>,
    pub logs: VecDeque<String>,
    pub live: Vec<LiveChart>,
    pub tables: Vec<Table>,
    /// Timelines the run drew so far (each replaced by a later one with its title).
    pub timelines: Vec<gpulab_core::spans::Timeline>,
    /// The latest system diagram the run emitted (kept after it finishes).
    pub diagram: Option<Box<Diagram>>,
    /// Shared, so the results panel can hold it across `&mut self` calls without a copy.
    pub report: Option<std::sync::Arc<Report>>,
    pub started: Instant,
    pub elapsed: Option<Duration>,
    /// The live charts the exercise declares (titles and axes for `live`).
    pub declared: Vec<LiveChartSpec>,
}

impl RunView {
    fn new(exercise: &str, declared: Vec<LiveChartSpec>) -> Self {
        RunView {
            declared,
            exercise: exercise.to_string(),
            status: Status::Running,
            phase: "starting…".into(),
            progress: None,
            logs: VecDeque::new(),
            live: Vec::new(),
            tables: Vec::new(),
            timelines: Vec::new(),
            diagram: None,
            report: None,
            started: Instant::now(),
            elapsed: None,
        }
    }

    /// How to draw the live chart `id`: its declaration, or a generic one if the exercise
    /// emitted an id it did not declare.
    pub fn chart_spec(&self, id: &str) -> std::borrow::Cow<'_, LiveChartSpec> {
        match self.declared.iter().find(|d| d.id == id) {
            Some(d) => std::borrow::Cow::Borrowed(d),
            None => std::borrow::Cow::Owned(LiveChartSpec::undeclared(id)),
        }
    }

    /// Live chart ids received that the exercise did not declare (a test keeps this empty).
    pub fn undeclared_charts(&self) -> Vec<&str> {
        self.live.iter().filter(|c| !self.declared.iter().any(|d| d.id == c.id)).map(|c| c.id.as_str()).collect()
    }

    pub fn is_active(&self) -> bool {
        matches!(self.status, Status::Running | Status::Stopping)
    }

    fn log(&mut self, line: String) {
        if self.logs.len() >= MAX_LOG_LINES {
            self.logs.pop_front();
        }
        self.logs.push_back(line);
    }

    /// Applies one event; returns true when the run has ended.
    pub fn apply(&mut self, ev: Event) -> bool {
        match ev {
            Event::Phase(p) => {
                self.log(format!("== {p}"));
                self.phase = p;
                self.progress = None;
            }
            Event::Progress { done, total } => self.progress = Some((done, total)),
            Event::Log(l) => self.log(l),
            Event::Point { chart, series, x, y, provenance } => {
                if !x.is_finite() || !y.is_finite() {
                    return false;
                }
                let c = match self.live.iter().position(|c| c.id == chart) {
                    Some(i) => &mut self.live[i],
                    None => {
                        self.live.push(LiveChart { id: chart, series: Vec::new() });
                        self.live.last_mut().expect("just pushed")
                    }
                };
                let s = match c.series.iter().position(|s| s.name == series) {
                    Some(i) => &mut c.series[i],
                    None => {
                        c.series.push(LiveSeries { name: series, points: Vec::new(), provenance });
                        c.series.last_mut().expect("just pushed")
                    }
                };
                if s.points.len() >= MAX_POINTS_PER_SERIES {
                    let thinned: Vec<[f64; 2]> = s.points.iter().step_by(2).copied().collect();
                    s.points = thinned;
                }
                s.points.push([x, y]);
            }
            Event::Table(t) => match self.tables.iter_mut().find(|o| o.title == t.title) {
                Some(o) => *o = t,
                None => self.tables.push(t),
            },
            Event::Timeline(t) => match self.timelines.iter_mut().find(|o| o.title == t.title) {
                Some(o) => *o = *t,
                None => self.timelines.push(*t),
            },
            Event::Diagram(d) => self.diagram = Some(d),
            Event::Finished(r) => {
                self.elapsed = Some(self.started.elapsed());
                self.status = Status::Finished;
                self.phase = if r.stopped_early { "stopped early".into() } else { "finished".into() };
                self.progress = None;
                self.report = Some(std::sync::Arc::from(r));
                return true;
            }
            Event::Failed(msg) => {
                self.elapsed = Some(self.started.elapsed());
                self.log(format!("failed: {msg}"));
                self.phase = "failed".into();
                self.progress = None;
                self.status = Status::Failed(msg);
                return true;
            }
        }
        false
    }
}

/// A run in flight: the channel, the stop flag and the worker.
pub struct Job {
    pub exercise: String,
    rx: Receiver<Event>,
    /// The exercise's live charts, declared on the worker: declaring them may probe the driver's
    /// telemetry (`monitor::may_have_telemetry`), which never runs on the UI thread.
    declared: Option<Receiver<Vec<LiveChartSpec>>>,
    pub stop: Stop,
    /// Pause, step and speed, for exercises that honour them (`Exercise::controllable`).
    pub control: Arc<RunControl>,
    handle: Option<JoinHandle<()>>,
}

impl Job {
    /// Starts `exercise` with `settings` on a worker thread; `wake` is called after every event.
    pub fn start(exercise: &str, settings: Settings, wake: Box<dyn Fn() + Send>, control: Arc<RunControl>) -> (Job, RunView) {
        let (tx, rx) = mpsc::channel();
        let (declared_tx, declared_rx) = mpsc::channel();
        let control2 = control.clone();
        let stop = Stop::new();
        let id = exercise.to_string();
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new().name(format!("gpulab-run-{id}")).spawn(move || {
            let done_tx = tx.clone();
            let mut sink = ChannelSink { tx, stop: stop2, wake, control: control2 };
            let outcome = gpulab_core::device::cpu::drive(|| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match exercises::find(&id) {
                    Some(ex) => {
                        let _ = declared_tx.send(ex.live_charts());
                        ex.run(&settings, &mut sink).map_err(|e| e.to_string())
                    }
                    None => Err(format!("no exercise {id:?}")),
                }))
            });
            let ev = match outcome {
                Ok(Ok(report)) => Event::Finished(Box::new(report)),
                Ok(Err(msg)) => Event::Failed(msg),
                Err(p) => {
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "unknown panic".into());
                    Event::Failed(format!("the run crashed: {msg}"))
                }
            };
            let _ = done_tx.send(ev);
            (sink.wake)();
        });
        let (handle, early_fail) = match handle {
            Ok(h) => (Some(h), None),
            Err(e) => (None, Some(format!("could not start a worker thread: {e}"))),
        };
        let mut view = RunView::new(exercise, Vec::new());
        if let Some(msg) = early_fail {
            view.apply(Event::Failed(msg));
        }
        (Job { exercise: exercise.to_string(), rx, declared: Some(declared_rx), stop, control, handle }, view)
    }

    pub fn request_stop(&self) {
        self.stop.set();
    }

    /// Moves events into `view` for at most `budget`; returns true when the run has ended (or the
    /// worker is gone).
    pub fn drain(&mut self, view: &mut RunView, budget: Duration) -> bool {
        let t0 = Instant::now();
        loop {
            // Sent before the run's first event: taken before each event until it is in.
            if let Some(rx) = &self.declared
                && let Ok(d) = rx.try_recv()
            {
                view.declared = d;
                self.declared = None;
            }
            match self.rx.try_recv() {
                Ok(ev) => {
                    if view.apply(ev) {
                        return true;
                    }
                }
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Disconnected) => {
                    if view.is_active() {
                        view.apply(Event::Failed("the worker ended without a report".into()));
                    }
                    return true;
                }
            }
            if t0.elapsed() >= budget {
                return false;
            }
        }
    }

    /// Stops the run and waits for the worker at most `timeout`, then lets it go.
    pub fn shutdown(mut self, timeout: Duration) {
        self.request_stop();
        if let Some(h) = self.handle.take() {
            let t0 = Instant::now();
            while !h.is_finished() && t0.elapsed() < timeout {
                std::thread::sleep(Duration::from_millis(10));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}

/// At most `max` points of `pts`, evenly strided, always keeping the last one.
pub fn decimate(pts: &[[f64; 2]], max: usize) -> Vec<[f64; 2]> {
    if pts.len() <= max || max < 2 {
        return pts.to_vec();
    }
    let stride = pts.len().div_ceil(max - 1);
    let mut out: Vec<[f64; 2]> = pts.iter().step_by(stride).copied().collect();
    if let Some(last) = pts.last()
        && out.last() != Some(last)
    {
        out.push(*last);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimate_bounds_and_keeps_ends() {
        let pts: Vec<[f64; 2]> = (0..100_000).map(|i| [i as f64, (i * 2) as f64]).collect();
        let d = decimate(&pts, 2000);
        assert!(d.len() <= 2000, "{}", d.len());
        assert_eq!(d[0], pts[0]);
        assert_eq!(*d.last().unwrap(), *pts.last().unwrap());
        assert_eq!(decimate(&pts[..10], 2000).len(), 10);
    }

    #[test]
    fn live_series_stay_bounded() {
        let mut v = RunView::new("x", Vec::new());
        for i in 0..(MAX_POINTS_PER_SERIES + 10) {
            v.apply(Event::Point { chart: "loss".into(), series: "cpu".into(), x: i as f64, y: 1.0, provenance: Provenance::Measured });
        }
        assert!(v.live[0].series[0].points.len() <= MAX_POINTS_PER_SERIES);
        // Not declared: drawn with a generic title, and named as undeclared.
        assert_eq!(v.undeclared_charts(), vec!["loss"]);
        assert!(v.chart_spec("loss").title.contains("not declared"));
    }

    #[test]
    fn declared_charts_keep_their_titles() {
        for ex in gpulab_exercises::registry() {
            let declared = ex.live_charts();
            let mut v = RunView::new(ex.id(), declared.clone());
            for d in &declared {
                v.apply(Event::Point { chart: d.id.clone(), series: "s".into(), x: 1.0, y: 1.0, provenance: d.provenance.clone() });
                assert_eq!(*v.chart_spec(&d.id), *d);
            }
            assert!(v.undeclared_charts().is_empty(), "{}", ex.id());
        }
    }
}
