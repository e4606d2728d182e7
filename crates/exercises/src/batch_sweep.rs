//! Exercise 2: one model trained for a fixed budget of epochs at several batch sizes. Memory by
//! category comes from the ledger; a VRAM budget makes a batch that does not fit fail like a
//! real out-of-memory, and the sweep goes on.

use super::common::{self, MEMORY_CATEGORIES, mib, peak, percent};
use super::oom_ladder;
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink, TrainBridge};
use super::{Exercise, Preset};
use crate::common::report_for;
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{MemCategory, prelude::*};
use gpulab_core::with_backend;
use gpulab_systems::report::{Cell, Chart, ChartKind, Claims, Column, Figure, Metadata, Provenance, Report, Series, Table};
use gpulab_systems::train::{self, TrainReport};

pub struct BatchSweep;

/// What one batch size gave.
enum Outcome {
    Trained(Box<TrainReport>),
    OutOfMemory(String),
    Failed(String),
}

// The categories that show how memory splits; staging/other are tiny bookkeeping.
const OOM_RESPONSE: &str = "a smaller batch (batch_sizes), 16-bit training (precision=fp16 or bf16; exercise 3), gradient accumulation over micro-batches (accumulate=N, N dividing the batch), or activation recomputation (recompute=true) — ladder=true tries each on the largest batch that did not fit";

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
            )
            .add(
                "ladder",
                "Out-of-memory ladder",
                "After the sweep, retry the largest batch that ran out of memory with each remedy: a smaller batch, gradient accumulation, activation recomputation, 16-bit, and all three",
                Value::Bool(false),
            )
            .add(
                "ladder_split",
                "Ladder split",
                "How many times smaller the ladder's smaller batch is, and how many micro-batches its accumulation runs",
                settings::int(8, 2, 1024),
            );
        // `batch` is swept, so its own setting is not shown.
        let s = common::memory_settings(common::precision_setting(common::training_settings(s, "shapes", &[256, 128], 64, 3)));
        let mut s = common::model_setting(s);
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
            "An 8.5 MiB memory budget (simulated by gpulab's ledger, the same on every backend) and three hidden layers of 256: batch 16 and 256 fit, batch 1024 does not — then the ladder retries it 8× smaller, in 8 accumulated micro-batches, with recomputed activations, in 16 bits, and with all three",
            &[
                ("batch_sizes", "16,256,1024"),
                ("hidden", "256,256,256"),
                ("vram_budget_mib", "8.5"),
                ("epochs", "1"),
                ("ladder", "true"),
                ("ladder_split", "8"),
            ],
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
                let mut bridge = TrainBridge::new(&mut *sink, format!("batch {batch}"));
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
        let failed = outcomes.iter().filter(|(_, o)| matches!(o, Outcome::OutOfMemory(_))).map(|(b, _)| *b).max();
        let ladder = match failed {
            Some(batch) if s.bool("ladder")? && !sink.stop_requested() => {
                Some((batch, oom_ladder::run(s, &mut engine, &data, batch, sink)?))
            }
            _ => None,
        };
        let stopped_early = sink.stop_requested();
        let mut report = build_report(self, s, meta, &outcomes, budget, stopped_early, ladder.as_ref());
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
    ladder: Option<&(u64, Vec<oom_ladder::Rung>)>,
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

    let mut figures = Vec::new();
    if let Some((best_b, best)) = trained.iter().max_by(|a, b| a.1.samples_per_s.total_cmp(&b.1.samples_per_s)) {
        figures.push(Figure {
            label: format!("highest throughput (batch {best_b})"),
            value: best.samples_per_s,
            unit: "samples/s".into(),
            provenance: Provenance::Measured,
        });
    }
    let numbers: Vec<BatchFigures> = trained.iter().map(|(b, r)| BatchFigures::of(*b, r)).collect();
    let oom: Vec<(u64, String)> = outcomes
        .iter()
        .filter_map(|(b, o)| match o {
            Outcome::OutOfMemory(m) => Some((*b, m.clone())),
            _ => None,
        })
        .collect();
    let mut claims = verdict(&numbers, &oom, budget);
    let mut tables = vec![results_table(outcomes)];
    if let Some((batch, rungs)) = ladder {
        oom_ladder::claims(&mut claims, *batch, rungs);
        tables.push(oom_ladder::table(*batch, rungs));
    }
    let v = claims.verdict();

    let mut report =
        Report { figures, tables, charts: vec![throughput, accuracy, memory], verdict: v, stopped_early, ..report_for(ex, s, meta) };
    report.note_software_backends();
    if budget.is_some() {
        report.notes.push("The VRAM budget is simulated: gpulab's ledger refuses allocations beyond it, as a smaller GPU would.".into());
    }
    report
}

/// One batch size's finished run, as the verdict reads it.
#[derive(Clone, Debug, PartialEq)]
struct BatchFigures {
    batch: u64,
    samples_per_s: f64,
    val_accuracy: f64,
    steps: u64,
    epochs: usize,
    /// Peak bytes of parameters, gradients and optimizer state (the ledger).
    fixed_bytes: u64,
    /// Peak bytes of activations and inputs.
    varying_bytes: u64,
}

impl BatchFigures {
    fn of(batch: u64, r: &TrainReport) -> Self {
        let p = |c| peak(&r.memory, c);
        BatchFigures {
            batch,
            samples_per_s: r.samples_per_s,
            val_accuracy: r.final_val_accuracy,
            steps: r.steps,
            epochs: r.epochs.len(),
            fixed_bytes: p(MemCategory::Parameters) + p(MemCategory::Gradients) + p(MemCategory::OptimizerState),
            varying_bytes: p(MemCategory::Activations) + p(MemCategory::Inputs),
        }
    }
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const BEST: &str = "no batch size had a higher throughput than this one";
    pub const ROSE: &str = "the largest batch had a higher throughput than the smallest";
    pub const DID_NOT_RISE: &str = "the largest batch's throughput was not above the smallest's";
    pub const PEAKED_INSIDE: &str = "the highest throughput was at a batch between the smallest and the largest";
    pub const ACCURACY_FELL: &str = "over the same epochs, the largest batch took fewer steps and lost more than a point of accuracy";
    pub const ACCURACY_MOVED: &str = "accuracy fell by at most a point, rose, or the epochs differ";
    pub const FIXED_STEADY: &str = "parameter, gradient and optimizer bytes were within 2% of each other at every batch";
    pub const FIXED_VARIED: &str = "parameter, gradient and optimizer bytes differed by more than 2% between batches";
    pub const GREW: &str = "activation and input bytes grew from the smallest batch to the largest";
    pub const DID_NOT_GROW: &str = "activation and input bytes did not grow from the smallest batch to the largest";
    pub const OUT_OF_MEMORY: &str = "this batch ran out of memory";
    pub const SOME_OUT_OF_MEMORY: &str = "some batch ran out of memory";
    pub const NONE: &str = "no batch size finished or ran out of memory";
}

/// The verdict: the best batch, how throughput, accuracy and memory moved from the smallest
/// batch to the largest (whatever order `batch_sizes` gave), and the out-of-memory batches.
fn verdict(trained: &[BatchFigures], oom: &[(u64, String)], budget: Option<u64>) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let best = trained.iter().max_by(|a, b| a.samples_per_s.total_cmp(&b.samples_per_s));
    if let Some(best) = best {
        c.about(best.batch.to_string()).summary(
            cond::BEST,
            trained.iter().all(|t| t.samples_per_s <= best.samples_per_s),
            format!("Batch {} gave the highest throughput, {:.0} samples/s.", best.batch, best.samples_per_s),
        );
        c.about("");
    }
    let lo = trained.iter().min_by_key(|t| t.batch);
    let hi = trained.iter().max_by_key(|t| t.batch);
    if let (Some(lo), Some(hi), Some(best)) = (lo, hi, best)
        && lo.batch != hi.batch
    {
        let ratio = hi.samples_per_s / lo.samples_per_s.max(1e-12);
        let went = format!(
            "Throughput went from {:.0} samples/s at batch {} to {:.0} at batch {} ({ratio:.2}×)",
            lo.samples_per_s, lo.batch, hi.samples_per_s, hi.batch
        );
        c.one_of(
            Evidence,
            vec![
                (
                    cond::ROSE,
                    hi.samples_per_s > lo.samples_per_s,
                    format!("{went}: bigger batches spread each step's fixed costs over more samples."),
                ),
                (
                    cond::DID_NOT_RISE,
                    hi.samples_per_s <= lo.samples_per_s,
                    format!("{went}: larger batches did not raise the throughput on this backend at these sizes."),
                ),
            ],
        );
        c.evidence(
            cond::PEAKED_INSIDE,
            best.batch != lo.batch && best.batch != hi.batch,
            format!("Throughput peaked in between, at batch {}.", best.batch),
        );
        let d_acc = (hi.val_accuracy - lo.val_accuracy) * 100.0;
        let same_epochs = lo.epochs == hi.epochs;
        c.one_of(
            Summary,
            vec![(
                cond::ACCURACY_FELL,
                same_epochs && hi.steps < lo.steps && d_acc < -1.0,
                format!(
                    "But accuracy after the same {} fell from {} to {}: batch {} took only {} steps against {} — fewer, larger steps learn less per epoch at the same learning rate.",
                    common::plural(lo.epochs, "epoch"),
                    percent(lo.val_accuracy),
                    percent(hi.val_accuracy),
                    hi.batch,
                    hi.steps,
                    lo.steps
                ),
            )],
        );
        c.evidence(
            cond::ACCURACY_MOVED,
            !(same_epochs && hi.steps < lo.steps && d_acc < -1.0),
            format!("Accuracy after the epoch budget moved by {d_acc:+.2} points between batch {} and {}.", lo.batch, hi.batch),
        );
        let (fmin, fmax) = trained.iter().fold((u64::MAX, 0), |(a, b), t| (a.min(t.fixed_bytes), b.max(t.fixed_bytes)));
        let kib = |b: u64| b as f64 / 1024.0;
        let steady = (fmax - fmin) as f64 <= 0.02 * fmax as f64;
        c.one_of(
            Evidence,
            vec![
                (
                    cond::FIXED_STEADY,
                    steady,
                    if fmin == fmax {
                        format!("Parameters, gradients and optimizer state stayed at {:.1} KiB at every batch size.", kib(fmax))
                    } else {
                        format!(
                            "Parameters, gradients and optimizer state stayed between {:.1} and {:.1} KiB at every batch size.",
                            kib(fmin),
                            kib(fmax)
                        )
                    },
                ),
                (
                    cond::FIXED_VARIED,
                    !steady,
                    format!(
                        "Parameters, gradients and optimizer state ranged from {:.1} to {:.1} KiB across the batch sizes.",
                        kib(fmin),
                        kib(fmax)
                    ),
                ),
            ],
        );
        let per_sample = (hi.varying_bytes as f64 - lo.varying_bytes as f64) / (hi.batch - lo.batch) as f64;
        c.one_of(
            Evidence,
            vec![
                (
                    cond::GREW,
                    hi.varying_bytes > lo.varying_bytes,
                    format!("Activations and inputs grew by about {per_sample:.0} bytes per sample in the batch."),
                ),
                (
                    cond::DID_NOT_GROW,
                    hi.varying_bytes <= lo.varying_bytes,
                    format!(
                        "Activations and inputs did not grow from batch {} to batch {} ({:.1} → {:.1} KiB).",
                        lo.batch,
                        hi.batch,
                        kib(lo.varying_bytes),
                        kib(hi.varying_bytes)
                    ),
                ),
            ],
        );
    }
    for (b, m) in oom {
        c.about(b.to_string());
        c.summary(
            cond::OUT_OF_MEMORY,
            true,
            format!("Batch {b} did not fit{}.", budget.map(|x| format!(" in the {:.2} MiB budget", mib(x))).unwrap_or_default()),
        );
        c.fact(Evidence, format!("Batch {b}: {m}"));
    }
    c.about("");
    c.evidence(cond::SOME_OUT_OF_MEMORY, !oom.is_empty(), format!("The systematic response to an out-of-memory: {OOM_RESPONSE}."));
    c.summary(cond::NONE, trained.is_empty() && oom.is_empty(), "No batch size finished; see the status column.");
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_systems::report::Claim;
    use proptest::prelude::*;

    fn batch() -> impl Strategy<Value = BatchFigures> {
        (1u64..5000, 1.0f64..1e5, 0.0f64..1.0, 1u64..1000, 1usize..4, 1000u64..1_000_000, 0u64..10_000_000).prop_map(
            |(batch, samples_per_s, val_accuracy, steps, epochs, fixed_bytes, varying_bytes)| BatchFigures {
                batch,
                samples_per_s,
                val_accuracy,
                steps,
                epochs,
                fixed_bytes,
                varying_bytes,
            },
        )
    }

    fn oracle(t: &[BatchFigures], oom: &[(u64, String)], c: &Claim) -> Option<bool> {
        let lo = || t.iter().min_by_key(|x| x.batch);
        let hi = || t.iter().max_by_key(|x| x.batch);
        let of = |b: &str| t.iter().find(|x| x.batch.to_string() == b);
        let best = t.iter().map(|x| x.samples_per_s).fold(f64::MIN, f64::max);
        let fell =
            || Some(lo()?.epochs == hi()?.epochs && hi()?.steps < lo()?.steps && (hi()?.val_accuracy - lo()?.val_accuracy) * 100.0 < -1.0);
        let spread = || {
            let (fmin, fmax) = (t.iter().map(|x| x.fixed_bytes).min()?, t.iter().map(|x| x.fixed_bytes).max()?);
            Some((fmax - fmin) as f64 / fmax as f64)
        };
        let peak_batch: u64 = c.text.split("at batch ").nth(1).and_then(|s| s.split('.').next()).and_then(|s| s.parse().ok()).unwrap_or(0);
        Some(match c.condition {
            cond::BEST => of(&c.subject)?.samples_per_s >= best,
            cond::ROSE => hi()?.samples_per_s > lo()?.samples_per_s,
            cond::DID_NOT_RISE => hi()?.samples_per_s <= lo()?.samples_per_s,
            cond::PEAKED_INSIDE => {
                let p = t.iter().find(|x| x.batch == peak_batch)?;
                p.samples_per_s >= best && lo()?.batch < p.batch && p.batch < hi()?.batch
            }
            cond::ACCURACY_FELL => fell()?,
            cond::ACCURACY_MOVED => !fell()?,
            cond::FIXED_STEADY => spread()? <= 0.02,
            cond::FIXED_VARIED => spread()? > 0.02,
            cond::GREW => hi()?.varying_bytes > lo()?.varying_bytes,
            cond::DID_NOT_GROW => hi()?.varying_bytes <= lo()?.varying_bytes,
            cond::OUT_OF_MEMORY => oom.iter().any(|(b, _)| b.to_string() == c.subject),
            cond::SOME_OUT_OF_MEMORY => !oom.is_empty(),
            cond::NONE => t.is_empty() && oom.is_empty(),
            _ => return None,
        })
    }

    proptest! {
        /// Throughput up or down, memory steady or not, accuracy lost or not, out-of-memory or
        /// not, batch sizes in any order: every sentence printed is true of the numbers.
        #[test]
        fn every_printed_claim_holds(
            runs in proptest::collection::vec(batch(), 0..5),
            oom in proptest::collection::vec(1u64..100_000, 0..2),
        ) {
            let mut t: Vec<BatchFigures> = Vec::new();
            for r in runs {
                if !t.iter().any(|x| x.batch == r.batch) {
                    t.push(r);
                }
            }
            let oom: Vec<(u64, String)> = oom.into_iter().map(|b| (b, "out of memory".into())).collect();
            let claims = verdict(&t, &oom, Some(1 << 20));
            claims
                .audit(|c| oracle(&t, &oom, c))
                .map_err(TestCaseError::fail)?;
            prop_assert!(claims.has_summary());
        }
    }
}
