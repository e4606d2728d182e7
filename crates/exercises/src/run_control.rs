//! Pause, step and speed for a run that advances in simulated time. The lab holds one
//! `RunControl` per run and the worker checks it through `Sink::run_control` at each live point;
//! with no control (the CLI, tests) a run goes flat out. Pacing only waits: it never changes what
//! is computed, so a paced run's report equals an unpaced one's.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::sink::Sink;

/// The longest single wait for pacing, so a stop or a pause is seen promptly.
const SLICE: Duration = Duration::from_millis(20);
/// Pacing never holds one point longer than this, whatever the speed.
const MAX_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
pub struct RunControl {
    paused: AtomicBool,
    /// Live points to let through while paused.
    steps: AtomicU64,
    /// Simulated seconds per wall second (f64 bits); 0 = as fast as possible.
    speed_bits: AtomicU64,
}

impl RunControl {
    pub fn new(speed: f64) -> Self {
        let c = RunControl::default();
        c.set_speed(speed);
        c
    }

    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// While paused: let one more live point through.
    pub fn step(&self) {
        self.steps.fetch_add(1, Ordering::Relaxed);
    }

    /// Simulated seconds per wall second; 0 (or anything not finite and positive) = flat out.
    pub fn set_speed(&self, speed: f64) {
        let s = if speed.is_finite() && speed > 0.0 { speed } else { 0.0 };
        self.speed_bits.store(s.to_bits(), Ordering::Relaxed);
    }

    pub fn speed(&self) -> f64 {
        f64::from_bits(self.speed_bits.load(Ordering::Relaxed))
    }

    fn take_step(&self) -> bool {
        self.steps.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
    }
}

/// Called by a run at each live point that covered `sim_seconds` of simulated time: waits while
/// the watcher has paused (until a step, a resume or a stop), then long enough to keep the
/// chosen speed. Returns at once when the sink has no control.
pub fn pace(sink: &dyn Sink, sim_seconds: f64) {
    let Some(c) = sink.run_control() else { return };
    while c.is_paused() && !sink.stop_requested() {
        if c.take_step() {
            return;
        }
        std::thread::sleep(SLICE);
    }
    let speed = c.speed();
    if speed <= 0.0 || !sim_seconds.is_finite() || sim_seconds <= 0.0 {
        return;
    }
    let wait = Duration::from_secs_f64((sim_seconds / speed).min(MAX_WAIT.as_secs_f64()));
    let t0 = Instant::now();
    while t0.elapsed() < wait && !sink.stop_requested() && !c.is_paused() {
        std::thread::sleep(SLICE.min(wait.saturating_sub(t0.elapsed())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChannelSink, Event};
    use std::sync::Arc;

    fn sink(control: Arc<RunControl>) -> (ChannelSink, std::sync::mpsc::Receiver<Event>) {
        let (tx, rx) = std::sync::mpsc::channel();
        (ChannelSink { tx, stop: Default::default(), wake: Box::new(|| {}), control }, rx)
    }

    #[test]
    fn a_paused_run_waits_for_a_step_and_a_stop_ends_the_wait() {
        let c = Arc::new(RunControl::new(0.0));
        c.set_paused(true);
        c.step();
        let (s, _rx) = sink(c.clone());
        pace(&s, 1.0); // the step lets one point through
        assert!(!c.take_step(), "the step was used");
        let stop = s.stop.clone();
        let t = std::thread::spawn(move || {
            pace(&s, 1.0);
            s.stop_requested()
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!t.is_finished(), "still paused");
        stop.set();
        assert!(t.join().unwrap());
    }

    #[test]
    fn speed_is_clamped_and_no_control_means_no_wait() {
        let c = RunControl::new(f64::NAN);
        assert_eq!(c.speed(), 0.0);
        c.set_speed(-3.0);
        assert_eq!(c.speed(), 0.0);
        c.set_speed(3600.0);
        assert_eq!(c.speed(), 3600.0);
        let mut collect = crate::CollectSink::default();
        collect.events.clear();
        pace(&collect, 1e9); // no control: returns at once
    }
}
