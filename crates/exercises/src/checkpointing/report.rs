//! Exercise 5's report: the three loss curves, the comparison with the reference, the
//! checkpoints written, and the steps-lost / write-cost trade-off, all from this run.

use super::verdict::{Outcome, summary};
use super::{CheckpointLab, Runs};
use crate::common::report_for;
use crate::common::{self, plural};
use crate::settings::Settings;
use crate::settings::checkpointing::Config;
use Part::Evidence;
use gpulab_systems::report::{Cell, Chart, Column, Figure, Metadata, Part, Provenance, Report, Series, Table};
use gpulab_systems::train::TrainConfig;
use std::collections::BTreeMap;

/// Relative loss difference accepted as "equal within f32 tolerance" off the CPU backend.
pub(super) const GPU_TOLERANCE: f64 = 1e-4;

/// How the resumed (and crashed) losses compare with the reference, step by step.
pub struct Comparison {
    pub steps: usize,
    pub identical: bool,
    pub first_difference: Option<u64>,
    pub max_abs: f64,
    pub max_rel: f64,
}

pub fn compare(reference: &[(u64, f64)], runs: &[&[(u64, f64)]]) -> Comparison {
    let want: BTreeMap<u64, f64> = reference.iter().copied().collect();
    let mut c = Comparison { steps: 0, identical: true, first_difference: None, max_abs: 0.0, max_rel: 0.0 };
    for (step, loss) in runs.iter().flat_map(|r| r.iter()) {
        let Some(w) = want.get(step) else { continue };
        c.steps += 1;
        if w.to_bits() != loss.to_bits() {
            c.identical = false;
            c.first_difference = Some(c.first_difference.map_or(*step, |f| f.min(*step)));
        }
        let d = (w - loss).abs();
        c.max_abs = c.max_abs.max(d);
        c.max_rel = c.max_rel.max(d / w.abs().max(1e-12));
    }
    c
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (n, s) = v.fold((0usize, 0.0), |(n, s), x| (n + 1, s + x));
    (n > 0).then(|| s / n as f64)
}

pub fn build(ex: &CheckpointLab, s: &Settings, c: &Config, cfg: &TrainConfig, runs: Runs, stopped_early: bool) -> Report {
    let mut meta = Metadata::new(cfg.seed);
    meta.dataset = c.training.dataset.clone();
    meta.hyperparameters = s.to_map();
    let on_cpu = c.backend.to_string() == "cpu";

    let resumed = runs.resumed.as_ref();
    let resumed_losses = resumed.map(|r| r.losses.as_slice()).unwrap_or(&[]);
    let cmp = compare(&runs.reference.losses, &[&runs.crashed.losses, resumed_losses]);
    let resume_step = resumed.and_then(|r| r.resumed_from.as_ref().map(|x| x.1)).unwrap_or(0);
    let last_before_kill = runs.crashed.last_step();
    let steps_lost = last_before_kill.saturating_sub(resume_step);
    let saves: Vec<_> = runs.crashed.saves.iter().chain(resumed.map(|r| r.saves.as_slice()).unwrap_or(&[])).collect();
    let mean_write = mean(saves.iter().map(|x| x.write_s));
    let mean_bytes = mean(saves.iter().map(|x| x.bytes as f64));
    let ref_wall = runs.reference.finished.map(|f| f.1);
    let total = runs.reference.total_steps;
    let step_s = ref_wall.map(|w| w / total.max(1) as f64);

    // Live and final loss chart: the three runs overlaid, with the crash and resume marked.
    let series = |name: &str, l: &[(u64, f64)]| Series {
        name: name.into(),
        points: l.iter().map(|(s, y)| [*s as f64, *y]).collect(),
        provenance: Provenance::Measured,
    };
    let mut loss = Chart::line("loss", "Training loss per step", "step", "loss");
    loss.series.push(series("reference (uninterrupted)", &runs.reference.losses));
    loss.series.push(series("crashed run", &runs.crashed.losses));
    if let Some(r) = resumed {
        loss.series.push(series("resumed run", &r.losses));
        loss.markers.push((resume_step as f64, format!("resumed from step {resume_step}")));
    }
    if let Some(k) = runs.crashed.killed_after {
        loss.markers.push((k as f64, format!("SIGKILL after step {k}")));
    }

    // The trade-off: per interval, what writing costs over the whole run and what this crash loses.
    let intervals: Vec<u64> = {
        let mut v = c.intervals.clone();
        if runs.every > 0 && !v.contains(&runs.every) {
            v.push(runs.every);
        }
        v.sort_unstable();
        v
    };
    let derived = |from: &str| Provenance::derived(from);
    let columns = vec![
        Column::num("interval", "steps", 0, Provenance::Measured),
        Column::num("checkpoints per run", "", 0, derived("run length ÷ interval")),
        Column::num("time writing", "s", 3, derived("checkpoints × measured mean write time")),
        Column::num("share of training time", "%", 1, derived("time writing ÷ (measured reference training time + time writing)")),
        Column::num("bytes written", "MiB", 2, derived("checkpoints × measured checkpoint size")),
        Column::num(
            "steps lost by this crash",
            "",
            0,
            derived("crash step − last checkpoint step at this interval; at this run's interval, crash step − the step it resumed from"),
        ),
        Column::num("time lost", "s", 3, derived("steps lost × measured mean step time")),
    ];
    let crash = last_before_kill;
    // At the run's own interval the table says what happened (the headline's steps lost: a save
    // due at the crash step may not have landed); at the others, what the same crash would lose.
    let lost_at = |t: u64| if t == runs.every && resumed.is_some() { steps_lost } else { crash - (crash / t) * t };
    let rows: Vec<Vec<Cell>> = intervals
        .iter()
        .map(|&t| {
            let n = total / t;
            let lost = lost_at(t);
            let writing = mean_write.map(|w| w * n as f64);
            vec![
                Cell::Num(t as f64),
                Cell::Num(n as f64),
                writing.into(),
                writing.zip(ref_wall).map(|(w, r)| 100.0 * w / (r + w).max(1e-12)).into(),
                mean_bytes.map(|b| common::mib((b * n as f64) as u64)).into(),
                Cell::Num(lost as f64),
                step_s.map(|st| st * lost as f64).into(),
            ]
        })
        .collect();
    let tradeoff = Table { title: "Steps lost vs checkpoint interval".into(), columns, rows };
    let mut cost =
        Chart::line("interval_cost", "Cost of an interval: writing vs work lost", "checkpoint interval (steps)", "seconds").log_x();
    if let (Some(w), Some(st)) = (mean_write, step_s) {
        cost.series.push(Series {
            name: "time writing per run".into(),
            points: intervals.iter().map(|&t| [t as f64, w * (total / t) as f64]).collect(),
            provenance: derived("measured write time × checkpoints per run"),
        });
        cost.series.push(Series {
            name: "time lost by this crash".into(),
            points: intervals.iter().map(|&t| [t as f64, st * lost_at(t) as f64]).collect(),
            provenance: derived("measured step time × steps lost"),
        });
        cost.series.push(Series {
            name: "expected loss per crash (interval ÷ 2)".into(),
            points: intervals.iter().map(|&t| [t as f64, st * t as f64 / 2.0]).collect(),
            provenance: derived("measured step time × interval ÷ 2"),
        });
    }
    if runs.every > 0 {
        cost.markers.push((runs.every as f64, format!("this run: every {}", gpulab_core::format::plural(runs.every, "step"))));
    }

    let written = Table {
        title: "Checkpoints written".into(),
        columns: vec![
            Column::text("process"),
            Column::num("step", "", 0, Provenance::Measured),
            Column::num("size", "bytes", 0, Provenance::Measured),
            Column::num("write time", "ms", 2, Provenance::Measured),
        ],
        rows: runs
            .crashed
            .saves
            .iter()
            .map(|x| ("crashed", x))
            .chain(resumed.map(|r| r.saves.iter().map(|x| ("resumed", x)).collect::<Vec<_>>()).unwrap_or_default())
            .map(|(p, x)| vec![p.into(), Cell::Num(x.step as f64), Cell::Num(x.bytes as f64), Cell::Num(x.write_s * 1e3)])
            .collect(),
    };
    let mut resume_rows: Vec<Vec<Cell>> = Vec::new();
    if let Some((file, what)) = &runs.damage {
        resume_rows.push(vec!["corrupted".into(), file.clone().into(), what.clone().into()]);
    }
    for (path, kind, reason) in resumed.map(|r| r.skipped.as_slice()).unwrap_or(&[]) {
        resume_rows.push(vec![format!("skipped: {kind}").into(), path.clone().into(), reason.clone().into()]);
    }
    match resumed.and_then(|r| r.resumed_from.clone()) {
        Some((path, step)) => resume_rows.push(vec!["resumed from".into(), path.into(), format!("step {step}").into()]),
        None if resumed.is_some() => resume_rows.push(vec!["started over".into(), "".into(), "no checkpoint validated".into()]),
        None => {}
    }
    let resume_table = Table {
        title: "Resume".into(),
        columns: vec![Column::text("what"), Column::text("file"), Column::text("detail")],
        rows: resume_rows,
    };

    let mut figures = vec![
        Figure {
            label: "crash: last step before SIGKILL landed".into(),
            value: crash as f64,
            unit: String::new(),
            provenance: Provenance::Measured,
        },
        Figure { label: "resumed from step".into(), value: resume_step as f64, unit: String::new(), provenance: Provenance::Measured },
        Figure {
            label: "steps lost (redone after resuming)".into(),
            value: steps_lost as f64,
            unit: "steps".into(),
            provenance: Provenance::derived("last step reported before the kill − resumed step"),
        },
        Figure {
            label: "loss steps compared with the reference".into(),
            value: cmp.steps as f64,
            unit: "steps".into(),
            provenance: Provenance::Measured,
        },
        Figure {
            label: "max absolute loss difference vs reference".into(),
            value: cmp.max_abs,
            unit: "".into(),
            provenance: Provenance::Measured,
        },
    ];
    if let Some(b) = mean_bytes {
        figures.push(Figure { label: "checkpoint size".into(), value: b, unit: "bytes".into(), provenance: Provenance::Measured });
    }
    if let Some(w) = mean_write {
        figures.push(Figure {
            label: "mean checkpoint write (encode, write, fsync, rename, fsync folder)".into(),
            value: w * 1e3,
            unit: "ms".into(),
            provenance: Provenance::Measured,
        });
    }
    if let (Some(w), Some(b)) = (mean_write, mean_bytes) {
        figures.push(Figure {
            label: "write throughput".into(),
            value: b / w.max(1e-12) / 1e6,
            unit: "MB/s".into(),
            provenance: Provenance::derived("size ÷ write time"),
        });
    }
    // The evidence prices the run's own interval; its share is a figure too (agreement test).
    let interval_share = match (mean_write, step_s, runs.every > 0) {
        (Some(w), Some(st), true) => Some(100.0 * w / (w + st * runs.every as f64)),
        _ => None,
    };
    if let Some(share) = interval_share {
        figures.push(Figure {
            label: "share of training time spent writing checkpoints at this run's interval".into(),
            value: share,
            unit: "%".into(),
            provenance: Provenance::derived("write time ÷ (write time + step time × interval)"),
        });
    }
    if let Some((_, max)) = runs.weights {
        figures.push(Figure {
            label: "max absolute final-weight difference vs reference".into(),
            value: max,
            unit: "".into(),
            provenance: Provenance::Measured,
        });
    }

    // The parameter count the evidence names is a figure of the report too (agreement test).
    if let Some((_, params)) = runs.reference.model.as_ref().or(resumed.and_then(|r| r.model.as_ref())) {
        figures.push(Figure {
            label: "model parameters".into(),
            value: *params as f64,
            unit: "".into(),
            provenance: Provenance::derived("the model's layer shapes"),
        });
    }
    let outcome = Outcome {
        stopped_early,
        finished: resumed.is_some_and(|r| r.finished.is_some()),
        crash,
        steps_lost,
        resumed_from: resumed.and_then(|r| r.resumed_from.as_ref().map(|x| x.1)),
        cmp: &cmp,
        weights_same: runs.weights.map(|w| w.0),
        on_cpu,
    };
    let mut v = summary(&outcome);
    let used = match outcome.resumed_from {
        Some(step) => format!("used the checkpoint at step {step}"),
        None => "found none that validated, so it started over".into(),
    };
    if let Some((model, params)) = runs.reference.model.as_ref().or(resumed.and_then(|r| r.model.as_ref())) {
        v.fact(Evidence, format!("The model: {model}, {params} parameters; each checkpoint holds every one of them with its {} state, the data loader's position and the random-number state.", optimizer_state(cfg.optimizer)));
    }
    if let Some(k) = runs.crashed.killed_after {
        v.fact(Evidence, format!(
            "SIGKILL was sent after step {k} (chosen: {}); the process reported up to step {crash} before it died, with no chance to save.",
            runs.crash_at
        ));
    }
    if let Some((file, what)) = &runs.damage {
        let skipped = resumed.map(|r| r.skipped.len()).unwrap_or(0);
        v.fact(
            Evidence,
            format!(
                "The newest checkpoint {file} was corrupted ({what}); the resume skipped {} and {used}.",
                plural(skipped, "checkpoint")
            ),
        );
    }
    for (_, kind, reason) in resumed.map(|r| r.skipped.as_slice()).unwrap_or(&[]) {
        v.fact(Evidence, format!("Skipped ({kind}): {reason}"));
    }
    // Checkpoints by epoch only (every = 0 steps) have no step interval to price here.
    if let (Some(w), Some(st), Some(share)) = (mean_write, step_s, interval_share) {
        v.fact(Evidence, format!(
            "One checkpoint took {:.3} ms to write against {:.3} ms per training step: checkpointing every {} costs about {:.1}% of training time, while a crash loses on average half an interval ({} steps).",
            w * 1e3,
            st * 1e3,
            gpulab_core::format::plural(runs.every, "step"),
            share,
            gpulab_core::format::number(runs.every as f64 / 2.0)
        ));
    }
    let unexpected = runs.reference.unexpected_lines + runs.crashed.unexpected_lines + resumed.map_or(0, |r| r.unexpected_lines);
    if unexpected > 0 {
        v.fact(Evidence, format!("{} of unexpected output from the training processes were ignored.", plural(unexpected, "line")));
    }

    meta.backends.extend(runs.reference.backend.clone());
    let mut report = Report {
        figures,
        tables: vec![resume_table, tradeoff, written],
        charts: vec![loss, cost],
        verdict: v.verdict(),
        stopped_early,
        ..report_for(ex, s, meta)
    };
    report.note_software_backends();
    report
        .notes
        .push("Training ran in separate gpulab processes; the crash is a real SIGKILL (TerminateProcess on Windows), not a flag.".into());
    report.notes.push(if runs.kept_folder {
        format!("The checkpoints are kept in {}.", runs.folder.display())
    } else {
        format!("The checkpoints were written to {} and removed afterwards; name a folder to keep them.", runs.folder.display())
    });
    report
}

/// What the optimizer keeps per parameter, in words.
fn optimizer_state(kind: gpulab_systems::nn::OptimizerKind) -> &'static str {
    match kind {
        gpulab_systems::nn::OptimizerKind::Sgd => "SGD momentum",
        gpulab_systems::nn::OptimizerKind::AdamW => "AdamW moments (exp_avg, exp_avg_sq)",
    }
}
