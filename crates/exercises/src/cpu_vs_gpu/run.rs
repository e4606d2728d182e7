//! Exercise 1's run: training on every backend, one after another, then the matmul sweep on
//! the CPU and every GPU that opened.

use super::report::{build_report, training_table};
use super::{CpuVsGpu, short_label};
use crate::settings::Settings;
use crate::settings::cpu_vs_gpu::Config;
use crate::sink::{Event, Sink, TrainBridge};
use gpulab_core::device::{Device, Engine};
use gpulab_core::error::{Error, Result};
use gpulab_core::stats::Spread;
use gpulab_core::tensor::{BackendInfo, prelude::*};
use gpulab_core::with_backend;
use gpulab_systems::bench::{random_matrix, time_matmul_samples};
use gpulab_systems::report::{Metadata, Provenance, Report};
use gpulab_systems::train::{self, TrainReport};

/// One backend's training result (or why it has none).
pub(super) struct Trained {
    pub(super) device: String,
    pub(super) info: Option<BackendInfo>,
    pub(super) result: std::result::Result<TrainReport, String>,
    /// Mean GPU utilisation NVML reported during training (NVIDIA only), from the run's monitor.
    pub(super) nvml_utilization: Option<f64>,
}

pub(super) fn run(ex: &CpuVsGpu, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
    let mut c = Config::parse(s)?;
    let data = c.training.load_dataset()?;
    let devices = c.backends.clone();
    // size=auto sizes the model so that training on every backend, one after another, takes
    // about target_s of arithmetic at their measured peaks.
    let budget = crate::sizing::Budget { runs: 1.0, extra_passes: 0.0, grow_only: false };
    let (resolved, sizing) = crate::sizing::resolve_for(s, &mut c.training, &devices, &data, budget, sink)?;
    let s = &resolved;
    let cfg = c.training.train_config(c.training.batch()?)?;
    let sizes: Vec<usize> = c.sweep_sizes.iter().map(|&v| v as usize).collect();
    let runs = c.sweep_runs as usize;

    let mut meta = Metadata::new(cfg.seed);
    meta.dataset = format!("{} — {}", data.name, data.source);
    meta.hyperparameters = s.to_map();
    meta.hyperparameters.insert("architecture".into(), c.training.architecture(&data)?);

    // Training on every backend, one after another.
    let mut engines: Vec<(String, Engine)> = Vec::new();
    let mut trained = Vec::new();
    for d in &devices {
        if sink.stop_requested() {
            break;
        }
        sink.emit(Event::Phase(format!("training on {d}")));
        let mut engine = match d.open(None) {
            Ok(e) => e,
            Err(e) => {
                sink.emit(Event::Log(format!("{d}: {e}")));
                trained.push(Trained { device: d.to_string(), info: None, result: Err(e.to_string()), nvml_utilization: None });
                continue;
            }
        };
        let info = with_backend!(&mut engine, b => b.info());
        let series = short_label(&info);
        sink.emit(Event::Log(format!("training on {}", info.label())));
        // The driver's utilisation comes from the run's monitor (`monitor::Monitored`).
        let since = sink.telemetry_clock();
        let result = with_backend!(&mut engine, b => {
            let mut bridge = TrainBridge::new(&mut *sink, series);
            train::train(b, &data, &cfg, &mut bridge)
        });
        if let Err(e) = &result {
            sink.emit(Event::Log(format!("{}: {e}", info.label())));
        }
        let gpu = info.kind != gpulab_core::tensor::BackendKind::Cpu;
        let nvml_utilization = since.filter(|_| gpu).and_then(|t| sink.nvml_utilisation_since(&info.name, t));
        trained.push(Trained {
            device: d.to_string(),
            info: Some(info.clone()),
            result: result.map_err(|e| e.to_string()),
            nvml_utilization,
        });
        meta.backends.push(info);
        engines.push((d.to_string(), engine));
        sink.emit(Event::Table(training_table(&trained)));
    }

    // The matmul sweep on the CPU (always, as the baseline) and every GPU that opened.
    let mut sweep: Vec<(BackendInfo, Vec<super::verdict::Point>)> = Vec::new();
    if !engines.iter().any(|(_, e)| e.kind() == gpulab_core::tensor::BackendKind::Cpu) {
        engines.insert(0, ("cpu".into(), Device::Cpu.open(None)?));
    }
    'sweep: for (_, engine) in engines.iter_mut() {
        let info = with_backend!(&mut *engine, b => b.info());
        sink.emit(Event::Phase(format!("matmul sweep on {}", short_label(&info))));
        let mut points = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            if sink.stop_requested() {
                sweep.push((info, points));
                break 'sweep;
            }
            let (a, bm) = (random_matrix(n * n, 1), random_matrix(n * n, 2));
            let secs = with_backend!(&mut *engine, b => time_matmul_samples(b, &a, &bm, n, runs));
            // Each timed run's GFLOP/s: their median and middle half.
            let spread = secs.map(|(s, _)| Spread::of(&s.iter().map(|t| 2.0 * (n as f64).powi(3) / t / 1e9).collect::<Vec<_>>()));
            match spread {
                Ok(Some(g)) => {
                    let gflops = g.median;
                    points.push((n, g));
                    sink.emit(Event::Point {
                        chart: "gflops".into(),
                        series: short_label(&info),
                        x: n as f64,
                        y: gflops,
                        provenance: Provenance::Measured,
                    });
                }
                Ok(None) => {}
                Err(e) => sink.emit(Event::Log(format!("{} n={n}: {e}", short_label(&info)))),
            }
            sink.emit(Event::Progress { done: i as u64 + 1, total: sizes.len() as u64 });
        }
        sweep.push((info, points));
    }

    let stopped_early = sink.stop_requested();
    let mut report = build_report(ex, s, &c, meta, &trained, &sweep, stopped_early);
    crate::sizing::annotate(sizing.as_ref(), &mut report);
    if trained.iter().all(|t| t.result.is_err()) && !stopped_early {
        let why: Vec<String> = trained.iter().filter_map(|t| t.result.as_ref().err().map(|e| format!("{}: {e}", t.device))).collect();
        return Err(Error::InvalidConfig(format!("no backend could train: {}", why.join("; "))));
    }
    Ok(report)
}
