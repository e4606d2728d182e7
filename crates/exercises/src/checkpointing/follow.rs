//! Follows one training child process: its JSON lines (`TrainEvent`s) go to the live charts
//! through `TrainBridge` and into a record of what happened, and it is killed (SIGKILL) once it
//! reports the chosen step.

use std::time::{Duration, Instant};

use crate::sink::TrainBridge;
use crate::{Event, Sink};
use gpulab_core::error::{Error, Result};
use gpulab_systems::checkpoint::child_process::{ChildProcess, Line};
use gpulab_systems::train::{TrainEvent, TrainSink};

/// A checkpoint write the child reported. Measured in the child.
#[derive(Clone, Debug)]
pub struct SaveRecord {
    pub step: u64,
    pub bytes: u64,
    pub write_s: f64,
}

/// Everything one child reported.
#[derive(Clone, Debug, Default)]
pub struct ChildLog {
    pub backend: Option<gpulab_core::tensor::BackendInfo>,
    pub total_steps: u64,
    pub losses: Vec<(u64, f64)>,
    pub saves: Vec<SaveRecord>,
    /// (path, kind, reason) of checkpoints refused on resume.
    pub skipped: Vec<(String, String, String)>,
    /// (path, step) of the checkpoint it resumed from.
    pub resumed_from: Option<(String, u64)>,
    /// Steps done and training wall time, when it finished.
    pub finished: Option<(u64, f64)>,
    /// The step after which the parent sent SIGKILL.
    pub killed_after: Option<u64>,
    /// The model it trained and its parameter count, as it reported when it finished.
    pub model: Option<(String, u64)>,
    pub unexpected_lines: usize,
    pub stopped: bool,
}

impl ChildLog {
    pub fn last_step(&self) -> u64 {
        self.losses.last().map_or(0, |l| l.0)
    }
}

/// No output for this long means the child hangs.
const SILENCE_LIMIT: Duration = Duration::from_secs(300);

/// Reads `child` to its end. With `kill_at`, sends SIGKILL right after the child reports
/// that step (it may finish a few more before the signal lands; their lines are still read).
pub fn follow(
    mut child: ChildProcess,
    sink: &mut dyn Sink,
    series: &str,
    kill_at: Option<u64>,
    progress_base: u64,
    progress_total: u64,
) -> Result<ChildLog> {
    let mut log = ChildLog::default();
    let mut failed: Option<String> = None;
    let mut last_line = Instant::now();
    loop {
        if sink.stop_requested() {
            child.kill()?;
            log.stopped = true;
            return Ok(log);
        }
        let Some(line) = child.next(Duration::from_millis(100)) else {
            if child.output_ended() {
                break;
            }
            if last_line.elapsed() > SILENCE_LIMIT {
                child.kill()?;
                return Err(Error::TrainingProcess(format!(
                    "no output for {} s; killed it. Its last messages: {}",
                    SILENCE_LIMIT.as_secs(),
                    child.stderr_tail()
                )));
            }
            continue;
        };
        last_line = Instant::now();
        let ev = match line {
            Line::Event(ev) => ev,
            Line::Unexpected(text) => {
                log.unexpected_lines += 1;
                sink.emit(Event::Log(format!("{series}: ignored unexpected output {text:?}")));
                continue;
            }
        };
        match &ev {
            TrainEvent::Backend { info } => log.backend = Some(info.clone()),
            TrainEvent::Started { total_steps, .. } => log.total_steps = *total_steps,
            TrainEvent::Skipped { path, kind, reason } => log.skipped.push((path.clone(), kind.clone(), reason.clone())),
            TrainEvent::Resumed { path, step, .. } => log.resumed_from = Some((path.clone(), *step)),
            TrainEvent::Progress { step, loss, .. } => log.losses.push((*step, *loss)),
            TrainEvent::Saved { step, bytes, write_s, .. } => log.saves.push(SaveRecord { step: *step, bytes: *bytes, write_s: *write_s }),
            TrainEvent::Finished { steps, train_wall_s, model, parameters, .. } => {
                log.finished = Some((*steps, *train_wall_s));
                log.model = (!model.is_empty()).then(|| (model.clone(), *parameters));
            }
            TrainEvent::Failed { message } => failed = Some(message.clone()),
            _ => {}
        }
        let reported = match &ev {
            TrainEvent::Progress { step, .. } => Some(*step),
            _ => None,
        };
        // The lab charts loss and the device per window, not validation accuracy.
        if !matches!(ev, TrainEvent::Epoch(_)) {
            let mut bridge = TrainBridge { progress: Some((progress_base, progress_total)), ..TrainBridge::new(&mut *sink, series) };
            bridge.event(ev);
        }
        if let Some(step) = reported
            && kill_at.is_some_and(|k| step >= k)
            && log.killed_after.is_none()
        {
            child.kill()?;
            log.killed_after = Some(step);
            // The child keeps training until the signal lands, so its last step can be later.
            sink.emit(Event::Log(format!("{series}: sent SIGKILL on seeing step {step} (the child runs on until it lands)")));
        }
    }
    let status = child.wait()?;
    if log.killed_after.is_none() && (!status.success() || log.finished.is_none()) {
        let why = failed.unwrap_or_else(|| format!("it exited with {status} before finishing. Its last messages: {}", child.stderr_tail()));
        return Err(Error::TrainingProcess(why));
    }
    Ok(log)
}
