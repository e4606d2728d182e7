//! Exercise 7: profile a training run — timeline, per-kernel table against this adapter's
//! measured peaks, roofline, a bottleneck verdict computed from the spans — then apply the
//! suggested optimization and profile again ("measure again").

use super::Exercise;
use super::common;
use super::profiled_runs::{self as pc};
use super::settings::Settings;
use super::settings::Value;
use super::sink::{Event, Sink};
use super::watch;
use crate::common::report_for;
use gpulab_core::error::Result;
use gpulab_systems::nn::AmpConfig;
use gpulab_systems::profile::Bottleneck;
use gpulab_systems::profile::kernels::{self, KernelRow};
use gpulab_systems::profile::peaks::{self, Peaks};
use gpulab_systems::profile::session::{PipelineConfig, ProfiledRun};
use gpulab_systems::report::{Cell, Chart, ChartKind, Claims, Column, Figure, Provenance, Report, Series, Suggestion, Table, Verdict};
use gpulab_systems::train::TrainConfig;

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
        include_str!("../../../lessons/07-gpu-profiling.md")
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
        let s = common::model_setting(common::training_settings(s, "shapes:res=16,n=1600", &[256, 128], 64, 1));
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
        common::validate_training(s)?;
        pc::pipeline_config(s)?;
        s.bool("measure_again")?;
        // The precision is a setting of its own here: check it against the model too.
        let mut cfg = common::train_config(s, s.int("batch")? as usize)?;
        cfg.amp = amp(s)?;
        cfg.validate()
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        self.validate(s)?;
        let batch = s.int("batch")? as usize;
        let (data, mut cfg) = pc::training(s, batch)?;
        cfg.amp = amp(s)?;
        let (mut engine, mut meta) = pc::open(s, &data, sink)?;
        meta.precision = cfg.amp.label();
        let pipe = pc::pipeline_config(s)?;
        let peaks = match engine.as_gpu_mut() {
            Some(g) => {
                sink.emit(Event::Phase("measuring this adapter's peak compute and bandwidth".into()));
                Some(peaks::measure_or_cached(g)?)
            }
            None => None,
        };
        let p = peaks.map(|p| p.0);
        let (first, first_windows) = pc::profiled_watched(&mut engine, &data, &cfg, &pipe, "1 as set", p.as_ref(), sink)?;
        let mut runs = vec![first];
        let mut watched = vec![first_windows];
        let fix = fix_for(runs[0].diagnosis.bottleneck, &pipe, batch);
        if let Some((what, pipe2, batch2)) = &fix
            && s.bool("measure_again")?
            && !sink.stop_requested()
        {
            sink.emit(Event::Log(format!("applying: {what}")));
            let cfg2 = TrainConfig { batch: *batch2, ..cfg.clone() };
            let (run, windows) = pc::profiled_watched(&mut engine, &data, &cfg2, pipe2, "2 optimized", p.as_ref(), sink)?;
            runs.push(run);
            watched.push(windows);
        }
        let names: Vec<String> = runs.iter().map(|r| r.label.split(' ').next().unwrap_or("").to_string()).collect();
        let mut tables = vec![
            pc::runs_table("Runs", &runs),
            watch::peaks_table(&names.iter().zip(&runs).map(|(n, r)| (n.as_str(), &r.train.memory)).collect::<Vec<_>>()),
        ];
        let mut charts = pc::run_charts(&runs);
        charts.push(watch::memory_chart(&names.iter().zip(&watched).map(|(n, w)| (n.as_str(), w.as_slice())).collect::<Vec<_>>()));
        for r in &runs {
            let rows = kernels::table(&r.timeline);
            if !rows.is_empty() {
                tables.push(kernel_table(&format!("Kernels · run {}", r.label), &rows, p.as_ref()));
            }
        }
        if let Some(pk) = &p {
            charts.insert(0, roofline(&kernels::table(&runs[0].timeline), pk));
        }
        let mut figures = Vec::new();
        let mut report_notes = Vec::new();
        if let Some((pk, cached)) = peaks {
            let prov = if cached { Provenance::derived("an earlier measurement on this adapter (cached)") } else { Provenance::Measured };
            report_notes.push(format!("The peaks were {}.", pk.timing.describe()));
            figures.push(Figure {
                label: "peak compute (512³ matmul)".into(),
                value: pk.flops_per_s / 1e9,
                unit: "GFLOP/s".into(),
                provenance: prov.clone(),
            });
            figures.push(Figure {
                label: "peak bandwidth (32 MiB copy)".into(),
                value: pk.bytes_per_s / 1e9,
                unit: "GB/s".into(),
                provenance: prov,
            });
        }
        let mut report = Report {
            figures,
            tables,
            charts,
            verdict: verdict(&runs, fix.as_ref().map(|f| f.0.as_str())),
            stopped_early: sink.stop_requested(),
            timelines: runs.iter().map(|r| r.timeline.clone()).collect(),
            suggestion: next_step(&runs),
            ..report_for(self, s, meta)
        };
        pc::notes(&mut report, &runs, &pipe.cost);
        report.notes.extend(report_notes);
        if report.tables.iter().any(|t| t.title.starts_with("Kernels")) {
            report.notes.push("Kernel FLOPs and bytes are estimates (FLOPs from each kernel's shapes, bytes from the buffers it binds), so GFLOP/s and GB/s per kernel are derived, not counted by hardware.".into());
        }
        Ok(report)
    }
}

fn amp(s: &Settings) -> Result<AmpConfig> {
    common::amp_config(s)
}

/// The fix for the last run's bottleneck, as settings the lab applies with one click before
/// profiling again (the last run is the optimized one when `measure_again` ran).
fn next_step(runs: &[ProfiledRun]) -> Option<Suggestion> {
    let last = runs.last()?;
    let (what, p, batch) = fix_for(last.diagnosis.bottleneck, &last.pipeline, last.train.config.batch)?;
    let settings = [
        ("num_workers", p.num_workers.to_string()),
        ("prefetch_factor", p.prefetch_factor.to_string()),
        ("cache", p.cache.to_string()),
        ("pin_memory", p.pin_memory.to_string()),
        ("batch", batch.to_string()),
    ];
    Some(Suggestion {
        label: format!("Apply the fix for run {} ({what}) and profile again", last.label),
        settings: settings.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    })
}

/// The one-click optimization for a bottleneck: what it changes, the new pipeline and batch.
pub fn fix_for(b: Bottleneck, pipe: &PipelineConfig, batch: usize) -> Option<(String, PipelineConfig, usize)> {
    match b {
        Bottleneck::Input => {
            let p = PipelineConfig {
                num_workers: (pipe.num_workers * 2).max(4),
                prefetch_factor: pipe.prefetch_factor.max(2),
                cache: true,
                ..*pipe
            };
            Some((format!("more workers, prefetch and the cache ({})", p.describe()), p, batch))
        }
        Bottleneck::Transfer if !pipe.pin_memory => {
            Some(("pin_memory on (persistent input buffers)".into(), PipelineConfig { pin_memory: true, ..*pipe }, batch))
        }
        Bottleneck::Transfer | Bottleneck::Overhead | Bottleneck::Memory => {
            let b2 = (batch * 4).min(4096);
            (b2 > batch).then(|| (format!("batch {batch} → {b2}: more work per dispatch and per copy"), *pipe, b2))
        }
        // Exercise 7 profiles one device: no all-reduce to hide (exercise 6 has the knobs).
        Bottleneck::Compute | Bottleneck::Communication => None,
    }
}

fn kernel_table(title: &str, rows: &[KernelRow], p: Option<&Peaks>) -> Table {
    let est = || Provenance::derived("kernel timestamps and estimated FLOPs/bytes");
    let columns = vec![
        Column::text("kernel"),
        Column::num("count", "", 0, Provenance::Measured),
        Column::num("total", "ms", 2, Provenance::Measured),
        Column::num("mean", "µs", 1, Provenance::Measured),
        Column::num("achieved", "GFLOP/s", 2, est()),
        Column::num("achieved", "GB/s", 2, est()),
        Column::num("of peak compute", "%", 1, est()),
        Column::num("of peak bandwidth", "%", 1, est()),
        Column::text("roofline"),
    ];
    let rows = rows
        .iter()
        .map(|r| {
            vec![
                Cell::from(r.name.as_str()),
                Cell::Num(r.count as f64),
                (r.total_s * 1e3).into(),
                (r.mean_s() * 1e6).into(),
                r.gflops().into(),
                r.gbps().into(),
                p.map(|p| r.gflops() * 1e9 / p.flops_per_s * 100.0).into(),
                p.map(|p| r.gbps() * 1e9 / p.bytes_per_s * 100.0).into(),
                p.map(|p| if r.memory_bound(p) { "memory-bound" } else { "compute-bound" }).unwrap_or("—").into(),
            ]
        })
        .collect();
    Table { title: title.into(), columns, rows }
}

/// Kernels by arithmetic intensity (log x) and achieved GFLOP/s (log10 on y), under the roofs
/// made of the measured peaks.
fn roofline(rows: &[KernelRow], p: &Peaks) -> Chart {
    let mut series: Vec<Series> = rows
        .iter()
        .filter(|r| r.flops > 0.0 && r.bytes > 0.0)
        .map(|r| Series {
            name: r.name.clone(),
            points: vec![[r.intensity(), r.gflops().max(1e-6).log10()]],
            provenance: Provenance::derived("kernel timestamps and estimated FLOPs/bytes"),
        })
        .collect();
    let roof =
        (-12..=16).map(|i| 10f64.powf(i as f64 / 4.0)).map(|x| [x, ((p.bytes_per_s * x).min(p.flops_per_s) / 1e9).log10()]).collect();
    series.insert(
        0,
        Series {
            name: "roof: min(peak compute, peak bandwidth × intensity)".into(),
            points: roof,
            provenance: Provenance::derived("the measured peaks"),
        },
    );
    Chart {
        id: "roofline".into(),
        title: format!("Roofline (ridge at {:.2} FLOP/byte)", p.ridge()),
        x_label: "arithmetic intensity (FLOP/byte)".into(),
        y_label: "log10 achieved GFLOP/s".into(),
        kind: ChartKind::Line,
        log_x: true,
        series,
        markers: vec![(p.ridge(), "ridge point".into())],
    }
}

/// One profiled run, as the verdict reads it.
#[derive(Clone, Debug, PartialEq)]
struct Profiled {
    samples_per_s: f64,
    bottleneck: &'static str,
    /// The diagnosis's own sentences (checked by profile::verdict's property test).
    summary: String,
    evidence: Vec<String>,
}

impl Profiled {
    fn of(r: &ProfiledRun) -> Self {
        Profiled {
            samples_per_s: r.train.samples_per_s,
            bottleneck: r.diagnosis.bottleneck.name(),
            summary: r.diagnosis.summary.clone(),
            evidence: r.diagnosis.evidence.clone(),
        }
    }
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const GAINED: &str = "the second run's throughput was above the first's";
    pub const NOT_GAINED: &str = "the second run's throughput was not above the first's";
}

fn verdict(runs: &[ProfiledRun], fix: Option<&str>) -> Verdict {
    claims(&runs.iter().map(Profiled::of).collect::<Vec<_>>(), fix).verdict()
}

/// The first run's diagnosis, and what applying its fix changed.
fn claims(runs: &[Profiled], fix: Option<&str>) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let Some(first) = runs.first() else { return c };
    c.fact(Summary, first.summary.clone());
    for e in &first.evidence {
        c.fact(Evidence, e.clone());
    }
    match (runs.get(1), fix) {
        (Some(second), Some(fix)) => {
            let gain = second.samples_per_s / first.samples_per_s.max(1e-12);
            let up = second.samples_per_s > first.samples_per_s;
            c.one_of(
                Summary,
                vec![
                    (
                        cond::GAINED,
                        up,
                        format!("Applied it ({fix}) and measured again: {gain:.2}× the throughput; now {}.", second.bottleneck),
                    ),
                    (
                        cond::NOT_GAINED,
                        !up,
                        format!(
                            "Applied it ({fix}) and measured again: the throughput did not rise ({gain:.2}×); now {}.",
                            second.bottleneck
                        ),
                    ),
                ],
            );
            c.fact(
                Evidence,
                format!(
                    "Measured again after applying {fix}: {:.0} → {:.0} samples/s ({gain:.2}×); the second run is {}.",
                    first.samples_per_s, second.samples_per_s, second.bottleneck
                ),
            );
            for e in &second.evidence {
                c.fact(Evidence, format!("Run 2: {e}"));
            }
        }
        (None, Some(fix)) => {
            c.fact(Summary, format!("(Not applied: {fix}.)"));
        }
        (_, None) => {
            c.fact(Summary, "No one-click change applies here; the next step is the chapter's advice above.");
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run() -> impl Strategy<Value = Profiled> {
        (1.0f64..1e5).prop_map(|samples_per_s| Profiled {
            samples_per_s,
            bottleneck: "input-bound",
            summary: "This run is input-bound.".into(),
            evidence: vec!["e".into()],
        })
    }

    proptest! {
        /// A fix that helped or did not, applied or not: every sentence printed is true.
        #[test]
        fn every_printed_claim_holds(runs in proptest::collection::vec(run(), 0..3), fix in proptest::option::of(Just("more workers"))) {
            let claims = claims(&runs, fix);
            let up = || Some(runs.get(1)?.samples_per_s > runs.first()?.samples_per_s);
            claims
                .audit(|c| match c.condition {
                    cond::GAINED => up(),
                    cond::NOT_GAINED => up().map(|u| !u),
                    _ => None,
                })
                .map_err(TestCaseError::fail)?;
            prop_assert_eq!(claims.has_summary(), !runs.is_empty());
        }
    }
}
