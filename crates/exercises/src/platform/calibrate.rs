//! `calibration=this-machine`: three short measurements with the lab's own code replace the
//! scenario's presets, each labelled where it came from, and stay in scenario.json so a replay
//! does not measure again.
//!
//! How a figure maps to a "worker": this machine *is* the worker. The batch-time curve is the
//! lab's MLP forward pass on the chosen backend (its shape and its scale are this machine's);
//! the precision speed-up is the ratio of two training-step benchmarks; the checkpoint write is
//! the lab's MLP written durably with the checkpoint store. Nothing is rescaled to a bigger GPU.

use std::time::Instant;

use gpulab_core::device::Device;
use gpulab_core::error::{Error, Result};
use gpulab_core::stats::median;
use gpulab_core::tensor::Backend;
use gpulab_core::with_backend;
use gpulab_systems::bench::{TrainBenchConfig, bench_train_amp};
use gpulab_systems::checkpoint::format::{CheckpointMeta, RngState};
use gpulab_systems::checkpoint::{snapshot, store};
use gpulab_systems::nn::{AmpConfig, HostLayer, Mlp, MlpConfig, Optimizer, OptimizerKind, Precision, he_normal};
use gpulab_systems::platform::scenario::{BatchTime, Scenario};
use gpulab_systems::report::{Column, Figure, Provenance, Table};
use gpulab_systems::serve::model::{DeviceModel, HostModel};
use gpulab_systems::train::{LoaderPosition, TrainConfig};

/// The prefix of every calibrated figure's source.
pub const MEASURED: &str = "measured on this machine";

/// The model measured: the lab's MNIST-sized MLP.
fn arch() -> MlpConfig {
    MlpConfig { input: 784, hidden: vec![256, 256], classes: 10, conv: None }
}

/// Batch sizes measured: powers of two up to `max_batch`, and `max_batch` itself.
pub fn batch_sizes(max_batch: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (0..13).map(|i| 1u32 << i).take_while(|&b| b < max_batch).collect();
    v.push(max_batch.max(1));
    v
}

/// Measures on `device` and writes the three figures into `sc` with their sources. A figure
/// that cannot be measured here (f16 training unavailable) keeps its preset and says why.
/// Bounded: about a second per measurement on a loaded 2-core machine.
pub fn calibrate(sc: &mut Scenario, device: &Device, log: &mut dyn FnMut(String)) -> Result<()> {
    let mut engine = device.open(None)?;
    let Measured { curve, label, speedup, write } = with_backend!(&mut engine, b => measure(b, sc.pool.max_batch))?;
    let model = arch().describe();
    sc.pool.curve_source =
        format!("{MEASURED}: the forward pass of the lab's MLP {model} on {label}, median of timed batches; one worker = this machine");
    log(format!(
        "calibration: batch time {} (batch 1) … {} (batch {})",
        ms(curve[0].seconds),
        ms(curve[curve.len() - 1].seconds),
        curve[curve.len() - 1].batch
    ));
    sc.pool.curve = curve;
    match speedup {
        Ok((f16, f32)) => {
            let ratio = f16 / f32;
            sc.training.precision_speedup = ratio.clamp(0.1, 100.0);
            let clamped = if sc.training.precision_speedup != ratio {
                format!(" (×{ratio:.3}, held to the simulator's 0.1..=100)")
            } else {
                String::new()
            };
            sc.training.precision_speedup_source = format!(
                "{MEASURED}: f16 mixed-precision training steps {f16:.0} samples/s vs f32 {f32:.0} samples/s{clamped}, {model} batch 64 on {label}"
            );
            log(format!("calibration: mixed precision ×{:.2}", sc.training.precision_speedup));
        }
        Err(e) => {
            sc.training.precision_speedup_source = format!("preset (not measurable on {label}: {e})");
            log(format!("calibration: mixed precision kept at its preset: {e}"));
        }
    }
    let (seconds, bytes) = write;
    sc.training.checkpoint_write_s = seconds;
    sc.training.checkpoint_write_source = format!(
        "{MEASURED}: the lab's MLP checkpoint ({:.2} MB with optimizer state) written durably by the checkpoint store, median of 3",
        bytes as f64 / 1e6
    );
    log(format!("calibration: checkpoint write {}", ms(seconds)));
    sc.validate()
}

/// The three measurements on one backend, back to back.
struct Measured {
    curve: Vec<BatchTime>,
    label: String,
    /// f16 and f32 training samples/s, or why f16 training cannot run here.
    speedup: Result<(f64, f64)>,
    /// Checkpoint write seconds and bytes.
    write: (f64, u64),
}

fn measure<B: Backend>(b: &mut B, max_batch: u32) -> Result<Measured> {
    let label = b.info().label();
    let curve = inference_curve(b, &batch_sizes(max_batch))?;
    let speedup = precision_speedup(b);
    let write = checkpoint_write(b)?;
    Ok(Measured { curve, label, speedup, write })
}

fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}

/// Seconds per batch of the forward pass at each batch size (median over up to 30 timed
/// batches or 0.15 s per size, after two warm-up batches).
fn inference_curve<B: Backend>(b: &mut B, sizes: &[u32]) -> Result<Vec<BatchTime>> {
    let cfg = arch();
    let widths = cfg.widths();
    let layers = widths
        .windows(2)
        .enumerate()
        .map(|(i, io)| HostLayer { weight: he_normal(io[0], io[1], 7, i), shape: [io[0], io[1]], bias: vec![0.0; io[1]] })
        .collect();
    let host = HostModel { arch: cfg.clone(), layers, version: "calibration".into(), source: "random weights".into(), int8: None };
    let model = DeviceModel::upload(b, &host)?;
    let mut curve = Vec::new();
    for &batch in sizes {
        let rows = batch as usize;
        let mut ws = model.workspace(b, rows)?;
        let x: Vec<f32> = (0..rows * cfg.input).map(|i| (i % 255) as f32 / 255.0).collect();
        let mut times = Vec::new();
        let started = Instant::now();
        for i in 0..32 {
            let t = Instant::now();
            b.write_f32(&mut ws.x, &x)?;
            model.forward(b, &mut ws)?;
            b.sync()?;
            if i >= 2 {
                times.push(t.elapsed().as_secs_f64());
            }
            if i >= 4 && started.elapsed().as_secs_f64() > 0.15 {
                break;
            }
        }
        curve.push(BatchTime { batch, seconds: median(&mut times).max(1e-6) });
    }
    Ok(curve)
}

/// Training samples/s with f16 mixed precision and with f32, measured back to back.
fn precision_speedup<B: Backend>(b: &mut B) -> Result<(f64, f64)> {
    let cfg = arch();
    let bench = TrainBenchConfig {
        input: cfg.input,
        hidden: cfg.hidden.clone(),
        classes: cfg.classes,
        batch: 64,
        seconds: 0.4,
        min_steps: 10,
        optimizer: OptimizerKind::Sgd,
        conv: None,
    };
    let f16 = bench_train_amp(b, &bench, AmpConfig::new(Precision::F16))?;
    let f32 = bench_train_amp(b, &bench, AmpConfig::default())?;
    Ok((f16.samples_per_s, f32.samples_per_s))
}

/// Median seconds of three durable checkpoint writes of the lab's MLP, and its size in bytes.
fn checkpoint_write<B: Backend>(b: &mut B) -> Result<(f64, u64)> {
    let cfg = arch();
    let model = Mlp::new(b, cfg.clone(), Optimizer::new(OptimizerKind::Sgd, 0.01, 0.9, 0.0), 0)?;
    let tensors = snapshot(b, &model)?;
    let meta = CheckpointMeta {
        position: LoaderPosition::default(),
        optimizer_step: 0,
        rng: RngState { generator: "none (calibration)".into(), seed: 0, stream: 0 },
        grad_scaler: None,
        precision: "f32".into(),
        hyperparameters: TrainConfig::default(),
        architecture: cfg,
        dataset: "none (calibration)".into(),
        gpulab_version: env!("CARGO_PKG_VERSION").into(),
    };
    // A new folder with a random name, created exclusively and removed when dropped: a
    // predictable name in a shared /tmp could be another user's folder or link.
    let tmp = tempfile::Builder::new()
        .prefix("gpulab-calibration-")
        .tempdir()
        .map_err(|e| Error::InvalidConfig(format!("calibration: cannot create a temporary folder: {e}")))?;
    let dir = tmp.path();
    let mut times = Vec::new();
    let mut bytes = 0;
    let written = (0..3).try_for_each(|i| -> Result<()> {
        let mut m = meta.clone();
        m.position.step = i;
        let saved = store::save(dir, &m, &tensors)?;
        bytes = saved.bytes;
        times.push(saved.write_s);
        Ok(())
    });
    drop(tmp);
    written?;
    Ok((median(&mut times), bytes))
}

/// A source for the report: the scenario's label, or "preset" where it has none.
fn source(label: &str) -> String {
    if label.is_empty() { "preset (illustrative)".into() } else { label.into() }
}

/// The three calibratable inputs with their values and where each comes from (measured on
/// this machine, or preset), for every run.
pub fn inputs_table(sc: &Scenario) -> Table {
    let (first, last) = (sc.pool.curve.first(), sc.pool.curve.last());
    let curve = match (first, last) {
        (Some(a), Some(z)) => format!("{} (batch {}) … {} (batch {})", ms(a.seconds), a.batch, ms(z.seconds), z.batch),
        _ => "none".into(),
    };
    let t = &sc.training;
    Table {
        title: "Simulation inputs and their sources".into(),
        columns: vec![Column::text("input"), Column::text("value"), Column::text("source")],
        rows: vec![
            vec!["worker batch time".into(), curve.into(), source(&sc.pool.curve_source).into()],
            vec![
                "mixed-precision training speed-up".into(),
                format!("×{:.3}", t.precision_speedup).into(),
                source(&t.precision_speedup_source).into(),
            ],
            vec![
                "checkpoint write time".into(),
                gpulab_core::format::duration(t.checkpoint_write_s).into(),
                source(&t.checkpoint_write_source).into(),
            ],
        ],
    }
}

/// Figures for the inputs measured in this run (calibration=this-machine), labelled measured.
pub fn measured_figures(sc: &Scenario) -> Vec<Figure> {
    let measured = |label: &str| label.starts_with(MEASURED);
    let fig =
        |label: &str, value: f64, unit: &str| Figure { label: label.into(), value, unit: unit.into(), provenance: Provenance::Measured };
    let mut v = Vec::new();
    if measured(&sc.pool.curve_source) {
        for p in [sc.pool.curve.first(), sc.pool.curve.last()].into_iter().flatten() {
            v.push(fig(&format!("calibration: batch time at batch {}", p.batch), p.seconds * 1e3, "ms"));
        }
    }
    if measured(&sc.training.precision_speedup_source) {
        v.push(fig("calibration: mixed-precision training speed-up", sc.training.precision_speedup, "×"));
    }
    if measured(&sc.training.checkpoint_write_source) {
        v.push(fig("calibration: checkpoint write time", sc.training.checkpoint_write_s, "s"));
    }
    v
}
