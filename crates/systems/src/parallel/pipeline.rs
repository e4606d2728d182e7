//! Model parallelism and pipeline parallelism (GPipe) on CPU stages: the MLP's layers split
//! into consecutive ranges, one stage per range, each on its own thread and one-thread CPU
//! backend. Activations go forward and their gradients backward between neighbouring stages
//! over channels, staged through host memory. A global batch is cut into M micro-batches: all M
//! forwards, then all M backwards (gradients accumulated), then one optimizer step; M = 1 is
//! plain model parallelism. Every stage's busy spans are real clock readings; the bubble is
//! the idle share of stages × wall time, compared with GPipe's (N−1)/(M+N−1).
//!
//! The math is the model's own: `Mlp::forward` and `Mlp::backward_layers` on each stage's
//! layers, started from the whole model's initial weights (`Mlp::new_from_layer`), in f32.
//!
//! Stages are not a strategy of the training loop (`train::Strategy`): the loop runs whole
//! steps on one thread, while a pipeline step is split over the stages' threads, micro-batch by
//! micro-batch. They walk the loop's batches (`train::Schedule`) in the same order.

use std::ops::Range;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Instant;

use super::ReplicaKind;
use crate::data::{Dataset, batcher};
use crate::nn::{GradWrite, Mlp, MlpConfig, ModelKind, Precision, Workspace, take_totals};
use crate::train::{Schedule, TrainConfig};
use gpulab_core::device::CpuBackend;
use gpulab_core::error::{Error, Result};
use gpulab_core::spans::{Span, Timeline};
use gpulab_core::tensor::{Backend, MemCategory};

/// The most micro-batches a global batch is cut into.
pub const MAX_MICRO_BATCHES: usize = 1024;

#[derive(Clone, Debug, PartialEq)]
pub struct PipeConfig {
    pub stages: usize,
    pub micro_batches: usize,
    /// Stop after this many optimizer steps (None: every epoch of the `TrainConfig`).
    pub max_steps: Option<u64>,
    /// Steps drawn in the timeline (the run's first ones).
    pub timeline_steps: usize,
}

impl PipeConfig {
    /// Refuses what cannot run, naming the setting and the limit.
    pub fn validate(&self, layers: usize, global_batch: usize) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        let (n, m) = (self.stages, self.micro_batches);
        if n == 0 {
            return bad("pipeline_stages must be at least 1".into());
        }
        if n > layers {
            return bad(format!(
                "pipeline_stages {n} is more than the model's {layers} layers: every stage needs at least one layer; use at most {layers} stages or more hidden layers"
            ));
        }
        if m == 0 {
            return bad("micro_batches must be at least 1 (1 = plain model parallelism)".into());
        }
        if m > MAX_MICRO_BATCHES {
            return bad(format!("micro_batches {m} is more than the limit of {MAX_MICRO_BATCHES}"));
        }
        if !global_batch.is_multiple_of(m) {
            return bad(format!(
                "batch {global_batch} does not divide by micro_batches {m}: every micro-batch needs the same rows; use a multiple of {m}, e.g. {}",
                (global_batch / m).max(1) * m
            ));
        }
        let cores = ReplicaKind::cores();
        if n > cores {
            return bad(format!("pipeline_stages {n} is more than the {cores} CPU cores of this machine: every stage is one thread"));
        }
        Ok(())
    }
}

/// Consecutive layer ranges, one per stage, that make the costliest stage (by in × out
/// multiply-adds per row) as cheap as possible.
pub fn split_layers(widths: &[usize], stages: usize) -> Vec<Range<usize>> {
    let cost: Vec<f64> = widths.windows(2).map(|w| (w[0] * w[1]) as f64).collect();
    let l = cost.len();
    let stages = stages.clamp(1, l.max(1));
    let sum = |a: usize, b: usize| cost[a..b].iter().sum::<f64>();
    // best[s][i]: the smallest largest-stage cost of layers 0..i in s stages, and the cut.
    let mut best = vec![vec![(f64::INFINITY, 0usize); l + 1]; stages + 1];
    best[0][0] = (0.0, 0);
    for s in 1..=stages {
        for i in s..=l {
            for j in (s - 1)..i {
                let c = best[s - 1][j].0.max(sum(j, i));
                if c < best[s][i].0 {
                    best[s][i] = (c, j);
                }
            }
        }
    }
    let mut ranges = Vec::new();
    let mut end = l;
    for s in (1..=stages).rev() {
        let start = best[s][end].1;
        ranges.push(start..end);
        end = start;
    }
    ranges.reverse();
    ranges
}

/// The theoretical GPipe bubble with equal stages: (N−1)/(M+N−1).
pub fn theoretical_bubble(stages: usize, micro_batches: usize) -> f64 {
    let (n, m) = (stages as f64, micro_batches as f64);
    (n - 1.0) / (m + n - 1.0).max(1.0)
}

/// One pipeline run, measured.
#[derive(Clone, Debug)]
pub struct PipeReport {
    pub stages: usize,
    pub micro_batches: usize,
    pub global_batch: usize,
    pub steps: u64,
    /// First stage start to last stage end, after the untimed warm-up steps. Measured.
    pub train_wall_s: f64,
    /// Derived: the timed steps' samples / train_wall_s.
    pub samples_per_s: f64,
    /// Each stage's layers and its share of the multiply-adds (derived from the widths).
    pub stage_layers: Vec<Range<usize>>,
    pub stage_cost_share: Vec<f64>,
    /// Seconds each stage computed (forward, backward, transfers, update). Measured.
    pub busy_s: Vec<f64>,
    /// Idle / (stages × wall time). Derived from the clock readings.
    pub bubble: f64,
    /// (N−1)/(M+N−1).
    pub theoretical_bubble: f64,
    /// Mean training loss of each step (the last stage's).
    pub losses: Vec<f64>,
    /// The final parameters, weights then biases per layer, in the whole model's order.
    pub params: Vec<Vec<f32>>,
    pub timeline: Timeline,
}

/// A stage's neighbours: activations in from the stage before, out to the stage after; their
/// gradients the other way.
#[derive(Default)]
struct Links {
    acts_in: Option<Receiver<Vec<f32>>>,
    acts_out: Option<Sender<Vec<f32>>>,
    grads_in: Option<Receiver<Vec<f32>>>,
    grads_out: Option<Sender<Vec<f32>>>,
}

struct StagePlan<'a> {
    index: usize,
    layers: Range<usize>,
    widths: &'a [usize],
    data: &'a Dataset,
    cfg: &'a TrainConfig,
    pc: &'a PipeConfig,
    steps: u64,
    origin: Instant,
    links: Links,
}

struct StageOut {
    spans: Vec<Span>,
    busy_s: f64,
    first_start: f64,
    last_end: f64,
    losses: Vec<f64>,
    params: Vec<Vec<f32>>,
}

fn lost(stage: usize) -> Error {
    Error::PeerLost(format!("pipeline stage {stage} lost its neighbour (it stopped with an error)"))
}

fn recv(rx: &Option<Receiver<Vec<f32>>>, stage: usize) -> Result<Vec<f32>> {
    rx.as_ref().ok_or_else(|| Error::Internal(format!("stage {stage} has no link to receive on")))?.recv().map_err(|_| lost(stage))
}

fn send(tx: &Option<Sender<Vec<f32>>>, v: Vec<f32>, stage: usize) -> Result<()> {
    tx.as_ref().ok_or_else(|| Error::Internal(format!("stage {stage} has no link to send on")))?.send(v).map_err(|_| lost(stage))
}

fn run_stage<B: Backend>(b: &mut B, plan: StagePlan<'_>) -> Result<StageOut> {
    let StagePlan { index, layers, widths, data, cfg, pc, steps, origin, links } = plan;
    let (first, last) = (layers.start == 0, layers.end + 1 == widths.len());
    let arch = MlpConfig {
        input: widths[layers.start],
        hidden: widths[layers.start + 1..layers.end].to_vec(),
        classes: widths[layers.end],
        conv: None,
    };
    let mut model = Mlp::new_from_layer(b, arch.clone(), cfg.optimizer(), cfg.seed, layers.start)?;
    let (m, rows) = (pc.micro_batches, cfg.batch / pc.micro_batches);
    let mut ws: Vec<Workspace<B>> = (0..m).map(|_| Workspace::new(b, &arch, rows, true)).collect::<Result<_>>()?;
    let ones = b.upload_f32(&vec![1.0; rows], [1, rows], MemCategory::Activations)?;
    let mut input_grad =
        if first { None } else { Some(b.zeros([rows, arch.input], gpulab_core::tensor::DType::F32, MemCategory::Activations)?) };
    let lane = match layers.len() {
        1 => format!("stage {index} (layer {})", layers.start),
        _ => format!("stage {index} (layers {}–{})", layers.start, layers.end - 1),
    };
    let now = || origin.elapsed().as_secs_f64();
    let (mut spans, mut busy_s, mut losses) = (Vec::new(), 0.0, Vec::new());
    // The first steps pay one-off costs (first touches of every buffer, the GEMM crate's
    // set-up) that would make whichever run goes first look slow: they train but are not timed.
    let warm = warm_up_steps(steps);
    let mut span = |name: &str, start: f64, end: f64, step: u64| {
        if step < warm {
            return;
        }
        busy_s += end - start;
        if step < warm + pc.timeline_steps as u64 {
            spans.push(Span::new(&lane, name, start, end));
        }
    };
    let (mut xb, mut yb) = (Vec::new(), Vec::new());
    let schedule = schedule(data, cfg);
    let (mut first_start, mut last_end) = (now(), 0.0);
    let mut step = 0u64;
    'run: for epoch in 0..cfg.epochs {
        let order = schedule.order(epoch);
        for global in schedule.batches(&order) {
            if step >= steps {
                break 'run;
            }
            if step == warm {
                first_start = now();
            }
            for (k, w) in ws.iter_mut().enumerate() {
                let idx = &global[k * rows..(k + 1) * rows];
                let input = if first { None } else { Some(recv(&links.acts_in, index)?) };
                let t = now();
                if first || last {
                    batcher::gather(&data.train_x, &data.train_y, data.features, idx, &mut xb, &mut yb);
                }
                match input {
                    Some(a) => b.write_f32(&mut w.x, &a)?,
                    None => b.write_f32(&mut w.x, &xb)?,
                }
                if last {
                    b.write_u32(&mut w.y, &yb)?;
                }
                model.forward(b, w)?;
                if !last {
                    // The ReLU between this stage's last layer and the next stage's first.
                    let out = w.acts.last_mut().ok_or_else(|| Error::Internal("a stage without layers".into()))?;
                    b.relu(out)?;
                    let v = b.read_f32(out)?;
                    send(&links.acts_out, v, index)?;
                }
                b.sync()?;
                span("forward", t, now(), step);
            }
            for k in (0..m).rev() {
                let w = &mut ws[k];
                let top = w.acts.len() - 1;
                let grad = if last { None } else { Some(recv(&links.grads_in, index)?) };
                let t = now();
                match grad {
                    // The loss of the whole global batch: each micro-batch's rows scaled by 1/B.
                    None => w.acc.record(b, &w.acts[top], &w.y, Some(&mut w.grads[top]), 1.0 / cfg.batch as f32)?,
                    Some(g) => {
                        b.write_f32(&mut w.grads[top], &g)?;
                        b.relu_backward(&mut w.grads[top], &w.acts[top])?;
                    }
                }
                let write = if k + 1 == m { GradWrite::Replace } else { GradWrite::Add { ones: &ones } };
                model.backward_layers(b, w, write, input_grad.as_mut(), |_, _, _| Ok(()))?;
                if let Some(g) = input_grad.as_ref() {
                    let v = b.read_f32(g)?;
                    send(&links.grads_out, v, index)?;
                }
                b.sync()?;
                span("backward", t, now(), step);
            }
            let t = now();
            model.update(b)?;
            b.flush()?;
            b.sync()?;
            last_end = now();
            span("update", t, last_end, step);
            if last {
                let mut accs: Vec<_> = ws.iter_mut().map(|w| &mut w.acc).collect();
                losses.push(take_totals(b, &mut accs)?.loss / cfg.batch as f64);
            }
            step += 1;
        }
    }
    Ok(StageOut { spans, busy_s, first_start, last_end, losses, params: model.read_parameters(b)? })
}

/// Whole global batches, every epoch in the loop's order.
fn schedule(data: &Dataset, cfg: &TrainConfig) -> Schedule {
    Schedule { samples: data.train_len(), batch: cfg.batch, seed: cfg.seed, epochs: cfg.epochs, drop_last: true }
}

/// Why the stages cannot train `cfg`'s model or precision, when they cannot.
pub fn unsupported(cfg: &TrainConfig) -> Option<String> {
    (cfg.model != ModelKind::Mlp || cfg.amp.precision != Precision::F32).then(|| {
        format!(
            "pipeline stages train the MLP in fp32 (each stage runs its dense layers' f32 forward and backward), not model={} precision={}; use model=mlp precision=fp32, or pipeline_stages=0",
            cfg.model.name(),
            cfg.amp.precision.name()
        )
    })
}

/// Trains `cfg`'s MLP (its `batch` is the global batch) pipelined as `pc` says, on CPU stages of
/// one thread each.
pub fn train_pipeline(data: &Dataset, cfg: &TrainConfig, pc: &PipeConfig) -> Result<PipeReport> {
    cfg.validate()?;
    if let Some(why) = unsupported(cfg) {
        return Err(Error::InvalidConfig(why));
    }
    let arch = MlpConfig { input: data.features, hidden: cfg.hidden.clone(), classes: data.classes, conv: None };
    arch.validate()?;
    // All stages together hold what one device would: refused before any stage allocates.
    crate::train::check_model_fits(&arch, cfg.batch.min(data.train_len()), cfg)?;
    let widths = arch.widths();
    pc.validate(widths.len() - 1, cfg.batch)?;
    if cfg.batch > data.train_len() {
        return Err(Error::InvalidConfig(format!(
            "the global batch {} is larger than the {} training samples; lower batch",
            cfg.batch,
            data.train_len()
        )));
    }
    let steps = schedule(data, cfg).total_steps().min(pc.max_steps.unwrap_or(u64::MAX));
    let ranges = split_layers(&widths, pc.stages);
    let mut links: Vec<Links> = (0..ranges.len()).map(|_| Links::default()).collect();
    for s in 1..ranges.len() {
        let (a_tx, a_rx) = channel();
        let (g_tx, g_rx) = channel();
        links[s - 1].acts_out = Some(a_tx);
        links[s].acts_in = Some(a_rx);
        links[s].grads_out = Some(g_tx);
        links[s - 1].grads_in = Some(g_rx);
    }
    let pools = (0..ranges.len())
        .map(|s| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .thread_name(move |_| format!("pipeline stage {s}"))
                .build()
                .map_err(|e| Error::InvalidConfig(format!("could not start pipeline stage {s}'s thread: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let origin = Instant::now();
    let results: Vec<Result<StageOut>> = std::thread::scope(|sc| {
        let handles: Vec<_> = ranges
            .iter()
            .cloned()
            .zip(links)
            .zip(pools)
            .enumerate()
            .map(|(index, ((layers, links), pool))| {
                let plan = StagePlan { index, layers, widths: &widths, data, cfg, pc, steps, origin, links };
                sc.spawn(move || pool.install(|| run_stage(&mut CpuBackend::new(), plan)))
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(s, h)| h.join().unwrap_or_else(|_| Err(Error::Internal(format!("pipeline stage {s}'s thread panicked")))))
            .collect()
    });
    let outs = super::run::first_cause(results)?;
    Ok(summarize(cfg, pc, &widths, ranges, outs, steps))
}

/// Steps trained before the clock starts: two, unless the run is too short to spare them.
fn warm_up_steps(steps: u64) -> u64 {
    if steps > 4 { 2 } else { 0 }
}

fn summarize(
    cfg: &TrainConfig,
    pc: &PipeConfig,
    widths: &[usize],
    ranges: Vec<Range<usize>>,
    outs: Vec<StageOut>,
    steps: u64,
) -> PipeReport {
    let start = outs.iter().map(|o| o.first_start).fold(f64::INFINITY, f64::min);
    let end = outs.iter().map(|o| o.last_end).fold(0.0, f64::max);
    let wall = (end - start).max(1e-12);
    let busy_s: Vec<f64> = outs.iter().map(|o| o.busy_s).collect();
    let idle: f64 = busy_s.iter().map(|b| (wall - b).max(0.0)).sum();
    let n = outs.len();
    let cost: Vec<f64> = widths.windows(2).map(|w| (w[0] * w[1]) as f64).collect();
    let total: f64 = cost.iter().sum::<f64>().max(1.0);
    let stage_cost_share = ranges.iter().map(|r| cost[r.clone()].iter().sum::<f64>() / total).collect();
    let title = format!(
        "pipeline: {n} stage{} × {} micro-batch{} of {} rows",
        if n == 1 { "" } else { "s" },
        pc.micro_batches,
        if pc.micro_batches == 1 { "" } else { "es" },
        cfg.batch / pc.micro_batches
    );
    let note = "CPU clock readings of each stage's thread, one shared origin; gaps are a stage waiting for its neighbour".to_string();
    let mut spans = Vec::new();
    let (mut losses, mut params) = (Vec::new(), Vec::new());
    for o in outs {
        spans.extend(o.spans);
        if !o.losses.is_empty() {
            losses = o.losses;
        }
        params.extend(o.params);
    }
    PipeReport {
        stages: n,
        micro_batches: pc.micro_batches,
        global_batch: cfg.batch,
        steps,
        train_wall_s: wall,
        samples_per_s: ((steps - warm_up_steps(steps)) as usize * cfg.batch) as f64 / wall,
        stage_layers: ranges,
        stage_cost_share,
        busy_s,
        bubble: idle / (n as f64 * wall),
        theoretical_bubble: theoretical_bubble(n, pc.micro_batches),
        losses,
        params,
        timeline: Timeline::new(&title, spans, note),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_split_into_consecutive_ranges_that_balance_the_multiply_adds() {
        assert_eq!(split_layers(&[784, 512, 256, 10], 2), vec![0..1, 1..3]);
        assert_eq!(split_layers(&[10, 10, 10, 10, 10], 2), vec![0..2, 2..4]);
        assert_eq!(split_layers(&[4, 4, 4], 1), vec![0..2]);
        assert_eq!(split_layers(&[4, 4, 4], 2), vec![0..1, 1..2]);
    }

    #[test]
    fn the_theoretical_bubble_is_gpipes() {
        assert_eq!(theoretical_bubble(1, 8), 0.0);
        assert_eq!(theoretical_bubble(2, 1), 0.5);
        assert!((theoretical_bubble(4, 4) - 3.0 / 7.0).abs() < 1e-12);
    }
}
