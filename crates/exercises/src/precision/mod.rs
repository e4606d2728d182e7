//! Exercise 3: the same model, data and seed trained in FP32, FP16 with a GradScaler, and BF16
//! (autocast: 16-bit matmuls, f32 master weights and loss), then an underflow demonstration:
//! FP16 with tiny gradients, without and with loss scaling.

mod report;
mod run;
mod verdict;

use super::settings::precision::Config;
use super::settings::{self, Settings, Value};
use super::sink::Sink;
use super::{Exercise, Preset};
use super::{common, cost};
use gpulab_core::error::Result;
use gpulab_systems::nn::Precision;
use gpulab_systems::report::{Figure, Report};

pub struct PrecisionLab;

/// How each 16-bit run's speed-up over FP32 is labelled, after the run's name.
pub(super) const SPEEDUP: &str = "speed-up over FP32";

impl Exercise for PrecisionLab {
    fn id(&self) -> &'static str {
        "precision"
    }
    fn number(&self) -> u32 {
        3
    }
    fn title(&self) -> &'static str {
        "FP32 vs FP16/BF16 mixed precision"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../../lessons/03-mixed-precision.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[("backend", "cpu"), ("epochs", "1"), ("hidden", "32"), ("demo_epochs", "1")]
    }

    fn live_charts(&self) -> Vec<super::LiveChartSpec> {
        common::training_live_charts()
    }
    /// FP16's speed-up over FP32 (else the first 16-bit run's).
    fn key_figure<'r>(&self, report: &'r Report) -> Option<&'r Figure> {
        let speedups = || report.figures.iter().filter(|f| f.label.ends_with(SPEEDUP));
        speedups().find(|f| f.label.starts_with("fp16")).or_else(|| speedups().next()).or(report.figures.first())
    }
    fn settings(&self) -> Settings {
        let s = common::one_backend(Settings::default())
            .add("precisions", "Precisions", "Which to compare, in order: fp32, fp16 (with a GradScaler), bf16 (unscaled)", Value::Text("fp32,fp16,bf16".into()))
            .add("init_scale", "Initial loss scale", "GradScaler's starting scale (PyTorch: 65536). Try 1e10 to watch overflow steps being skipped", settings::float(65536.0, 1.0, 1e30))
            .add("growth_interval", "Growth interval", "Finite steps before the scale doubles (PyTorch: 2000)", settings::int(2000, 1, 1_000_000))
            .add("underflow_demo", "Underflow demo", "Also train on tiny gradients: FP16 without and with loss scaling, and BF16 without a scaler", Value::Bool(true))
            .add("demo_loss_exponent", "Demo loss weight (power of 2)", "The demo multiplies the loss by 2^this (and the SGD learning rate by its inverse, so FP32 trains exactly as before), making every gradient tiny", settings::int(-24, -40, 0))
            .add("demo_epochs", "Demo epochs", "Epochs of each underflow-demo run", settings::int(2, 1, 100));
        let s = cost::price_setting(s);
        // Batch 256: activations outweigh the parameters' extra 16-bit copy, so FP16's peak
        // memory is ≈ 0.64× FP32's by the ledger (at batch 32 the copy ate most of the saving).
        // The first run sizes the model from the backend's peak, so the matmuls are large enough
        // for 16-bit arithmetic to pay where the hardware has it.
        super::sizing::settings_with(common::model_setting(common::training_settings(s, "digits", &[128, 64], 256, 10)), "auto", 10.0)
    }

    fn presets(&self) -> Vec<Preset> {
        let mut p = super::sizing::presets(
            "The defaults: the hidden layers sized from the backend's measured FP32 peak (cached per adapter) so that the comparison takes about 10 s of arithmetic, with matmuls large enough for 16-bit arithmetic to pay where the hardware has it",
            (
                "A 2048-wide MLP at batch 256 on 64×64 colour shapes: matmuls large enough for 16-bit arithmetic and memory to matter",
                &[("batch", "256"), ("epochs", "2"), ("demo_epochs", "1")],
            ),
            (
                "The model sized from the backend's measured FP32 peak (cached per adapter) on 64×64 colour shapes, so the comparison takes about 30 s of arithmetic anywhere",
                &[("batch", "256"), ("demo_epochs", "1"), ("target_s", "30")],
            ),
        );
        p.insert(1, super::sizing::too_small_preset("The digits model with its hidden layers as set (128, 64): matmuls too small for 16-bit arithmetic to pay off on any backend"));
        p
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        Config::parse(s).map(drop)
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        run::run(self, s, sink)
    }
}

/// The underflow demo's runs: the FP32 reference, FP16 without and with the GradScaler, and BF16
/// without one (its range is FP32's: the demo shows it needs no scaler).
pub(super) const DEMO_RUNS: [(Precision, bool); 4] =
    [(Precision::F32, false), (Precision::F16, false), (Precision::F16, true), (Precision::BF16, false)];
