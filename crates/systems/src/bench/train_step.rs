use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::nn::{AmpConfig, ConvConfig, Mlp, MlpConfig, Optimizer, OptimizerKind};
use crate::train::{Amp, F32Phases, Phases, Step};
use gpulab_core::error::{Error, Result};
use gpulab_core::stats::{median, quantile};
use gpulab_core::tensor::Backend;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainBenchConfig {
    pub input: usize,
    pub hidden: Vec<usize>,
    pub classes: usize,
    pub batch: usize,
    /// Timed seconds (at least `min_steps` steps run).
    pub seconds: f64,
    pub min_steps: usize,
    pub optimizer: OptimizerKind,
    /// The CNN's convolutions in front of the dense layers (`--model cnn`); None: the MLP.
    /// `input` must then be the images' values (channels × height × width).
    #[serde(default)]
    pub conv: Option<ConvConfig>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainBenchRow {
    pub backend: String,
    pub software: bool,
    pub model: String,
    /// The training precision, as `AmpConfig::label` names it ("fp32", "fp16 + GradScaler", "bf16").
    pub precision: String,
    pub batch: usize,
    pub steps: usize,
    /// Measured: timed steps × batch / wall seconds.
    pub samples_per_s: f64,
    /// Measured: median over windows of 10 steps (the device is synchronised once per window).
    pub step_ms_median: f64,
    /// Measured: the 90th-percentile window (nearest rank), ms per step.
    #[serde(default)]
    pub step_ms_p90: f64,
    /// Measured: the slowest window, ms per step.
    #[serde(default)]
    pub step_ms_worst: f64,
    /// Measured: wall time / timed steps, ms — what an epoch costs a learner per step.
    #[serde(default)]
    pub step_ms_wall: f64,
    /// Measured (Linux; zeros elsewhere): what the windows slower than the p90 had that the
    /// others did not — page faults, context switches — per window, to name the slow ones.
    #[serde(default)]
    pub slow_windows: SlowWindows,
    /// Measured: the step's dense GEMMs alone (same shapes, backend and windows of 10), median
    /// ms per step — an f32 MLP's only (None for a CNN or a 16-bit precision).
    #[serde(default)]
    pub gemm_ms_median: Option<f64>,
    /// Derived: the step's GEMM FLOPs (`MlpConfig::training_flops_per_sample`) per second.
    pub gflops: f64,
}

/// Process counters over the timed windows: mean per window for those slower than the p90
/// ("slow") and for the rest ("typical").
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SlowWindows {
    pub count: usize,
    pub minor_faults_slow: f64,
    pub minor_faults_typical: f64,
    pub voluntary_switches_slow: f64,
    pub voluntary_switches_typical: f64,
    pub involuntary_switches_slow: f64,
    pub involuntary_switches_typical: f64,
}

/// Page faults and context switches of the whole process (every rayon worker) so far.
fn counters() -> [f64; 3] {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getrusage only writes the struct it is given.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } == 0 {
            return [u.ru_minflt as f64, u.ru_nvcsw as f64, u.ru_nivcsw as f64];
        }
    }
    [0.0; 3]
}

/// Splits the windows at their p90: the counters' means above it and at or below it.
fn slow_windows(windows: &[(f64, [f64; 3])], p90: f64) -> SlowWindows {
    let mean = |slow: bool, c: usize| {
        let v: Vec<f64> = windows.iter().filter(|w| (w.0 > p90) == slow).map(|w| w.1[c]).collect();
        if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
    };
    SlowWindows {
        count: windows.iter().filter(|w| w.0 > p90).count(),
        minor_faults_slow: mean(true, 0),
        minor_faults_typical: mean(false, 0),
        voluntary_switches_slow: mean(true, 1),
        voluntary_switches_typical: mean(false, 1),
        involuntary_switches_slow: mean(true, 2),
        involuntary_switches_typical: mean(false, 2),
    }
}

/// Full training steps (forward, loss, backward, SGD-momentum update) on random data drawn
/// from a fixed pool of 16 batches, like the PyTorch reference script.
pub fn bench_train<B: Backend>(b: &mut B, cfg: &TrainBenchConfig) -> Result<TrainBenchRow> {
    bench_train_amp(b, cfg, AmpConfig::default())
}

/// `bench_train` at a training precision: f32, or mixed precision through the same `Amp`
/// phases exercise 3 trains with (an error naming the reason where the backend lacks the type).
pub fn bench_train_amp<B: Backend>(b: &mut B, cfg: &TrainBenchConfig, amp: AmpConfig) -> Result<TrainBenchRow> {
    if cfg.batch == 0 || cfg.seconds.is_nan() || cfg.seconds <= 0.0 {
        return Err(Error::InvalidConfig("bench train needs batch ≥ 1 and a positive duration".into()));
    }
    let model_cfg = MlpConfig { input: cfg.input, hidden: cfg.hidden.clone(), classes: cfg.classes, conv: cfg.conv.clone() };
    model_cfg.validate()?;
    let model = Mlp::new(b, model_cfg.clone(), Optimizer::new(cfg.optimizer, 0.01, 0.9, 0.0), 0)?;
    match Amp::new(b, &model, amp)? {
        None => {
            let train = Step::new(b, &model, F32Phases, cfg.batch)?;
            let widths = model_cfg.widths();
            let mut row = timed_steps(b, cfg, model_cfg, model, train, amp.label())?;
            if cfg.conv.is_none() {
                // A quarter of the step's windows: enough for a median, little extra time.
                row.gemm_ms_median = Some(super::step_gemms::dense_gemms_ms(b, &widths, cfg.batch, row.steps / 40)?);
            }
            Ok(row)
        }
        Some(amp) => {
            let label = amp.cfg.label();
            let train = Step::new(b, &model, amp, cfg.batch)?;
            timed_steps(b, cfg, model_cfg, model, train, label)
        }
    }
}

/// The warm-up and the timed windows, once per precision (static dispatch through `P`).
fn timed_steps<B: Backend, P: Phases<B>>(
    b: &mut B,
    cfg: &TrainBenchConfig,
    model_cfg: MlpConfig,
    mut model: Mlp<B>,
    mut train: Step<B, P>,
    precision: String,
) -> Result<TrainBenchRow> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let pool: Vec<(Vec<f32>, Vec<u32>)> = (0..16)
        .map(|_| {
            let x = (0..cfg.batch * cfg.input).map(|_| rng.random_range(0.0..1.0)).collect();
            let y = (0..cfg.batch).map(|_| rng.random_range(0..cfg.classes as u32)).collect();
            (x, y)
        })
        .collect();
    let mut step = |b: &mut B, i: usize| -> Result<()> {
        let (xb, yb) = &pool[i % pool.len()];
        let (x, y) = train.inputs(b, &model, cfg.batch)?;
        b.write_f32(x, xb)?;
        b.write_u32(y, yb)?;
        train.train(b, &mut model, i as u64 + 1)?;
        b.flush()
    };
    b.prepare()?;
    for i in 0..10 {
        step(b, i)?;
    }
    b.sync()?;
    let start = Instant::now();
    let mut windows = Vec::new();
    let mut steps = 0;
    while steps < cfg.min_steps || start.elapsed().as_secs_f64() < cfg.seconds {
        let (w, before) = (Instant::now(), counters());
        for _ in 0..10 {
            step(b, steps)?;
            steps += 1;
        }
        b.sync()?;
        let ms = w.elapsed().as_secs_f64() * 1e3 / 10.0;
        let after = counters();
        windows.push((ms, std::array::from_fn(|c| after[c] - before[c])));
    }
    let wall = start.elapsed().as_secs_f64();
    let mut ms: Vec<f64> = windows.iter().map(|w| w.0).collect();
    let p90 = quantile(&mut ms, 0.9).unwrap_or(0.0);
    let samples_per_s = (steps * cfg.batch) as f64 / wall;
    let info = b.info();
    Ok(TrainBenchRow {
        backend: info.label(),
        software: info.software,
        model: model_cfg.describe(),
        precision,
        batch: cfg.batch,
        steps,
        samples_per_s,
        step_ms_median: median(&mut ms),
        step_ms_p90: p90,
        step_ms_worst: ms.last().copied().unwrap_or(0.0),
        step_ms_wall: wall * 1e3 / steps as f64,
        slow_windows: slow_windows(&windows, p90),
        gemm_ms_median: None,
        gflops: model_cfg.training_flops_per_sample() * samples_per_s / 1e9,
    })
}
