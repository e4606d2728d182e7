//! Exercise 9: FP32 vs INT8 inference. Trains an MLP (or reads an exercise-5 checkpoint),
//! calibrates int8 activation ranges on held-out training samples, then on each chosen backend
//! compares FP32, FP16 and INT8 (static/dynamic activation scales × per-channel/per-tensor
//! weights): latency, memory, accuracy, agreement with FP32, per-layer error and sensitivity.
//! The INT8 model (static, per-channel) is exported as safetensors (`quant::export`).

mod measure;
mod report;
mod source;
mod verdict;

use std::path::PathBuf;

use super::Exercise;
use super::common;
use super::settings::quantization::Config;
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::prelude::*;
use gpulab_core::with_backend;
use gpulab_systems::quant::{ObserverKind, export};
use gpulab_systems::report::{Attachment, Metadata, Report};

pub struct QuantizationLab;

/// The exported model's file name in the report folder.
pub const EXPORT_FILE: &str = "model.int8.safetensors";

/// Rows of each latency measurement besides batch 1.
const LATENCY_BATCH: usize = 64;

impl Exercise for QuantizationLab {
    fn id(&self) -> &'static str {
        "quantization"
    }
    fn number(&self) -> u32 {
        9
    }
    fn title(&self) -> &'static str {
        "FP32 vs INT8 inference"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../../lessons/09-int8-quantization.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[("backends", "cpu"), ("epochs", "1"), ("hidden", "32"), ("latency_runs", "2")]
    }
    fn live_charts(&self) -> Vec<super::LiveChartSpec> {
        common::training_live_charts()
    }

    fn settings(&self) -> Settings {
        let s = Settings::default()
            .add("backends", "Backends", &format!("Where to compare inference, comma-separated: {} (training runs on the first)", gpulab_core::device::registry::spellings()), Value::Devices(vec!["cpu".into(), "gpu".into()]))
            .add("checkpoint", "Checkpoint", "An exercise-5 checkpoint (.safetensors) to quantize instead of training first; empty = train first. Its model must fit the data set", Value::Text(String::new()))
            .add("observer", "Calibration observer", "minmax keeps every value in range; percentile clips the top (100 − p)% of |x| for a finer step", settings::choice("percentile", &["minmax", "percentile"]))
            .add("percentile", "Percentile", "The percentile observer's p, in (0, 100] (TensorRT uses 99.99)", settings::float(99.99, 0.0, 100.0))
            .add("calibration_samples", "Calibration samples", "Held-out training samples the observers see (never the validation split)", settings::int(256, 0, 1_000_000))
            .add("latency_runs", "Latency runs", "Timed forward passes per latency (the median is reported)", settings::int(30, 1, 10_000))
            .add("export", "Export path", "Also write the INT8 model here (.safetensors); it is always in the report folder as model.int8.safetensors", Value::Text(String::new()));
        common::training_settings(s, "digits", &[128, 64], 32, 5)
    }

    fn presets(&self) -> Vec<super::Preset> {
        use super::Preset;
        vec![
            Preset::new(
                "min/max calibration",
                "Activation ranges that keep every value, outliers included: a coarser int8 step than the percentile observer's",
                &[("observer", "minmax")],
            ),
            Preset::new(
                "calibrate on 8 samples",
                "Static activation scales from 8 samples only: ranges the validation data exceeds",
                &[("calibration_samples", "8")],
            ),
        ]
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        Config::parse(s).map(drop)
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        let c = Config::parse(s)?;
        let devices = c.backends.clone();
        let data = c.training.load_dataset()?;
        let samples = c.calibration_samples as usize;
        if samples > data.train_len() {
            return Err(Error::InvalidConfig(format!(
                "calibration_samples: {samples} is more than the {} training samples of {}",
                data.train_len(),
                data.name
            )));
        }
        let cfg = c.training.train_config(c.training.batch()?)?;
        let mut meta = Metadata::new(cfg.seed);
        meta.dataset = format!("{} — {}", data.name, data.source);
        meta.hyperparameters = s.to_map();
        meta.precision = "fp32, fp16, int8".into();
        // The metadata is filled in once the backends have run.
        let mut report = common::report_for(self, s, Metadata::default());

        let checkpoint = &c.checkpoint;
        let layers = if checkpoint.trim().is_empty() {
            sink.emit(Event::Phase(format!("opening {}", devices[0])));
            let mut engine = devices[0].open(None)?;
            sink.emit(Event::Phase("training the FP32 model".into()));
            let (trained, model) = source::train_first(&mut engine, &data, &cfg, sink)?;
            report.notes.push(format!(
                "The FP32 model was trained here on {} ({}, validation accuracy {}).",
                trained.backend.label(),
                common::plural(trained.epochs.len(), "epoch"),
                common::percent(trained.final_val_accuracy)
            ));
            match model {
                Some(m) => m.layers,
                None => {
                    report.metadata = meta;
                    report.stopped_early = true;
                    report.verdict.summary = "Stopped during training, before there was a model to quantize.".into();
                    return Ok(report);
                }
            }
        } else {
            let path = PathBuf::from(checkpoint.trim());
            let m = source::from_checkpoint(&path, &data)?;
            report.notes.push(format!(
                "The FP32 model is the checkpoint {} (MLP {}); the hidden, training and optimizer settings were not used.",
                path.display(),
                m.arch.describe()
            ));
            m.layers
        };

        let calib = &data.train_x[..samples * data.features];
        let plan = measure::Plan {
            layers: &layers,
            data: &data,
            calib,
            observer: observer(&c)?,
            runs: c.latency_runs as usize,
            batch: LATENCY_BATCH,
        };
        let mut runs = Vec::new();
        for d in &devices {
            if sink.stop_requested() {
                report.stopped_early = true;
                break;
            }
            sink.emit(Event::Phase(format!("opening {d}")));
            let mut engine = d.open(None)?;
            let info = with_backend!(&mut engine, b => b.info());
            meta.backends.push(info);
            let run = with_backend!(&mut engine, b => measure::run_backend(b, &plan, &mut |p| sink.emit(Event::Phase(p))))?;
            runs.push(run);
            sink.emit(Event::Table(report::comparison_table(&runs, LATENCY_BATCH)));
        }
        report.metadata = meta;
        report::fill(&mut report, &runs, LATENCY_BATCH, samples);

        if let Some(model) = runs.first().and_then(|r| r.model.as_ref()) {
            let kind = plan.observer.name();
            let extra = [("observer", kind), ("calibration_samples", samples.to_string()), ("dataset", data.name.clone())];
            let bytes = export::to_bytes(model, &extra)?;
            let export_path = &c.export;
            if !export_path.trim().is_empty() {
                let p = PathBuf::from(export_path.trim());
                export::save(&p, model, &extra)?;
                report.notes.push(format!("The INT8 model was written to {}.", p.display()));
            }
            report.notes.push(format!(
                "The INT8 model (static scales, per-channel weights, from {}) is {EXPORT_FILE}: {} bytes of safetensors.",
                runs[0].info.label(),
                bytes.len()
            ));
            report.attachments.push(Attachment { file_name: EXPORT_FILE.into(), bytes, ..Default::default() });
        }
        report.note_software_backends();
        Ok(report)
    }
}

/// The settings checked as a whole (`Config::parse` calls it).
pub(crate) fn check(c: &Config) -> Result<()> {
    if c.backends.is_empty() {
        return Err(Error::InvalidConfig("backends: choose at least one backend".into()));
    }
    observer(c)?;
    if c.calibration_samples < 1 {
        return Err(Error::InvalidConfig(
            "calibration_samples: 0 samples; calibration needs at least one sample to observe a range".into(),
        ));
    }
    c.training.validate()
}

/// The observer the settings choose; a percentile outside (0, 100] is refused by name.
fn observer(c: &Config) -> Result<ObserverKind> {
    let kind = match c.observer.as_str() {
        "minmax" => ObserverKind::MinMax,
        _ => ObserverKind::Percentile(c.percentile),
    };
    kind.validate().map_err(|e| Error::InvalidConfig(format!("percentile: {}", e.to_string().trim_start_matches("invalid setting: "))))
}
