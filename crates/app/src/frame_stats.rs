//! How long the UI work of each frame takes: the status bar's rolling median, and the figures
//! screenshot mode prints (first frame after start, per-frame work while an exercise ran).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Frames the status bar's median covers.
const WINDOW: usize = 120;

pub struct FrameStats {
    recent: VecDeque<f64>,
    started: Instant,
    first_frame: Option<Duration>,
    /// Every frame's work while a run was in flight (kept only when `keep_running` is set).
    running_ms: Vec<f64>,
    keep_running: bool,
}

impl FrameStats {
    /// `keep_running`: remember every frame drawn during a run (screenshot mode's report).
    pub fn new(keep_running: bool) -> Self {
        FrameStats {
            recent: VecDeque::with_capacity(WINDOW),
            started: Instant::now(),
            first_frame: None,
            running_ms: Vec::new(),
            keep_running,
        }
    }

    pub fn record(&mut self, ms: f64, running: bool) {
        self.first_frame.get_or_insert_with(|| self.started.elapsed());
        if running && self.keep_running {
            self.running_ms.push(ms);
        }
        if self.recent.len() >= WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(ms);
    }

    /// Median of the last `WINDOW` frames, in ms.
    pub fn median_ms(&self) -> Option<f64> {
        if self.recent.is_empty() {
            return None;
        }
        let mut v: Vec<f64> = self.recent.iter().copied().collect();
        Some(gpulab_core::stats::median(&mut v))
    }

    /// One line for screenshot mode: time to the first frame and the UI's cost during a run.
    pub fn summary(&self) -> Option<String> {
        let first = self.first_frame?;
        let mut v = self.running_ms.clone();
        let median = if v.is_empty() { "—".to_string() } else { format!("{:.2} ms", gpulab_core::stats::median(&mut v)) };
        Some(format!(
            "first frame {:.0} ms after start; UI work per frame while the exercise ran: median {median} over {} frames (measured)",
            first.as_secs_f64() * 1e3,
            v.len()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_covers_the_recent_window_only() {
        let mut s = FrameStats::new(true);
        assert_eq!(s.median_ms(), None);
        for _ in 0..WINDOW {
            s.record(100.0, false);
        }
        for _ in 0..WINDOW {
            s.record(2.0, true);
        }
        assert_eq!(s.median_ms(), Some(2.0));
        let line = s.summary().expect("a first frame");
        assert!(line.contains(&format!("over {WINDOW} frames")), "{line}");
    }
}
