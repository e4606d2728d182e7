//! What exercises 4 and 7 share: the loader and source-cost settings, opening the backend with
//! its metadata, and the table and charts that compare profiled runs.

use std::sync::Arc;

use super::common;
use super::settings::training::Training;
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink, TrainBridge};
use super::watch::{Recorder, Window};
use gpulab_core::device::{Device, Engine};
use gpulab_core::error::Result;
use gpulab_core::tensor::prelude::*;
use gpulab_core::with_backend;
use gpulab_systems::data::{Dataset, SourceCost};
use gpulab_systems::profile::Peaks;
use gpulab_systems::profile::session::{PipelineConfig, ProfiledRun, profile_training};
use gpulab_systems::report::{Cell, Chart, Column, Metadata, Provenance, Series, Table};
use gpulab_systems::train::TrainConfig;

/// The source-cost settings; `pipeline` adds the loader knobs too.
pub fn cost_settings(s: Settings, latency_ms: f64, decode_passes: i64) -> Settings {
    s.add(
        "storage_latency_ms",
        "Storage latency (ms/sample)",
        "Simulated read time per sample (a sleep on the loading thread, labelled simulated)",
        settings::float(latency_ms, 0.0, 1000.0),
    )
    .add(
        "decode_passes",
        "Decode passes",
        "Real CPU decode work per sample: passes of a 2x resample up and back down",
        settings::int(decode_passes, 0, 64),
    )
    .add("augment", "Augment", "Random rotation (up to 10°) and noise on every sample, seeded per batch", Value::Bool(true))
}

/// The most loader threads `num_workers` takes (a one-click fix never suggests more).
pub const MAX_WORKERS: usize = 16;

pub fn pipeline_settings(s: Settings, workers: i64, prefetch: i64, cache: bool) -> Settings {
    s.add("num_workers", "num_workers", "Loader threads (0 = load on the training thread)", settings::int(workers, 0, MAX_WORKERS as i64))
        .add("prefetch_factor", "prefetch_factor", "Ready batches queued ahead per worker (0 = load only when asked)", settings::int(prefetch, 0, 16))
        .add("cache", "cache", "Keep decoded samples in memory after their first read", Value::Bool(cache))
        .add("pin_memory", "pin_memory", "Write batches straight into persistent input buffers (queue.write_buffer) instead of a fresh buffer per batch plus a device copy", Value::Bool(true))
}

/// The one backend, opened, with the run's metadata (`s` as set, `t` read from it).
pub fn open(s: &Settings, t: &Training, device: &Device, data: &Dataset, sink: &mut dyn Sink) -> Result<(Engine, Metadata)> {
    sink.emit(Event::Phase(format!("opening {device}")));
    let mut engine = device.open(None)?;
    let mut meta = Metadata::new(t.seed as u64);
    meta.dataset = format!("{} — {}", data.name, data.source);
    meta.hyperparameters = s.to_map();
    meta.hyperparameters.insert("architecture".into(), t.architecture(data)?);
    meta.backends.push(with_backend!(&mut engine, b => b.info()));
    Ok((engine, meta))
}

/// One profiled training run with live loss points under `label`, and the device watch of each
/// log window (its throughput's repeats too: `noise::run_spread`); the ledger's peaks are reset
/// first, so the run's report holds this run's peaks.
pub fn profiled_watched(
    engine: &mut Engine,
    data: &Arc<Dataset>,
    cfg: &TrainConfig,
    pipe: &PipelineConfig,
    label: &str,
    peaks: Option<&Peaks>,
    sink: &mut dyn Sink,
) -> Result<(ProfiledRun, Vec<Window>)> {
    sink.emit(Event::Phase(format!("{label}: {}", pipe.describe())));
    with_backend!(engine, b => b.reset_memory_peaks());
    let mut rec = Recorder::new(TrainBridge::new(&mut *sink, label));
    let run = profile_training(engine, data.clone(), cfg, pipe, label, peaks, &mut rec)?;
    let windows = rec.windows;
    for (i, st) in run.steps.iter().enumerate() {
        sink.emit(Event::Point {
            chart: "data_wait".into(),
            series: label.into(),
            x: i as f64 + 1.0,
            y: st.data_wait_s * 1e3,
            provenance: Provenance::Measured,
        });
    }
    Ok((run, windows))
}

/// One row per run: what it changed and what it measured.
pub fn runs_table(title: &str, runs: &[ProfiledRun]) -> Table {
    let columns = vec![
        Column::text("run"),
        Column::text("pipeline"),
        Column::num("throughput", "samples/s", 0, Provenance::Measured),
        Column::num("GPU busy", "%", 0, Provenance::derived("GPU kernel timestamps ÷ the training thread's wall time")),
        Column::num("data wait per step", "ms", 2, Provenance::Measured),
        Column::num("upload per step", "ms", 2, Provenance::Measured),
        Column::num("compute per step", "ms", 2, Provenance::Measured),
        Column::num("cache hits", "", 0, Provenance::Measured),
        Column::num("decoded (cache misses)", "", 0, Provenance::Measured),
        Column::text("bottleneck (computed)"),
    ];
    let rows = runs
        .iter()
        .map(|r| {
            let n = r.steps.len().max(1) as f64;
            let mean = |f: fn(&gpulab_systems::profile::session::StageTimes) -> f64| r.steps.iter().map(f).sum::<f64>() / n * 1e3;
            vec![
                Cell::from(r.label.as_str()),
                r.pipeline.describe().into(),
                r.train.samples_per_s.into(),
                r.gpu_busy_fraction().map(|f| f * 100.0).into(),
                mean(|s| s.data_wait_s).into(),
                mean(|s| s.upload_s).into(),
                mean(|s| s.compute_s).into(),
                // Counted only where the cache is on; without it every read decodes, uncounted.
                if r.pipeline.cache { Cell::Num(r.cache.hits as f64) } else { Cell::Empty },
                if r.pipeline.cache { Cell::Num(r.cache.misses as f64) } else { Cell::Empty },
                r.diagnosis.bottleneck.name().into(),
            ]
        })
        .collect();
    Table { title: title.into(), columns, rows }
}

/// The live charts of a profiled training run: the training charts and the data wait per step.
pub fn live_charts() -> Vec<super::LiveChartSpec> {
    let mut c = common::training_live_charts();
    c.push(super::LiveChartSpec::line("data_wait", "Data wait per step", "step", "waiting for data (ms)"));
    c
}

/// Bars per run (x = run number) and data wait per step (one line per run).
pub fn run_charts(runs: &[ProfiledRun]) -> Vec<Chart> {
    let bars = |id: &str, title: &str, y: &str, prov: Provenance, f: &dyn Fn(&ProfiledRun) -> Option<f64>| Chart {
        // Bars named by their run ("1 slow", "4 + cache"), not by its number.
        x_names: runs.iter().enumerate().map(|(i, r)| (i as f64 + 1.0, r.label.clone())).collect(),
        ..Chart::bars(id, title, "run", y).with_series(
            runs.iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    f(r).map(|v| Series { name: r.label.clone(), points: vec![[i as f64 + 1.0, v]], provenance: prov.clone() })
                })
                .collect(),
        )
    };
    let mut charts = vec![
        bars("samples_per_s", "Throughput", "samples/s", Provenance::Measured, &|r| Some(r.train.samples_per_s)),
        bars("gpu_busy", "GPU busy", "% of wall time", Provenance::derived("GPU kernel timestamps"), &|r| {
            r.gpu_busy_fraction().map(|f| f * 100.0)
        }),
    ];
    charts.push(
        Chart::line("data_wait", "Data wait per step", "step", "ms").with_series(
            runs.iter()
                .map(|r| Series {
                    name: r.label.clone(),
                    points: r.steps.iter().enumerate().map(|(i, s)| [i as f64 + 1.0, s.data_wait_s * 1e3]).collect(),
                    provenance: Provenance::Measured,
                })
                .collect(),
        ),
    );
    charts
}

/// The notes every profiled report carries: simulated latency, software GPU, the GPU lane.
pub fn notes(report: &mut gpulab_systems::report::Report, runs: &[ProfiledRun], cost: &SourceCost) {
    report.note_software_backends();
    if cost.storage_latency_ms > 0.0 {
        report.notes.push(format!("The storage latency ({} ms per sample) is simulated: the loading thread sleeps instead of reading a disk. Decode and augmentation are real CPU work.", cost.storage_latency_ms));
    }
    if let Some(r) = runs.first() {
        report.notes.push(format!("GPU lane: {}", r.timeline.gpu_note));
    }
    // Only a run whose kernels were timed paid for a timestamped pass per kernel.
    let timed = runs.iter().any(|r| r.diagnosis.analysis.gpu_busy_s.is_some());
    report.notes.push(if timed {
        "Each step waits for the device (as reading the loss every step would), so per-step compute is measured; profiling gives each kernel its own timestamped pass, which costs a little.".into()
    } else {
        "Each step waits for the device (as reading the loss every step would), so per-step compute is measured.".into()
    });
}

pub fn training(t: &Training, batch: usize) -> Result<(Arc<Dataset>, TrainConfig)> {
    let cfg = t.train_config(batch)?;
    Ok((Arc::new(t.load_dataset()?), cfg))
}
