use super::EpochSummary;
use gpulab_core::tensor::MemoryReport;

/// What the training loop reports as it goes.
#[derive(Clone, Debug)]
pub enum TrainEvent {
    /// Before the first step: total steps planned.
    Started {
        total_steps: u64,
        steps_per_epoch: u64,
    },
    /// Loss and accuracy over the steps since the last read-back (read every `log_every` steps),
    /// the window's wall seconds, its GPU busy seconds (timestamps; None without them) and the
    /// memory ledger at its end.
    Progress {
        step: u64,
        epoch: usize,
        loss: f64,
        accuracy: f64,
        samples_per_s: f64,
        window_s: f64,
        gpu_busy_s: Option<f64>,
        memory: MemoryReport,
    },
    Epoch(EpochSummary),
}

pub trait TrainSink {
    fn event(&mut self, ev: TrainEvent);
    /// Checked between steps; returning true ends the run early (its report says so).
    fn stop_requested(&self) -> bool {
        false
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
