use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::amp_step::{Amp, AmpReport};
use super::f32_step::F32Phases;
use super::feed::{Feed, Inline};
use super::schedule::Schedule;
use super::sink::memory_held;
use super::step::{Micro, Phases, Step};
use super::strategy::{SingleDevice, StepAt, Strategy};
use super::{LoaderPosition, NoHooks, StepDone, TrainConfig, TrainEvent, TrainHooks, TrainSink};
use crate::data::Dataset;
use crate::nn::{Mlp, MlpConfig, Totals};
use gpulab_core::error::{Error, Result};
use gpulab_core::spans::stage;
pub use gpulab_core::stats::median;
use gpulab_core::tensor::{Backend, BackendInfo, MemoryReport};

/// One epoch's figures. Losses and accuracies are measured on this run's data; times are wall
/// clock on this machine; `gpu_busy_s` is derived from GPU timestamp queries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EpochSummary {
    pub epoch: usize,
    pub train_loss: f64,
    pub train_accuracy: f64,
    pub val_loss: f64,
    pub val_accuracy: f64,
    pub train_wall_s: f64,
    pub samples_per_s: f64,
    pub gpu_busy_s: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainReport {
    pub backend: BackendInfo,
    pub dataset: String,
    pub dataset_source: String,
    pub model: String,
    pub parameters: usize,
    pub config: TrainConfig,
    pub epochs: Vec<EpochSummary>,
    pub steps: u64,
    /// Wall time of the training steps (validation excluded), seconds. Measured.
    pub train_wall_s: f64,
    /// Training samples per second over the whole run. Measured.
    pub samples_per_s: f64,
    /// Median step time over the read-back windows, ms. Measured.
    pub median_step_ms: f64,
    /// GPU busy time over the training steps. Derived from GPU timestamps; None where the
    /// backend has none.
    pub gpu_busy_s: Option<f64>,
    /// gpu_busy_s / train_wall_s. Derived.
    pub gpu_busy_fraction: Option<f64>,
    pub final_val_accuracy: f64,
    pub memory: MemoryReport,
    pub stopped_early: bool,
    /// Loss scale, skipped steps and gradient underflow of a mixed-precision run.
    #[serde(default)]
    pub amp: Option<AmpReport>,
    /// Device work over the training steps (validation excluded): dispatches, submissions,
    /// waits, objects created, bytes moved. Measured (counted); None on the CPU.
    #[serde(default)]
    pub device_counts: Option<RunCounts>,
}

/// A run's device work with what to divide it by: per step and per log window. The first log
/// window is kept apart too: it pays the one-time costs (the window's staging buffer, the
/// first use of a workspace), so `steady` — everything after it — is what each step costs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunCounts {
    pub steps: u64,
    pub windows: u64,
    pub total: gpulab_core::tensor::DeviceCounts,
    /// Steps and counts up to the end of the first log window (included in the totals).
    pub first_steps: u64,
    pub first: gpulab_core::tensor::DeviceCounts,
}

impl RunCounts {
    /// After the first log window: (steps, windows, counts).
    pub fn steady(&self) -> (u64, u64, gpulab_core::tensor::DeviceCounts) {
        (self.steps - self.first_steps, self.windows.saturating_sub(1), self.total.since(&self.first))
    }
}

/// Trains the model `cfg.model` names (an MLP or the small CNN) on `data` and evaluates it after every epoch.
pub fn train<B: Backend>(b: &mut B, data: &Dataset, cfg: &TrainConfig, sink: &mut dyn TrainSink) -> Result<TrainReport> {
    train_with(b, data, cfg, sink, &mut NoHooks, &mut Inline)
}

/// `train`, with batches from `feed` and each step's stages reported to it.
pub fn train_fed<B: Backend>(
    b: &mut B,
    data: &Dataset,
    cfg: &TrainConfig,
    sink: &mut dyn TrainSink,
    feed: &mut dyn Feed<B>,
) -> Result<TrainReport> {
    train_with(b, data, cfg, sink, &mut NoHooks, feed)
}

/// `train`, starting where `hooks` restore to and telling them after every step (checkpoints),
/// with batches from `feed` and each step's stages reported to it (input pipeline, profiler).
pub fn train_with<B: Backend>(
    b: &mut B,
    data: &Dataset,
    cfg: &TrainConfig,
    sink: &mut dyn TrainSink,
    hooks: &mut dyn TrainHooks<B>,
    feed: &mut dyn Feed<B>,
) -> Result<TrainReport> {
    train_strategy(b, data, cfg, sink, hooks, feed, &mut SingleDevice)
}

/// The training loop, for any strategy (one device, a data-parallel replica): `train_with`, with
/// `strategy` running each step. A replica's `cfg.batch` is the global batch.
pub fn train_strategy<B: Backend, S: Strategy<B>>(
    b: &mut B,
    data: &Dataset,
    cfg: &TrainConfig,
    sink: &mut dyn TrainSink,
    hooks: &mut dyn TrainHooks<B>,
    feed: &mut dyn Feed<B>,
    strategy: &mut S,
) -> Result<TrainReport> {
    cfg.validate()?;
    if data.train_len() == 0 || data.val_len() == 0 {
        return Err(Error::InvalidConfig(format!("data set {} has an empty train or validation split", data.name)));
    }
    let model_cfg = cfg.model.config(data.shape, data.features, &cfg.hidden, data.classes)?;
    super::config::check_model_fits(&model_cfg, cfg.micro_batch().min(data.train_len()), cfg)?;
    let mut model = if strategy.model_holds_optimizer_state() {
        Mlp::new(b, model_cfg.clone(), cfg.optimizer(), cfg.seed)?
    } else {
        Mlp::without_optimizer_state(b, model_cfg.clone(), cfg.optimizer(), cfg.seed)?
    };
    let rank = strategy.rank();
    let n = data.train_len();
    let schedule = Schedule { samples: n, batch: cfg.batch.min(n), seed: cfg.seed, epochs: cfg.epochs, drop_last: rank.is_some() };
    let replicas = rank.map_or(1, |r| r.replicas);
    if !schedule.batch.is_multiple_of(replicas) {
        return Err(Error::InvalidConfig(format!("batch {} does not divide by replicas {replicas}", schedule.batch)));
    }
    let steps_per_epoch = schedule.steps_per_epoch();
    let start = hooks.restore(b, &mut model)?.unwrap_or_default();
    if start.epoch > cfg.epochs || start.batch >= steps_per_epoch as usize {
        return Err(Error::InvalidConfig(format!(
            "cannot resume at epoch {} batch {}: the run has {} epochs of {steps_per_epoch} batches",
            start.epoch, start.batch, cfg.epochs
        )));
    }
    let rows = schedule.batch / replicas;
    if replicas > 1 && !rows.is_multiple_of(cfg.accumulate) {
        return Err(Error::InvalidConfig(format!(
            "each replica's {rows} rows do not split into {} equal micro-batches; choose a batch that is a multiple of {}",
            cfg.accumulate,
            replicas * cfg.accumulate
        )));
    }
    // The workspaces hold one micro-batch (the whole batch when not accumulating; `validate`
    // made the batch a multiple of `accumulate`, and a data set smaller than the batch is
    // one step of fewer, or smaller, micro-batches).
    let micro = if replicas > 1 { rows / cfg.accumulate } else { cfg.micro_batch().min(rows) };
    sink.event(TrainEvent::Started { total_steps: schedule.total_steps(), steps_per_epoch });
    let run = Run { data, cfg, sink, hooks, feed, model_cfg, start, schedule, micro };
    match Amp::new(b, &model, cfg.amp)? {
        None => {
            let step = Step::with_recompute(b, &model, F32Phases, micro, cfg.recompute)?;
            run_steps(b, run, model, step, strategy)
        }
        Some(amp) => {
            let step = Step::with_recompute(b, &model, amp, micro, cfg.recompute)?;
            run_steps(b, run, model, step, strategy)
        }
    }
}

/// What `run_steps` needs from `train_strategy`.
struct Run<'a, B: Backend> {
    data: &'a Dataset,
    cfg: &'a TrainConfig,
    sink: &'a mut dyn TrainSink,
    hooks: &'a mut dyn TrainHooks<B>,
    feed: &'a mut dyn Feed<B>,
    model_cfg: MlpConfig,
    start: LoaderPosition,
    schedule: Schedule,
    /// Rows of a micro-batch: a step's batch (per replica) when not accumulating.
    micro: usize,
}

/// The loop, once per precision and strategy (static dispatch through `P` and `S`).
fn run_steps<B: Backend, P: Phases<B>, S: Strategy<B>>(
    b: &mut B,
    run: Run<'_, B>,
    mut model: Mlp<B>,
    mut steps: Step<B, P>,
    strategy: &mut S,
) -> Result<TrainReport> {
    let Run { data, cfg, sink, hooks, feed, model_cfg, start, schedule, micro } = run;
    if let Some(state) = hooks.restored_scaler() {
        steps.restore_scaler(b, state)?;
    }
    let accumulating = cfg.accumulate > 1;
    if accumulating {
        steps.accumulate(b, &mut model)?;
    }
    let rank = strategy.rank();
    let steps_per_epoch = schedule.steps_per_epoch();
    let mut xb = Vec::new();
    let mut yb = Vec::new();
    let mut epochs = Vec::new();
    let mut step: u64 = start.step;
    let mut total_seen = 0usize;
    let mut window_ms = Vec::new();
    let (mut total_wall, mut total_busy, mut any_busy) = (0.0f64, 0.0f64, false);
    let mut stopped_early = false;
    // An epoch's short last batch is cut into micro-batches too: its own last one is short.
    steps.warm_up(b, &mut model, schedule.tail_rows().map(|r| r % micro))?;
    strategy.prepare(b, &model)?;
    b.reset_busy_clock()?; // start the GPU clock from zero
    // Device work of the training steps: counted per epoch up to its validation.
    let mut counted =
        b.counts().map(|_| RunCounts { steps: 0, windows: 0, total: Default::default(), first_steps: 0, first: Default::default() });
    let mut counts_from = b.counts();

    'epochs: for epoch in start.epoch..cfg.epochs {
        let order = schedule.order(epoch);
        // Rows seen count every replica's.
        let (mut ep_loss, mut ep_correct, mut ep_seen, mut ep_wall) = (0.0f64, 0u64, 0usize, 0.0f64);
        // GPU busy seconds, taken per log window (the live chart) and summed for the epoch.
        let mut ep_busy: Option<f64> = None;
        let (mut win_steps, mut win_seen) = (0u64, 0usize);
        let mut win_start = Instant::now();
        let skip = if epoch == start.epoch { start.batch } else { 0 };
        for (i, global) in schedule.batches(&order).enumerate().skip(skip) {
            let stop_requested = sink.stop().is_set();
            if stop_requested && rank.is_none() {
                stopped_early = true;
                break 'epochs;
            }
            let idx = rank.map_or(global, |r| r.shard(global));
            let t0 = Instant::now();
            feed.batch(data, epoch, idx, &mut xb, &mut yb)?;
            let t1 = Instant::now();
            feed.span(stage::DATA_WAIT, t0, t1);
            let t2 = if accumulating {
                accumulate_micro_batches(b, &mut model, &mut steps, &mut *feed, data.features, micro, (&xb, &yb), t1)?
            } else {
                let (x, y) = steps.inputs(b, &model, idx.len())?;
                feed.upload(b, x, y, &xb, &yb)?;
                let t2 = Instant::now();
                feed.span(stage::UPLOAD, t1, t2);
                t2
            };
            let at = StepAt { number: step + 1, started: t0, data_ready: t2, stop_requested };
            let stop_agreed = strategy.step(b, &mut model, &mut steps, at, &mut *sink)?;
            let t3 = Instant::now();
            feed.span(stage::RECORD, t2, t3);
            b.flush()?;
            let t4 = Instant::now();
            feed.span(stage::SUBMIT, t3, t4);
            if feed.sync_each_step() {
                b.sync()?;
                feed.span(stage::WAIT, t4, Instant::now());
            }
            step += 1;
            win_steps += 1;
            if let Some(c) = counted.as_mut() {
                c.steps += 1;
            }
            win_seen += global.len();
            let last = i as u64 + 1 == steps_per_epoch;
            // Every replica takes the same branch (the step count and the stop agreement are
            // shared), so `reduce_totals` is called the same number of times on each.
            if step.is_multiple_of(cfg.log_every as u64) || last || stop_agreed {
                // Reading back waits for the device; the window's wall time includes it.
                let t5 = Instant::now();
                let Totals { loss, correct, .. } = strategy.reduce_totals(steps.take_totals(b)?)?;
                feed.span(stage::READBACK, t5, Instant::now());
                let secs = win_start.elapsed().as_secs_f64();
                let win_busy = b.take_busy_seconds()?;
                if let Some(s) = win_busy {
                    *ep_busy.get_or_insert(0.0) += s;
                }
                window_ms.push(secs * 1e3 / win_steps as f64);
                ep_wall += secs;
                let mean = loss / win_seen as f64;
                if !mean.is_finite() {
                    return Err(Error::Diverged { step, loss: mean as f32 });
                }
                ep_loss += loss;
                ep_correct += correct;
                ep_seen += win_seen;
                sink.event(TrainEvent::Progress {
                    replica: rank.map(|r| r.rank),
                    step,
                    epoch,
                    loss: mean,
                    accuracy: correct as f64 / win_seen as f64,
                    samples_per_s: win_seen as f64 / secs.max(1e-12),
                    window_s: secs,
                    gpu_busy_s: win_busy,
                    memory: memory_held(&b.memory()),
                });
                strategy.window(step, &mut *sink);
                if let Some(c) = counted.as_mut() {
                    c.windows += 1;
                    if c.windows == 1
                        && let (Some(now), Some(from)) = (b.counts(), counts_from)
                    {
                        (c.first_steps, c.first) = (c.steps, c.total.plus(&now.since(&from)));
                    }
                }
                (win_steps, win_seen) = (0, 0);
                win_start = Instant::now();
            }
            let next =
                if last { LoaderPosition { step, epoch: epoch + 1, batch: 0 } } else { LoaderPosition { step, epoch, batch: i + 1 } };
            let mut done = StepDone { next, epoch_end: last, run_end: last && epoch + 1 == cfg.epochs, scaler: None };
            // Only a step the hooks will save reads the device state (a sync).
            if hooks.wants_state(&done) {
                done.scaler = steps.sync_state(b, &mut model)?;
            }
            hooks.after_step(b, &model, done)?;
            if stop_agreed {
                stopped_early = true;
                break 'epochs;
            }
        }
        // Work after the epoch's last window that a read collected (a hook's checkpoint) still
        // counts; nothing waits for the rest (the window's own wait was the epoch's last).
        let busy = match (ep_busy, b.take_collected_busy_seconds()?) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        if let (Some(c), Some(now), Some(from)) = (counted.as_mut(), b.counts(), counts_from) {
            c.total = c.total.plus(&now.since(&from));
        }
        // Validation runs in micro-batches too, so it holds no more activations than training.
        let (val_loss, val_accuracy) = steps.evaluate(b, &model, data, micro)?;
        b.reset_busy_clock()?; // validation is not part of the training figures
        counts_from = b.counts();
        if let Some(s) = busy {
            total_busy += s;
            any_busy = true;
        }
        total_wall += ep_wall;
        total_seen += ep_seen;
        let summary = EpochSummary {
            epoch,
            train_loss: ep_loss / ep_seen.max(1) as f64,
            train_accuracy: ep_correct as f64 / ep_seen.max(1) as f64,
            val_loss,
            val_accuracy,
            train_wall_s: ep_wall,
            samples_per_s: ep_seen as f64 / ep_wall.max(1e-12),
            gpu_busy_s: busy,
        };
        sink.event(TrainEvent::Epoch(summary.clone()));
        epochs.push(summary);
    }
    if stopped_early && let (Some(c), Some(now), Some(from)) = (counted.as_mut(), b.counts(), counts_from) {
        c.total = c.total.plus(&now.since(&from)); // the stopped epoch's steps, never validated
    }
    strategy.finish(b, &model, &mut *sink)?;
    if let Some(counts) = counted {
        sink.event(TrainEvent::Counts { replica: rank.map(|r| r.rank), counts });
    }

    let seen = total_seen;
    let gpu_busy_s = any_busy.then_some(total_busy);
    Ok(TrainReport {
        backend: b.info(),
        dataset: data.name.clone(),
        dataset_source: data.source.clone(),
        model: model_cfg.describe(),
        parameters: model_cfg.parameter_count(),
        config: cfg.clone(),
        steps: step,
        train_wall_s: total_wall,
        samples_per_s: seen as f64 / total_wall.max(1e-12),
        median_step_ms: median(&mut window_ms),
        gpu_busy_fraction: gpu_busy_s.map(|s| s / total_wall.max(1e-12)),
        gpu_busy_s,
        final_val_accuracy: epochs.last().map(|e| e.val_accuracy).unwrap_or(0.0),
        epochs,
        memory: b.memory(),
        stopped_early,
        amp: steps.into_amp_report(),
        device_counts: counted,
    })
}

/// Gradient accumulation's part of a step before the strategy's: each micro-batch but the
/// last is uploaded and run forward and backward (its gradients join the running sum); the
/// last is uploaded and left for `Strategy::step`, whose backward completes the sum before the
/// update. Returns when the last micro-batch's inputs were on the device.
#[allow(clippy::too_many_arguments)]
fn accumulate_micro_batches<B: Backend, P: Phases<B>>(
    b: &mut B,
    model: &mut Mlp<B>,
    steps: &mut Step<B, P>,
    feed: &mut dyn Feed<B>,
    features: usize,
    micro: usize,
    (xb, yb): (&[f32], &[u32]),
    mut t: Instant,
) -> Result<Instant> {
    let rows = yb.len();
    let count = rows.div_ceil(micro);
    for index in 0..count {
        let (lo, hi) = (index * micro, ((index + 1) * micro).min(rows));
        steps.micro(Micro { index, count, rows })?;
        let (x, y) = steps.inputs(b, model, hi - lo)?;
        feed.upload(b, x, y, &xb[lo * features..hi * features], &yb[lo..hi])?;
        let uploaded = Instant::now();
        feed.span(stage::UPLOAD, t, uploaded);
        t = uploaded;
        if index + 1 < count {
            steps.forward(b, model)?;
            steps.backward(b, model)?;
            t = Instant::now();
            feed.span(stage::RECORD, uploaded, t);
        }
    }
    Ok(t)
}
