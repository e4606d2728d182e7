//! The one reusable progress recorder: passes a run's events on and keeps each log window
//! (`TrainEvent::Progress`), for a report drawn after the run (a loss curve, memory over the
//! run) or a run that should end after a number of windows.

use super::sink::{TrainEvent, TrainSink};
use gpulab_core::stop::Stop;
use gpulab_core::tensor::MemCategory;

/// One log window as the run reported it. Measured (the busy percentage is derived).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Window {
    /// The step that ended the window.
    pub step: u64,
    /// The data-parallel replica whose device the window describes; None for one device.
    pub replica: Option<usize>,
    /// Mean training loss and accuracy over the window's steps.
    pub loss: f64,
    pub accuracy: f64,
    /// The window's wall time (steps, uploads and the read-back that ends it), seconds.
    pub wall_s: f64,
    /// Training samples per second over the window (its samples ÷ its wall time).
    pub samples_per_s: f64,
    /// GPU busy seconds in the window from timestamp queries; None on the CPU backend or an
    /// adapter without timestamps.
    pub busy_s: Option<f64>,
    /// The ledger's current bytes per category at the window's end.
    pub memory: Vec<(MemCategory, u64)>,
}

impl Window {
    /// The window a `Progress` event reports; None for any other event.
    pub fn of(ev: &TrainEvent) -> Option<Window> {
        match ev {
            TrainEvent::Progress { replica, step, loss, accuracy, samples_per_s, window_s, gpu_busy_s, memory, .. } => Some(Window {
                step: *step,
                replica: *replica,
                loss: *loss,
                accuracy: *accuracy,
                wall_s: *window_s,
                samples_per_s: *samples_per_s,
                busy_s: *gpu_busy_s,
                memory: memory.clone(),
            }),
            _ => None,
        }
    }

    /// Busy time as a percentage of the window's wall time (timestamps and wall clock are
    /// separate clocks, so a short window can read a little over 100; it is capped there).
    pub fn busy_percent(&self) -> Option<f64> {
        let busy = self.busy_s?;
        (self.wall_s > 0.0 && busy.is_finite()).then(|| (busy / self.wall_s * 100.0).clamp(0.0, 100.0))
    }
}

/// Passes every event on to `inner` and keeps each log window. With `stop_after(n)` the run
/// stops once `n` windows are in (besides whenever `inner`'s stop is set).
pub struct Recorder<S> {
    pub inner: S,
    pub windows: Vec<Window>,
    limit: Option<usize>,
    full: Stop,
}

impl<S: TrainSink> Recorder<S> {
    pub fn new(inner: S) -> Self {
        Recorder { inner, windows: Vec::new(), limit: None, full: Stop::new() }
    }

    pub fn stop_after(self, windows: usize) -> Self {
        Recorder { limit: Some(windows), ..self }
    }

    /// (step, mean training loss) of every window: the loss curve.
    pub fn losses(&self) -> Vec<[f64; 2]> {
        self.windows.iter().map(|w| [w.step as f64, w.loss]).collect()
    }
}

impl<S: TrainSink> TrainSink for Recorder<S> {
    fn event(&mut self, ev: TrainEvent) {
        if let Some(w) = Window::of(&ev) {
            self.windows.push(w);
            if self.limit.is_some_and(|n| self.windows.len() >= n) {
                self.full.set();
            }
        }
        self.inner.event(ev)
    }
    fn stop(&self) -> &Stop {
        if self.full.is_set() { &self.full } else { self.inner.stop() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::NullSink;

    fn window(step: u64) -> TrainEvent {
        TrainEvent::Progress {
            replica: None,
            step,
            epoch: 0,
            loss: step as f64 / 10.0,
            accuracy: 0.5,
            samples_per_s: 1.0,
            window_s: 2.0,
            gpu_busy_s: Some(3.0),
            memory: vec![],
        }
    }

    #[test]
    fn it_keeps_each_window_and_stops_after_the_limit() {
        let mut r = Recorder::new(NullSink).stop_after(2);
        r.event(TrainEvent::Fresh);
        r.event(window(1));
        assert!(!r.stop().is_set());
        r.event(window(2));
        assert!(r.stop().is_set());
        assert_eq!(r.losses(), vec![[1.0, 0.1], [2.0, 0.2]]);
        assert_eq!(r.windows[0].busy_percent(), Some(100.0), "capped at the wall time");
    }
}
