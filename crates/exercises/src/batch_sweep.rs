//! Exercise 2: one model trained for a fixed budget of epochs at several batch sizes. Memory by
//! category comes from the ledger; a VRAM budget makes a batch that does not fit fail like a
//! real out-of-memory, and the sweep goes on.

use super::common::{self, MEMORY_CATEGORIES, mib, peak, percent};
use super::settings::{self, Settings};
use super::sink::{Event, Sink, TrainBridge};
use super::{Exercise, Preset};
use crate::common::report_for;
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{MemCategory, prelude::*};
use gpulab_core::with_backend;
use gpulab_systems::report::{Cell, Chart, ChartKind, Column, Figure, Metadata, Provenance, Report, Series, Table, Verdict};
use gpulab_systems::train::{self, TrainReport};

pub struct BatchSweep;

/// What one batch size gave.
enum Outcome {
    Trained(Box<TrainReport>),
    OutOfMemory(String),
    Failed(String),
}

// The categories that show how memory splits; staging/other are tiny bookkeeping.
const OOM_RESPONSE: &str = "reduce the batch size, train in mixed precision (exercise 3), accumulate gradients over several smaller batches, or recompute activations (checkpointing) instead of storing them";

impl Exercise for BatchSweep {
    fn id(&self) -> &'static str {
        "batch-sweep"
    }
    fn number(&self) -> u32 {
        2
    }
    fn title(&self) -> &'static str {
        "Batch-size sweep"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../lessons/02-batch-size.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[("backend", "cpu"), ("dataset", "digits"), ("epochs", "1"), ("batch_sizes", "16,4096"), ("vram_budget_mib", "2")]
    }

    fn live_charts(&self) -> Vec<super::LiveChartSpec> {
        common::training_live_charts()
    }
    fn settings(&self) -> Settings {
        let s = common::one_backend(Settings::default())
            .add("batch_sizes", "Batch sizes", "The batch sizes to compare", settings::list(&[16, 32, 64, 128], 1, 65536))
            .add(
                "vram_budget_mib",
                "VRAM budget (MiB)",
                "Pretend the device has only this much memory (0 = no limit); a batch that does not fit fails like a real out-of-memory",
                settings::float(0.0, 0.0, 1_000_000.0),
            );
        // `batch` is swept, so its own setting is not shown.
        let mut s = common::model_setting(common::training_settings(s, "shapes", &[256, 128], 64, 3));
        s.0.retain(|x| x.key != "batch");
        super::sizing::settings(s)
    }

    fn presets(&self) -> Vec<Preset> {
        let mut p = super::sizing::presets(
            "The lesson's small model at batch 16 to 128",
            (
                "A 2048-wide MLP on 64×64 colour shapes at batch 32 to 1024: the batch sizes where a GPU's throughput keeps climbing",
                &[("batch_sizes", "32,128,512,1024"), ("epochs", "2")],
            ),
            (
                "The model sized from the backend's measured peak (cached per adapter) so the sweep's training takes about 30 s anywhere",
                &[("batch_sizes", "32,128,512"), ("target_s", "30")],
            ),
        );
        p.push(Preset::new(
            "force an out-of-memory",
            "A 6 MiB memory budget (simulated by gpulab's ledger, the same on every backend): batch 16 and 256 fit, batch 8192 does not",
            &[("batch_sizes", "16,256,8192"), ("vram_budget_mib", "6"), ("epochs", "1")],
        ));
        p
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        s.one_device("backend")?;
        common::dataset_spec(s)?;
        for b in s.list("batch_sizes")? {
            common::train_config(s, b as usize)?;
        }
        super::sizing::validate(s)
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        self.validate(s)?;
        let device = s.one_device("backend")?;
        let budget_mib = s.float("vram_budget_mib")?;
        let budget = (budget_mib > 0.0).then_some((budget_mib * (1u64 << 20) as f64) as u64);
        let data = common::load_dataset(s)?;
        let sizes = s.list("batch_sizes")?;
        let (resolved, sizing) = super::sizing::resolve(s, &device, &data, sizes.len() as f64, 0.0, sink)?;
        let s = &resolved;

        sink.emit(Event::Phase(format!("opening {device}")));
        let mut engine = device.open(budget)?;
        let info = with_backend!(&mut engine, b => b.info());
        let mut meta = Metadata::new(s.int("seed")? as u64);
        meta.dataset = format!("{} — {}", data.name, data.source);
        meta.hyperparameters = s.to_map();
        meta.hyperparameters.insert("architecture".into(), common::architecture(s, &data)?);
        meta.backends.push(info.clone());

        let mut outcomes: Vec<(u64, Outcome)> = Vec::new();
        for &batch in &sizes {
            if sink.stop_requested() {
                break;
            }
            sink.emit(Event::Phase(format!("batch {batch}")));
            let cfg = common::train_config(s, batch as usize)?;
            let result = with_backend!(&mut engine, b => {
                b.reset_memory_peaks();
                let mut bridge = TrainBridge { sink: &mut *sink, series: format!("batch {batch}"), total_steps: 0 };
                train::train(b, &data, &cfg, &mut bridge)
            });
            let outcome = match result {
                Ok(r) => Outcome::Trained(Box::new(r)),
                Err(e @ (Error::OutOfMemory { .. } | Error::DeviceOutOfMemory { .. })) => Outcome::OutOfMemory(e.to_string()),
                Err(e) => Outcome::Failed(e.to_string()),
            };
            if let Outcome::OutOfMemory(m) | Outcome::Failed(m) = &outcome {
                sink.emit(Event::Log(format!("batch {batch}: {m}")));
            }
            outcomes.push((batch, outcome));
            sink.emit(Event::Table(results_table(&outcomes)));
        }
        let stopped_early = sink.stop_requested();
        let mut report = build_report(self, s, meta, &outcomes, budget, stopped_early);
        super::sizing::annotate(sizing.as_ref(), &mut report);
        Ok(report)
    }
}

fn results_table(outcomes: &[(u64, Outcome)]) -> Table {
    let ledger = || Provenance::derived("gpulab's allocation ledger (peak bytes)");
    let mut columns = vec![Column::num("batch", "", 0, Provenance::Measured), Column::text("status")];
    columns.extend(MEMORY_CATEGORIES.iter().map(|c| Column::num(c.name(), "KiB", 1, ledger())));
    columns.extend([
        Column::num("total peak", "MiB", 2, ledger()),
        Column::num("throughput", "samples/s", 0, Provenance::Measured),
        Column::num("epoch time", "s", 3, Provenance::Measured),
        Column::num("steps", "", 0, Provenance::Measured),
        Column::num("validation accuracy", "%", 2, Provenance::Measured),
    ]);
    let rows = outcomes
        .iter()
        .map(|(batch, o)| {
            let mut row = vec![Cell::Num(*batch as f64)];
            match o {
                Outcome::Trained(r) => {
                    row.push(if r.stopped_early { "stopped" } else { "ok" }.into());
                    row.extend(MEMORY_CATEGORIES.iter().map(|c| Cell::Num(peak(&r.memory, *c) as f64 / 1024.0)));
                    let epoch_s = r.epochs.iter().map(|e| e.train_wall_s).sum::<f64>() / r.epochs.len().max(1) as f64;
                    row.extend([
                        mib(r.memory.total_peak).into(),
                        r.samples_per_s.into(),
                        epoch_s.into(),
                        Cell::Num(r.steps as f64),
                        (r.final_val_accuracy * 100.0).into(),
                    ]);
                }
                Outcome::OutOfMemory(m) => {
                    row.push(format!("OUT OF MEMORY: {m}").into());
                    row.extend(std::iter::repeat_n(Cell::Empty, MEMORY_CATEGORIES.len() + 5));
                }
                Outcome::Failed(m) => {
                    row.push(format!("failed: {m}").into());
                    row.extend(std::iter::repeat_n(Cell::Empty, MEMORY_CATEGORIES.len() + 5));
                }
            }
            row
        })
        .collect();
    Table { title: "Batch sizes".into(), columns, rows }
}

fn build_report(
    ex: &BatchSweep,
    s: &Settings,
    meta: Metadata,
    outcomes: &[(u64, Outcome)],
    budget: Option<u64>,
    stopped_early: bool,
) -> Report {
    let trained: Vec<(u64, &TrainReport)> = outcomes
        .iter()
        .filter_map(|(b, o)| match o {
            Outcome::Trained(r) => Some((*b, r.as_ref())),
            _ => None,
        })
        .collect();
    let line = |id: &str, title: &str, y: &str| Chart {
        id: id.into(),
        title: title.into(),
        x_label: "batch size".into(),
        y_label: y.into(),
        kind: ChartKind::Line,
        log_x: true,
        series: vec![],
        markers: vec![],
    };
    let mut throughput = line("throughput", "Throughput", "samples/s");
    throughput.series.push(Series {
        name: "throughput".into(),
        points: trained.iter().map(|(b, r)| [*b as f64, r.samples_per_s]).collect(),
        provenance: Provenance::Measured,
    });
    let mut accuracy = line("accuracy_by_batch", "Validation accuracy after the epoch budget", "accuracy (%)");
    accuracy.series.push(Series {
        name: "validation accuracy".into(),
        points: trained.iter().map(|(b, r)| [*b as f64, r.final_val_accuracy * 100.0]).collect(),
        provenance: Provenance::Measured,
    });
    let mut memory = Chart { kind: ChartKind::Bars, log_x: false, ..line("memory", "Peak memory by category", "KiB") };
    for c in MEMORY_CATEGORIES {
        memory.series.push(Series {
            name: c.name().into(),
            points: trained.iter().map(|(b, r)| [*b as f64, peak(&r.memory, c) as f64 / 1024.0]).collect(),
            provenance: Provenance::derived("gpulab's allocation ledger"),
        });
    }
    if let Some(b) = budget {
        memory.markers.push((0.0, format!("budget {:.2} MiB", mib(b))));
    }

    let mut v = Verdict::default();
    let mut summary = Vec::new();
    let mut figures = Vec::new();
    if let Some((best_b, best)) = trained.iter().max_by(|a, b| a.1.samples_per_s.total_cmp(&b.1.samples_per_s)) {
        summary.push(format!("Batch {best_b} gave the highest throughput, {:.0} samples/s.", best.samples_per_s));
        figures.push(Figure {
            label: format!("highest throughput (batch {best_b})"),
            value: best.samples_per_s,
            unit: "samples/s".into(),
            provenance: Provenance::Measured,
        });
        if let (Some((half_b, lo)), Some((hi_b, hi))) = (trained.first(), trained.last())
            && half_b != hi_b
        {
            let ratio = hi.samples_per_s / lo.samples_per_s.max(1e-12);
            v.evidence.push(format!("Throughput went from {:.0} samples/s at batch {half_b} to {:.0} at batch {hi_b} ({ratio:.2}×): bigger batches spread each step's fixed costs over more samples.", lo.samples_per_s, hi.samples_per_s));
            let d_acc = (hi.final_val_accuracy - lo.final_val_accuracy) * 100.0;
            if d_acc < -1.0 {
                summary.push(format!(
                    "But accuracy after the same {} fell from {} to {}: batch {hi_b} took only {} steps against {} — fewer, larger steps learn less per epoch at the same learning rate.",
                    common::plural(lo.epochs.len(), "epoch"),
                    percent(lo.final_val_accuracy),
                    percent(hi.final_val_accuracy),
                    hi.steps,
                    lo.steps
                ));
            } else {
                v.evidence.push(format!("Accuracy after the epoch budget moved by {d_acc:+.2} points between batch {half_b} and {hi_b}."));
            }
            let fixed = |r: &TrainReport| {
                peak(&r.memory, MemCategory::Parameters)
                    + peak(&r.memory, MemCategory::Gradients)
                    + peak(&r.memory, MemCategory::OptimizerState)
            };
            let varying = |r: &TrainReport| peak(&r.memory, MemCategory::Activations) + peak(&r.memory, MemCategory::Inputs);
            let per_sample = (varying(hi) as f64 - varying(lo) as f64) / (*hi_b as f64 - *half_b as f64);
            v.evidence.push(format!(
                "Parameters, gradients and optimizer state stayed near {:.1} KiB at every batch size; activations and inputs grew by about {:.0} bytes per sample in the batch.",
                fixed(hi) as f64 / 1024.0,
                per_sample
            ));
        }
    }
    for (b, o) in outcomes {
        if let Outcome::OutOfMemory(m) = o {
            summary
                .push(format!("Batch {b} did not fit{}.", budget.map(|x| format!(" in the {:.2} MiB budget", mib(x))).unwrap_or_default()));
            v.evidence.push(format!("Batch {b}: {m}"));
        }
    }
    if outcomes.iter().any(|(_, o)| matches!(o, Outcome::OutOfMemory(_))) {
        v.evidence.push(format!("The systematic response to an out-of-memory: {OOM_RESPONSE}."));
    }
    if summary.is_empty() {
        summary.push("No batch size finished; see the status column.".into());
    }
    v.summary = summary.join(" ");

    let mut report = Report {
        figures,
        tables: vec![results_table(outcomes)],
        charts: vec![throughput, accuracy, memory],
        verdict: v,
        stopped_early,
        ..report_for(ex, s, meta)
    };
    report.note_software_backends();
    if budget.is_some() {
        report.notes.push("The VRAM budget is simulated: gpulab's ledger refuses allocations beyond it, as a smaller GPU would.".into());
    }
    report
}
