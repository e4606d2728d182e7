//! Exercise 3's training runs: one run per precision on one engine, its loss curve, and the
//! matmul kernel it ran on.

use super::report::{build_report, comparison_table, demo_table};
use super::{DEMO_RUNS, PrecisionLab};
use crate::settings::Settings;
use crate::settings::precision::Config;
use crate::sink::{Event, Sink, TrainBridge};
use gpulab_core::device::Engine;
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{BackendKind, prelude::*};
use gpulab_core::with_backend;
use gpulab_systems::data::Dataset;
use gpulab_systems::nn::{AmpConfig, OptimizerKind, Precision};
use gpulab_systems::report::{Metadata, Report};
use gpulab_systems::train::{self, Recorder, TrainConfig, TrainReport};

// The categories mixed precision changes.
/// One training run and what it gave.
pub(super) struct Run {
    pub(super) label: String,
    pub(super) amp: AmpConfig,
    pub(super) result: std::result::Result<TrainReport, String>,
    /// The matmul kernel that ran it (`matmul_path`).
    pub(super) path: MatmulPath,
    /// (step, mean training loss over the read-back window): measured.
    pub(super) loss: Vec<[f64; 2]>,
}

impl Run {
    pub(super) fn ok(&self) -> Option<&TrainReport> {
        self.result.as_ref().ok()
    }
}

pub(super) fn run(ex: &PrecisionLab, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
    let mut c = Config::parse(s)?;
    let device = c.backend.clone();
    let data = c.training.load_dataset()?;
    let demo_passes = if c.underflow_demo { DEMO_RUNS.len() as f64 * c.demo_epochs as f64 } else { 0.0 };
    let (resolved, sizing) = crate::sizing::resolve(s, &mut c.training, &device, &data, c.precisions.len() as f64, demo_passes, sink)?;
    let s = &resolved;
    let base = c.training.train_config(c.training.batch()?)?;
    let scaler = |mut amp: AmpConfig| -> Result<AmpConfig> {
        amp.scaler.init_scale = c.init_scale as f32;
        amp.scaler.growth_interval = c.growth_interval as u32;
        Ok(amp)
    };

    sink.emit(Event::Phase(format!("opening {device}")));
    let mut engine = device.open(None)?;
    let info = with_backend!(&mut engine, b => b.info());
    let mut meta = Metadata::new(base.seed);
    meta.dataset = format!("{} — {}", data.name, data.source);
    meta.hyperparameters = s.to_map();
    meta.hyperparameters.insert("architecture".into(), c.training.architecture(&data)?);
    meta.precision = c.precisions.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ");
    meta.backends.push(info.clone());

    let mut runs = Vec::new();
    for p in c.precisions.clone() {
        if sink.stop_requested() {
            break;
        }
        let amp = scaler(AmpConfig::new(p))?;
        let cfg = TrainConfig { amp, ..base.clone() };
        runs.push(train_one(&mut engine, &data, cfg, amp.label(), sink));
        sink.emit(Event::Table(comparison_table(&runs)));
    }

    let mut demo = Vec::new();
    if c.underflow_demo && !sink.stop_requested() {
        let weight = 2f32.powi(c.demo_loss_exponent as i32);
        let demo_cfg = TrainConfig { epochs: c.demo_epochs as usize, optimizer: OptimizerKind::Sgd, lr: base.lr / weight, ..base.clone() };
        for (p, scaling) in DEMO_RUNS {
            if sink.stop_requested() {
                break;
            }
            // The FP32 reference trains with weight 1 and the plain learning rate: the same
            // updates exactly, since λ·(lr/λ) = lr.
            let (amp, cfg, label) = if p == Precision::F32 {
                (AmpConfig::default(), TrainConfig { lr: base.lr, ..demo_cfg.clone() }, "demo: fp32 (weight 1, same updates)".to_string())
            } else {
                let amp = AmpConfig { grad_scaling: scaling, loss_weight: weight, ..scaler(AmpConfig::new(p))? };
                (amp, demo_cfg.clone(), format!("demo: {}", amp.label()))
            };
            demo.push(train_one(&mut engine, &data, TrainConfig { amp, ..cfg }, label, sink));
            sink.emit(Event::Table(demo_table(&demo)));
        }
    }

    let stopped_early = sink.stop_requested();
    if runs.iter().all(|r| r.result.is_err()) && !stopped_early {
        let why: Vec<String> = runs.iter().filter_map(|r| r.result.as_ref().err().map(|e| format!("{}: {e}", r.label))).collect();
        return Err(Error::InvalidConfig(format!("no precision could train: {}", why.join("; "))));
    }
    let mut report = build_report(ex, s, &c, meta, &runs, &demo, stopped_early);
    crate::sizing::annotate(sizing.as_ref(), &mut report);
    Ok(report)
}

fn train_one(engine: &mut Engine, data: &Dataset, cfg: TrainConfig, label: String, sink: &mut dyn Sink) -> Run {
    sink.emit(Event::Phase(format!("training in {label}")));
    let amp = cfg.amp;
    let (result, loss) = with_backend!(engine, b => {
        b.reset_memory_peaks();
        let mut rec = Recorder::new(TrainBridge::new(&mut *sink, label.clone()));
        let r = train::train(b, data, &cfg, &mut rec);
        (r, rec.losses())
    });
    if let Err(e) = &result {
        sink.emit(Event::Log(format!("{label}: {e}")));
    }
    let path = matmul_path(engine, amp.precision);
    Run { label, amp, result: result.map_err(|e| e.to_string()), loss, path }
}

/// How a run's matmuls ran on this backend: the kernel, and whether it has fast 16-bit
/// arithmetic (tensor cores through cuBLAS or a cooperative-matrix kernel, or the CPU's native
/// bf16 instructions) rather than 16-bit storage multiplied in f32.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct MatmulPath {
    pub(super) kind: BackendKind,
    pub(super) software: bool,
    /// The 16-bit (or, for FP32, the f32) GEMM, in words.
    pub(super) kernel: String,
    /// The f32 GEMM FP32 runs on this backend, in words.
    pub(super) f32_kernel: String,
    pub(super) fast16: bool,
}

fn matmul_path(engine: &mut Engine, p: Precision) -> MatmulPath {
    let info = with_backend!(&mut *engine, b => b.info());
    let g = engine.gemm_path(p.dtype16());
    MatmulPath { kind: info.kind, software: info.software, kernel: g.kernel, f32_kernel: g.f32_kernel, fast16: g.fast16 }
}
