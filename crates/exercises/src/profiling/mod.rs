//! Exercise 7: profile a training run — timeline, per-kernel table against this adapter's
//! measured peaks, roofline, a bottleneck verdict computed from the spans — then apply the
//! suggested optimization and profile again ("measure again").

mod report;
mod run;
mod verdict;

use super::profiled_runs::{self as pc};
use super::settings::profiling::Config;
use super::settings::{Settings, Value};
use super::sink::Sink;
use super::{Exercise, common};
use gpulab_core::error::Result;
use gpulab_systems::report::Report;

pub struct Profiling;

impl Exercise for Profiling {
    fn id(&self) -> &'static str {
        "profiling"
    }
    fn number(&self) -> u32 {
        7
    }
    fn title(&self) -> &'static str {
        "GPU profiling"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../../lessons/07-gpu-profiling.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("backend", "cpu"),
            ("dataset", "shapes:res=8,n=240"),
            ("hidden", "16"),
            ("batch", "32"),
            ("epochs", "1"),
            ("storage_latency_ms", "1"),
            ("decode_passes", "1"),
        ]
    }

    fn live_charts(&self) -> Vec<super::LiveChartSpec> {
        pc::live_charts()
    }
    fn settings(&self) -> Settings {
        let s = common::one_backend(Settings::default());
        let s = common::model_setting(common::training_settings_every(s, "shapes:res=16,n=1600", &[256, 128], 64, 1, 5));
        let s = pc::pipeline_settings(pc::cost_settings(s, 0.3, 3), 1, 0, false);
        let s = common::precision_setting(s);
        s.add(
            "measure_again",
            "Apply the fix and measure again",
            "After the first profile, apply the suggested optimization and profile again",
            Value::Bool(true),
        )
    }

    fn presets(&self) -> Vec<super::Preset> {
        use super::Preset;
        vec![
            Preset::new(
                "starve the GPU",
                "Load on the training thread (no workers, no prefetch, no cache) from slow storage with heavy decode: the profile shows a data-bound step",
                &[("num_workers", "0"), ("prefetch_factor", "0"), ("cache", "false"), ("storage_latency_ms", "1"), ("decode_passes", "8")],
            ),
            Preset::new(
                "feed the GPU",
                "4 workers, 4 batches of prefetch, a cache and free reads at batch 256: the data is never late, so the profile shows what the step itself costs",
                &[
                    ("num_workers", "4"),
                    ("prefetch_factor", "4"),
                    ("cache", "true"),
                    ("storage_latency_ms", "0"),
                    ("decode_passes", "0"),
                    ("augment", "false"),
                    ("batch", "256"),
                ],
            ),
        ]
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        Config::parse(s).map(drop)
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        run::run(self, s, sink)
    }
}
