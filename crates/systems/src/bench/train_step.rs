use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::nn::{AmpConfig, ConvConfig, Mlp, MlpConfig, Optimizer, OptimizerKind};
use crate::train::{Amp, F32Phases, Phases, Step};
use gpulab_core::error::{Error, Result};
use gpulab_core::stats::median;
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
    /// Derived: forward+backward FLOPs (≈ 3× forward) per second.
    pub gflops: f64,
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
            timed_steps(b, cfg, model_cfg, model, train, amp.label())
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
        let w = Instant::now();
        for _ in 0..10 {
            step(b, steps)?;
            steps += 1;
        }
        b.sync()?;
        windows.push(w.elapsed().as_secs_f64() * 1e3 / 10.0);
    }
    let wall = start.elapsed().as_secs_f64();
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
        step_ms_median: median(&mut windows),
        gflops: 3.0 * model_cfg.forward_flops_per_sample() * samples_per_s / 1e9,
    })
}
