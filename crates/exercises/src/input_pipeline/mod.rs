//! Exercise 4: a deliberately slow input pipeline (one worker, no prefetch, no cache, costly
//! decode), then one fix at a time — prefetching, more workers, caching — each profiled, so the
//! learner sees the GPU lane starve and then fill.

mod verdict;

use super::profiled_runs::{self as pc};
use super::settings::input_pipeline::Config;
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink};
use super::{Exercise, common};
use crate::common::report_for;
use gpulab_core::error::Result;
use gpulab_systems::profile::session::{PipelineConfig, ProfiledRun};
use gpulab_systems::report::{Figure, Provenance, Report};
use verdict::verdict;

pub struct InputPipeline;

impl Exercise for InputPipeline {
    fn id(&self) -> &'static str {
        "input-pipeline"
    }
    fn number(&self) -> u32 {
        4
    }
    fn title(&self) -> &'static str {
        "Input pipeline: workers, prefetch, cache"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../../lessons/04-input-pipeline.md")
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
        let s = common::model_setting(common::training_settings_every(s, "shapes:res=16,n=1600", &[256, 128], 64, 2, 5));
        let s = pc::cost_settings(s, 0.3, 3);
        s.add("workers", "Workers to add", "num_workers in the \"more workers\" step", settings::int(4, 2, 16))
            .add("prefetch", "Prefetch to add", "prefetch_factor in the \"prefetch\" step", settings::int(2, 1, 16))
            .add(
                "pin_memory",
                "pin_memory",
                "Persistent input buffers written with queue.write_buffer (on), or a fresh buffer per batch plus a device copy (off)",
                Value::Bool(true),
            )
    }

    fn presets(&self) -> Vec<super::Preset> {
        use super::Preset;
        vec![
            Preset::new(
                "starve the GPU",
                "Slow storage (2 ms a sample), heavy decode (12 passes), the fewest extra workers (2), one batch of prefetch and a fresh buffer per batch: the GPU waits on every step",
                &[
                    ("storage_latency_ms", "2"),
                    ("decode_passes", "12"),
                    ("augment", "true"),
                    ("workers", "2"),
                    ("prefetch", "1"),
                    ("pin_memory", "false"),
                ],
            ),
            Preset::new(
                "feed the GPU",
                "Free reads, no decode or augmentation, 8 workers and 4 batches of prefetch: loading should never hold the step up, so the fixes have little to fix",
                &[
                    ("storage_latency_ms", "0"),
                    ("decode_passes", "0"),
                    ("augment", "false"),
                    ("workers", "8"),
                    ("prefetch", "4"),
                    ("pin_memory", "true"),
                ],
            ),
        ]
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        Config::parse(s).map(drop)
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        let c = Config::parse(s)?;
        let (data, cfg) = pc::training(&c.training, c.training.batch()?)?;
        let (mut engine, meta) = pc::open(s, &c.training, &c.backend.one()?, &data, sink)?;
        let cost = c.cost;
        let slow = PipelineConfig { num_workers: 1, prefetch_factor: 0, cache: false, pin_memory: c.pin_memory, cost };
        let prefetch = PipelineConfig { prefetch_factor: c.prefetch as usize, ..slow };
        let workers = PipelineConfig { num_workers: c.workers as usize, ..prefetch };
        let cached = PipelineConfig { cache: true, ..workers };
        let steps = [("1 slow", slow), ("2 + prefetch", prefetch), ("3 + workers", workers), ("4 + cache", cached)];
        let mut runs: Vec<ProfiledRun> = Vec::new();
        // Each run's log windows: its throughput's repeats where it has under three epochs.
        let mut windows = Vec::new();
        for (label, pipe) in steps {
            if sink.stop_requested() {
                break;
            }
            let (run, w) = pc::profiled_watched(&mut engine, &data, &cfg, &pipe, label, None, sink)?;
            windows.push(w);
            sink.emit(Event::Log(format!(
                "{label}: {:.0} samples/s, data wait {:.2} ms per step",
                run.train.samples_per_s,
                run.mean_data_wait_s() * 1e3
            )));
            runs.push(run);
            sink.emit(Event::Table(pc::runs_table("Pipeline steps", &runs)));
        }
        let mut report = Report {
            tables: vec![pc::runs_table("Pipeline steps", &runs)],
            charts: pc::run_charts(&runs),
            verdict: verdict(&runs, &windows),
            figures: figures(&runs),
            stopped_early: sink.stop_requested(),
            timelines: runs.iter().map(|r| r.timeline.clone()).collect(),
            ..report_for(self, s, meta)
        };
        pc::notes(&mut report, &runs, &cost);
        Ok(report)
    }
}

fn figures(runs: &[ProfiledRun]) -> Vec<Figure> {
    let (Some(a), Some(b)) = (runs.first(), runs.last()) else { return Vec::new() };
    vec![Figure {
        label: format!("throughput gain from \"{}\" to \"{}\"", a.label, b.label),
        value: b.train.samples_per_s / a.train.samples_per_s.max(1e-12),
        unit: "×".into(),
        provenance: Provenance::derived("measured samples/s of the two runs"),
    }]
}
