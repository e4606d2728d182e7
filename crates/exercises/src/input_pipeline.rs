//! Exercise 4: a deliberately slow input pipeline (one worker, no prefetch, no cache, costly
//! decode), then one fix at a time — prefetching, more workers, caching — each profiled, so the
//! learner sees the GPU lane starve and then fill.

use super::Exercise;
use super::common;
use super::profiled_runs::{self as pc};
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink};
use crate::common::report_for;
use gpulab_core::error::Result;
use gpulab_systems::profile::session::{PipelineConfig, ProfiledRun};
use gpulab_systems::report::{Claims, Figure, Provenance, Report, Verdict};

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
        include_str!("../../../lessons/04-input-pipeline.md")
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
        let s = common::model_setting(common::training_settings(s, "shapes:res=16,n=1600", &[256, 128], 64, 2));
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
        common::validate_training(s)?;
        pc::source_cost(s)?;
        s.int("workers")?;
        s.int("prefetch")?;
        Ok(())
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        self.validate(s)?;
        let (data, cfg) = pc::training(s, s.int("batch")? as usize)?;
        let (mut engine, meta) = pc::open(s, &data, sink)?;
        let cost = pc::source_cost(s)?;
        let slow = PipelineConfig { num_workers: 1, prefetch_factor: 0, cache: false, pin_memory: s.bool("pin_memory")?, cost };
        let prefetch = PipelineConfig { prefetch_factor: s.int("prefetch")? as usize, ..slow };
        let workers = PipelineConfig { num_workers: s.int("workers")? as usize, ..prefetch };
        let cached = PipelineConfig { cache: true, ..workers };
        let steps = [("1 slow", slow), ("2 + prefetch", prefetch), ("3 + workers", workers), ("4 + cache", cached)];
        let mut runs: Vec<ProfiledRun> = Vec::new();
        for (label, pipe) in steps {
            if sink.stop_requested() {
                break;
            }
            let run = pc::profiled(&mut engine, &data, &cfg, &pipe, label, None, sink)?;
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
            verdict: verdict(&runs),
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

/// One pipeline step's run, as the verdict reads it.
#[derive(Clone, Debug, PartialEq)]
struct StepFigures {
    label: String,
    samples_per_s: f64,
    /// Mean data wait per step, seconds.
    data_wait_s: f64,
    /// Data wait over the main thread's wall time.
    wait_share: f64,
    busy: Option<f64>,
    bottleneck: &'static str,
    /// The diagnosis's first evidence line.
    why: String,
    /// (hits, misses) with the cache on.
    cache: Option<(u64, u64)>,
}

impl StepFigures {
    fn of(r: &ProfiledRun) -> Self {
        let a = &r.diagnosis.analysis;
        StepFigures {
            label: r.label.clone(),
            samples_per_s: r.train.samples_per_s,
            data_wait_s: r.mean_data_wait_s(),
            wait_share: a.data_wait_s / a.wall_s.max(1e-12),
            busy: r.gpu_busy_fraction(),
            bottleneck: r.diagnosis.bottleneck.name(),
            why: r.diagnosis.evidence.first().cloned().unwrap_or_default(),
            cache: r.pipeline.cache.then_some((r.cache.hits, r.cache.misses)),
        }
    }
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const GAINED: &str = "the last step's throughput was above the slow pipeline's";
    pub const NOT_GAINED: &str = "the last step's throughput was not above the slow pipeline's";
    pub const NONE: &str = "no pipeline step finished";
}

fn verdict(runs: &[ProfiledRun]) -> Verdict {
    claims(&runs.iter().map(StepFigures::of).collect::<Vec<_>>()).verdict()
}

/// Computed from the runs: how starved the slow pipeline left the device, and what each change
/// bought.
fn claims(runs: &[StepFigures]) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let (Some(first), Some(last)) = (runs.first(), runs.last()) else {
        c.summary(cond::NONE, runs.is_empty(), "No pipeline step finished.");
        return c;
    };
    let busy = |r: &StepFigures| r.busy.map(|f| format!(", GPU busy {}", common::percent(f))).unwrap_or_default();
    c.fact(
        Summary,
        format!(
            "The slow pipeline spent {} of its time waiting for data ({:.2} ms per step{}) and was {}.",
            common::percent(first.wait_share),
            first.data_wait_s * 1e3,
            busy(first),
            first.bottleneck
        ),
    );
    if runs.len() > 1 {
        let gain = last.samples_per_s / first.samples_per_s.max(1e-12);
        let waited = format!(
            "\"{}\" waited {} ({:.2} ms per step{})",
            last.label,
            common::percent(last.wait_share),
            last.data_wait_s * 1e3,
            busy(last)
        );
        c.one_of(
            Summary,
            vec![
                (cond::GAINED, last.samples_per_s > first.samples_per_s, format!("{waited} and ran at {gain:.1}× the throughput.")),
                (
                    cond::NOT_GAINED,
                    last.samples_per_s <= first.samples_per_s,
                    format!("{waited} but ran at only {gain:.2}× the throughput: these fixes did not pay off on this machine."),
                ),
            ],
        );
    }
    for w in runs.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        c.fact(
            Evidence,
            format!(
                "{}: {:.0} → {:.0} samples/s ({:+.0}%), data wait {:.2} → {:.2} ms per step.",
                b.label,
                a.samples_per_s,
                b.samples_per_s,
                (b.samples_per_s / a.samples_per_s.max(1e-12) - 1.0) * 100.0,
                a.data_wait_s * 1e3,
                b.data_wait_s * 1e3
            ),
        );
    }
    if let Some((hits, misses)) = runs.iter().find_map(|r| r.cache) {
        c.fact(Evidence, format!("With the cache on, {hits} reads were served from memory and {misses} decoded."));
    }
    c.fact(Evidence, format!("After the last change the run is {}: {}", last.bottleneck, last.why));
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn step() -> impl Strategy<Value = StepFigures> {
        (1.0f64..1e5, 0.0f64..0.1, 0.0f64..1.0, proptest::option::of(0.0f64..1.0), any::<bool>()).prop_map(
            |(samples_per_s, data_wait_s, wait_share, busy, cache)| StepFigures {
                label: "step".into(),
                samples_per_s,
                data_wait_s,
                wait_share,
                busy,
                bottleneck: "input-bound",
                why: "evidence".into(),
                cache: cache.then_some((3, 1)),
            },
        )
    }

    proptest! {
        /// Fixes that pay off or do not: every sentence printed is true of the numbers, and each
        /// change has its evidence line.
        #[test]
        fn every_printed_claim_holds(runs in proptest::collection::vec(step(), 0..5)) {
            let claims = claims(&runs);
            let gained = || Some(runs.last()?.samples_per_s > runs.first()?.samples_per_s);
            claims
                .audit(|c| match c.condition {
                    cond::GAINED => gained(),
                    cond::NOT_GAINED => gained().map(|g| !g),
                    cond::NONE => Some(runs.is_empty()),
                    _ => None,
                })
                .map_err(TestCaseError::fail)?;
            prop_assert!(claims.has_summary());
            let v = claims.verdict();
            prop_assert_eq!(v.evidence.len(), if runs.is_empty() { 0 } else { runs.len() - 1 + 1 + runs.iter().any(|r| r.cache.is_some()) as usize });
        }
    }
}
