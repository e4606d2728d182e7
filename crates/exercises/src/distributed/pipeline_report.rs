//! Exercise 6's pipeline-parallel part: the sweep over micro-batch counts (run on CPU stages),
//! its table, the bubble chart (measured against GPipe's theory), the stage timelines and a
//! verdict sentence computed from the numbers.

use crate::settings::distributed::Config;
use crate::sink::{Event, Sink};
use gpulab_core::error::Result;
use gpulab_systems::data::Dataset;
use gpulab_systems::parallel::pipeline::{PipeConfig, PipeReport, train_pipeline, unsupported};
use gpulab_systems::report::{Cell, Chart, Claims, Column, Provenance, Report, Series, Table};

/// The runs: one stage (the baseline), then `pipeline_stages` stages for each micro-batch
/// count. Off when `pipeline_stages` is 0.
pub fn sweep(c: &Config, data: &Dataset, sink: &mut dyn Sink) -> Result<Vec<PipeReport>> {
    let stages = c.pipeline_stages as usize;
    if stages == 0 {
        return Ok(Vec::new());
    }
    if let Some(why) = skipped(c)? {
        sink.emit(Event::Log(why));
        return Ok(Vec::new());
    }
    let cfg = c.training.train_config(c.training.batch()?)?;
    let mut plans = vec![(1, 1)];
    plans.extend(c.micro_batches.iter().map(|&m| (stages, m as usize)));
    let mut out = Vec::new();
    for (n, m) in plans {
        if sink.stop_requested() {
            break;
        }
        sink.emit(Event::Phase(format!(
            "pipeline: {n} CPU stage{} × 1 thread, {m} micro-batch{}",
            if n == 1 { "" } else { "s" },
            if m == 1 { "" } else { "es" }
        )));
        let run = train_pipeline(data, &cfg, &PipeConfig { stages: n, micro_batches: m, max_steps: None, timeline_steps: 3 })?;
        if n > 1 {
            sink.emit(Event::Timeline(Box::new(run.timeline.clone())));
        }
        out.push(run);
        sink.emit(Event::Table(table(&out)));
    }
    Ok(out)
}

/// Why the pipeline runs are left out of a run whose data-parallel part trains a model or
/// precision the stages cannot (they train the fp32 MLP), as the report's note says.
pub fn skipped(c: &Config) -> Result<Option<String>> {
    if c.pipeline_stages == 0 {
        return Ok(None);
    }
    let cfg = c.training.train_config(c.training.batch()?)?;
    Ok(unsupported(&cfg).map(|why| format!("Pipeline parallel was not run: {why}.")))
}

/// Settings the sweep refuses, checked before anything runs.
pub fn validate(c: &Config) -> Result<()> {
    let stages = c.pipeline_stages as usize;
    if stages == 0 || skipped(c)?.is_some() {
        return Ok(());
    }
    let cfg = c.training.train_config(c.training.batch()?)?;
    for &m in &c.micro_batches {
        PipeConfig { stages, micro_batches: m as usize, max_steps: None, timeline_steps: 0 }.validate(cfg.hidden.len() + 1, cfg.batch)?;
    }
    Ok(())
}

const CLOCKS: &str = "each stage's clock readings: idle / (stages × wall time)";

fn baseline(runs: &[PipeReport]) -> Option<&PipeReport> {
    runs.iter().find(|r| r.stages == 1)
}

pub fn table(runs: &[PipeReport]) -> Table {
    let columns = vec![
        Column::num("stages", "", 0, Provenance::Measured),
        Column::num("micro-batches M", "", 0, Provenance::Measured),
        Column::num("micro-batch", "rows", 0, Provenance::Measured),
        Column::num("steps", "", 0, Provenance::Measured),
        Column::num("wall time", "s", 3, Provenance::Measured),
        Column::num("throughput", "samples/s", 0, Provenance::Measured),
        Column::num("measured bubble", "%", 1, Provenance::derived(CLOCKS)),
        Column::num("theoretical bubble", "%", 1, Provenance::derived("(N−1)/(M+N−1), equal stages")),
        Column::num("speed-up vs 1 stage", "×", 2, Provenance::derived("throughput over one stage's")),
        Column::num("busiest stage's multiply-adds", "%", 1, Provenance::derived("the layer widths")),
    ];
    let base = baseline(runs).map(|b| b.samples_per_s);
    let rows = runs
        .iter()
        .map(|r| {
            vec![
                Cell::Num(r.stages as f64),
                Cell::Num(r.micro_batches as f64),
                Cell::Num((r.global_batch / r.micro_batches) as f64),
                Cell::Num(r.steps as f64),
                r.train_wall_s.into(),
                r.samples_per_s.into(),
                (r.bubble * 100.0).into(),
                (r.theoretical_bubble * 100.0).into(),
                base.map(|b| r.samples_per_s / b.max(1e-12)).into(),
                (r.stage_cost_share.iter().copied().fold(0.0, f64::max) * 100.0).into(),
            ]
        })
        .collect();
    Table { title: "Pipeline parallel (CPU stages, 1 thread each)".into(), columns, rows }
}

fn chart(runs: &[PipeReport]) -> Chart {
    let piped: Vec<&PipeReport> = runs.iter().filter(|r| r.stages > 1).collect();
    let series = |name: &str, f: fn(&PipeReport) -> f64, p: Provenance| Series {
        name: name.into(),
        points: piped.iter().map(|r| [r.micro_batches as f64, f(r) * 100.0]).collect(),
        provenance: p,
    };
    Chart::line("pipeline_bubble", "Pipeline bubble against micro-batches", "micro-batches M", "bubble (% of stage time idle)")
        .log_x()
        .with_series(vec![
            series("measured", |r| r.bubble, Provenance::derived(CLOCKS)),
            series("theory (N−1)/(M+N−1)", |r| r.theoretical_bubble, Provenance::derived("GPipe's formula, equal stages")),
        ])
}

/// One pipeline run, as the verdict reads it.
#[derive(Clone, Debug, PartialEq)]
struct PipeFigures {
    stages: usize,
    micro_batches: usize,
    samples_per_s: f64,
    bubble: f64,
    theoretical_bubble: f64,
    /// The busiest stage's share of the multiply-adds.
    busiest: f64,
}

impl PipeFigures {
    fn of(r: &PipeReport) -> Self {
        PipeFigures {
            stages: r.stages,
            micro_batches: r.micro_batches,
            samples_per_s: r.samples_per_s,
            bubble: r.bubble,
            theoretical_bubble: r.theoretical_bubble,
            busiest: r.stage_cost_share.iter().copied().fold(0.0, f64::max),
        }
    }
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const UNEVEN_ABOVE: &str = "at the most micro-batches, uneven stages and a measured bubble above the formula's";
    pub const UNEVEN_WITHIN: &str = "at the most micro-batches, uneven stages and a measured bubble not above the formula's";
    pub const BUBBLE_ROSE: &str = "the measured bubble at the most micro-batches was above the one at the fewest";
}

/// The verdict's sentences: how the bubble shrank with M and what the uneven stages cost.
fn claims(runs: &[PipeFigures]) -> Claims {
    use gpulab_systems::report::Part::Evidence;
    let mut c = Claims::new();
    let piped: Vec<&PipeFigures> = runs.iter().filter(|r| r.stages > 1).collect();
    let (Some(lo), Some(hi)) = (piped.iter().min_by_key(|r| r.micro_batches), piped.iter().max_by_key(|r| r.micro_batches)) else {
        return c;
    };
    c.fact(
        Evidence,
        format!(
            "Pipeline over {} stages: the measured bubble went from {:.0}% at M={} (theory {:.0}%) to {:.0}% at M={} (theory {:.0}%).",
            hi.stages,
            lo.bubble * 100.0,
            lo.micro_batches,
            lo.theoretical_bubble * 100.0,
            hi.bubble * 100.0,
            hi.micro_batches,
            hi.theoretical_bubble * 100.0
        ),
    );
    // GPipe's formula shrinks the bubble as M grows; a measured bubble that grew instead is
    // explained, not left beside the lesson's "more micro-batches mean less waste".
    c.claim(
        Evidence,
        cond::BUBBLE_ROSE,
        hi.micro_batches > lo.micro_batches && hi.bubble > lo.bubble,
        format!(
            "Unlike the formula, the measured bubble grew with M: the formula counts no cost per hand-off, but here each of the {} micro-batches is {}× less work while a hand-off between stages costs the same, so the hand-offs likely idle the stages more.",
            hi.micro_batches,
            hi.micro_batches / lo.micro_batches.max(1)
        ),
    );
    let uneven = hi.busiest > 1.0 / hi.stages as f64 + 0.1;
    let holds = format!("The busiest stage holds {:.0}% of the multiply-adds", hi.busiest * 100.0);
    c.one_of(
        Evidence,
        vec![
            (
                cond::UNEVEN_ABOVE,
                uneven && hi.bubble > hi.theoretical_bubble,
                format!("{holds}, so the others wait for it beyond the formula's equal-stage bubble."),
            ),
            (
                cond::UNEVEN_WITHIN,
                uneven && hi.bubble <= hi.theoretical_bubble,
                format!("{holds}, yet the measured bubble stayed within the formula's."),
            ),
        ],
    );
    if let (Some(b), Some(best)) =
        (runs.iter().find(|r| r.stages == 1), piped.iter().max_by(|a, c| a.samples_per_s.total_cmp(&c.samples_per_s)))
    {
        c.fact(
            Evidence,
            format!(
                "The fastest pipelined run (M={}) trained at {:.2}× one stage's throughput.",
                best.micro_batches,
                best.samples_per_s / b.samples_per_s.max(1e-12)
            ),
        );
    }
    c
}

/// The verdict's evidence lines about the pipeline (none if the sweep pipelined nothing).
fn evidence(runs: &[PipeReport]) -> Vec<String> {
    claims(&runs.iter().map(PipeFigures::of).collect::<Vec<_>>()).verdict().evidence
}

/// Adds the sweep's table, chart, timelines and verdict sentence to the report.
pub fn add(report: &mut Report, runs: &[PipeReport]) {
    if runs.is_empty() {
        return;
    }
    report.tables.push(table(runs));
    report.charts.push(chart(runs));
    report.timelines.extend(runs.iter().filter(|r| r.stages > 1).map(|r| r.timeline.clone()));
    report.verdict.evidence.extend(evidence(runs));
    report.notes.push("Pipeline parallel runs on CPU stages of one thread each whatever `kind` says; its bubble is every stage's idle time over stages × wall time, from real clock readings.".into());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run() -> impl Strategy<Value = PipeFigures> {
        (1usize..4, 1usize..9, 1.0f64..1e4, 0.0f64..1.0, 0.0f64..1.0, 0.0f64..1.0).prop_map(
            |(stages, micro_batches, samples_per_s, bubble, theoretical_bubble, busiest)| PipeFigures {
                stages,
                micro_batches,
                samples_per_s,
                bubble,
                theoretical_bubble,
                busiest,
            },
        )
    }

    proptest! {
        /// Even or uneven stages, a bubble above or below the formula's: every sentence printed
        /// is true of the numbers.
        #[test]
        fn every_printed_claim_holds(runs in proptest::collection::vec(run(), 0..5)) {
            let claims = claims(&runs);
            let hi = runs.iter().filter(|r| r.stages > 1).max_by_key(|r| r.micro_batches);
            let uneven = || hi.map(|h| h.busiest > 1.0 / h.stages as f64 + 0.1);
            claims
                .audit(|c| match c.condition {
                    cond::UNEVEN_ABOVE => Some(uneven()? && hi?.bubble > hi?.theoretical_bubble),
                    cond::UNEVEN_WITHIN => Some(uneven()? && hi?.bubble <= hi?.theoretical_bubble),
                    cond::BUBBLE_ROSE => {
                        let lo = runs.iter().filter(|r| r.stages > 1).min_by_key(|r| r.micro_batches)?;
                        Some(hi?.micro_batches > lo.micro_batches && hi?.bubble > lo.bubble)
                    }
                    _ => None,
                })
                .map_err(TestCaseError::fail)?;
            prop_assert_eq!(claims.printed().next().is_some(), hi.is_some());
        }
    }
}
