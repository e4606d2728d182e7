//! Exercise 1: the same model, data and seed on the CPU and on each selected GPU, then a matmul
//! size sweep that finds where (or whether) the GPU starts to win.

mod report;
mod run;
mod verdict;

use super::settings::cpu_vs_gpu::Config;
use super::settings::{self, Settings, Value};
use super::sink::Sink;
use super::{Exercise, Preset};
use super::{common, cost};
use gpulab_core::error::Result;
use gpulab_core::tensor::BackendInfo;
use gpulab_systems::report::{Figure, Report};

pub struct CpuVsGpu;

/// Seconds of training arithmetic the default run is sized for (`size=auto`).
const DEFAULT_TARGET_S: f64 = 10.0;

/// The label every GPU's speed ratio starts with (the class view charts it across machines).
pub(super) const SPEED_RATIO: &str = "GPU / CPU training speed";

impl Exercise for CpuVsGpu {
    fn id(&self) -> &'static str {
        "cpu-vs-gpu"
    }
    fn number(&self) -> u32 {
        1
    }
    fn title(&self) -> &'static str {
        "CPU vs GPU"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../../lessons/01-cpu-vs-gpu.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[("backends", "cpu"), ("epochs", "1"), ("hidden", "32"), ("sweep_sizes", "16,32"), ("sweep_runs", "1")]
    }

    /// The GPU / CPU training-speed ratio, of a hardware GPU where one ran.
    fn key_figure<'r>(&self, report: &'r Report) -> Option<&'r Figure> {
        let ratios = || report.figures.iter().filter(|f| f.label.starts_with(SPEED_RATIO));
        ratios().find(|f| !f.label.contains("software GPU")).or_else(|| ratios().next()).or(report.figures.first())
    }

    fn live_charts(&self) -> Vec<super::LiveChartSpec> {
        let mut c = common::training_live_charts();
        c.push(super::LiveChartSpec::line("gflops", "Matmul speed", "matrix size n", "GFLOP/s").log_x());
        c
    }
    fn settings(&self) -> Settings {
        let s = Settings::default().add(
            "backends",
            "Backends",
            &format!(
                "Where to train: {}; gpu is the best adapter, gpu:N its index in the hardware panel",
                gpulab_core::device::registry::spellings()
            ),
            Value::Devices(vec!["cpu".into(), "gpu".into()]),
        );
        let s = common::model_setting(common::training_settings(s, "digits", &[128, 64], 64, 5))
            .add("sweep_sizes", "Matmul sizes", "n for the n×n×n matmul sweep", settings::list(&[64, 128, 256, 512, 1024], 1, 8192))
            .add("sweep_runs", "Runs per size", "Timed runs per matmul size (the median is reported)", settings::int(3, 1, 50));
        let s = cost::setting(s, "price_per_hour", "GPU price per hour (USD)", "What an hour of each GPU costs (per GPU-hour)", "auto");
        let s = cost::setting(
            s,
            "cpu_price_per_hour",
            "CPU price per hour (USD)",
            "What an hour of the CPU backend's machine costs (per machine-hour)",
            "auto",
        );
        // The first run sizes the model from the backends' peaks, so a real GPU has enough work per
        // step to show what it adds; "too small for a GPU" is the lesson's digits model as set.
        super::sizing::settings_with(s, "auto", DEFAULT_TARGET_S)
    }

    fn presets(&self) -> Vec<Preset> {
        let mut p = super::sizing::presets(
            "The defaults: the hidden layers sized from every backend's measured peak (cached per adapter) so that training on all of them takes about 10 s of arithmetic: enough work per step for a hardware GPU to show what it adds",
            (
                "A 2048-wide MLP at batch 256 on 64×64 colour shapes, and matmuls up to n = 4096: enough work per step for a GPU to win",
                &[("batch", "256"), ("epochs", "3"), ("sweep_sizes", "256,512,1024,2048,4096")],
            ),
            (
                "The model sized from the backends' measured peaks (cached per adapter) on 64×64 colour shapes, so its training takes about 20 s on a laptop or a workstation",
                &[("batch", "256"), ("target_s", "20"), ("sweep_sizes", "256,512,1024,2048")],
            ),
        );
        p.insert(
            1,
            super::sizing::too_small_preset(
                "The digits model with its hidden layers as set (128, 64): a few seconds anywhere, and too small for any GPU to win at training",
            ),
        );
        p
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        Config::parse(s).map(drop)
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        run::run(self, s, sink)
    }
}

/// A short name for charts: "CPU" or the adapter name with "(software)" where it applies.
pub(super) fn short_label(info: &BackendInfo) -> String {
    // "llvmpipe (LLVM 15.0.6, 256 bits)" → "llvmpipe": the details are in the full label.
    let name = info.name.split(" (").next().unwrap_or(&info.name);
    match info.kind {
        gpulab_core::tensor::BackendKind::Cpu => "CPU".into(),
        _ if info.software => format!("{name} {} (software GPU)", info.api),
        _ => format!("{name} {}", info.api),
    }
}
