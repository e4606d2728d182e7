//! Exercise 2's out-of-memory ladder: the largest batch that did not fit, retried with each
//! remedy the chapter teaches — a smaller batch, gradient accumulation, activation
//! recomputation, 16-bit — and all three together. Each rung's memory by category is the
//! ledger's measured peak; its time is measured; the verdict's sentences are claims checked on
//! those numbers.

use crate::common::{MEMORY_CATEGORIES, mib, peak};
use crate::settings::batch_sweep::Config;
use crate::sink::{Event, Sink, TrainBridge};
use gpulab_core::device::Engine;
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{DType, prelude::*};
use gpulab_core::with_backend;
use gpulab_systems::nn::{AmpConfig, Precision};
use gpulab_systems::report::{Cell, Claims, Column, Part, Provenance, Table};
use gpulab_systems::train::{self, TrainConfig};

/// One rung's outcome, as the table and the verdict read it.
#[derive(Clone, Debug, PartialEq)]
pub struct Rung {
    pub remedy: String,
    /// Rows per optimizer step: the remedies but "smaller batch" keep the failed batch's update.
    pub batch: u64,
    pub keeps_batch: bool,
    pub result: RungResult,
}

#[derive(Clone, Debug, PartialEq)]
pub enum RungResult {
    /// Peak bytes per category (`MEMORY_CATEGORIES` order) and in total, seconds per epoch.
    Fitted {
        peaks: Vec<u64>,
        total_peak: u64,
        epoch_s: f64,
        samples_per_s: f64,
    },
    OutOfMemory(String),
    /// Not run here (a 16-bit type the backend lacks), or failed otherwise.
    NotRun(String),
}

impl Rung {
    fn fitted(&self) -> Option<(u64, f64)> {
        match &self.result {
            RungResult::Fitted { total_peak, epoch_s, .. } => Some((*total_peak, *epoch_s)),
            _ => None,
        }
    }
}

/// The 16-bit type the backend trains in: fp16 where it can, else bf16.
fn half_type<B: Backend>(b: &B) -> std::result::Result<Precision, String> {
    match (b.amp_unavailable(DType::F16), b.amp_unavailable(DType::BF16)) {
        (None, _) => Ok(Precision::F16),
        (Some(_), None) => Ok(Precision::BF16),
        (Some(why), Some(_)) => Err(why),
    }
}

/// Runs the ladder for `batch` (which ran out of memory in the sweep), `split` times smaller
/// or in `split` micro-batches.
pub fn run(c: &Config, engine: &mut Engine, data: &gpulab_systems::data::Dataset, batch: u64, sink: &mut dyn Sink) -> Result<Vec<Rung>> {
    let split = c.ladder_split as u64;
    let base = TrainConfig { accumulate: 1, recompute: false, amp: AmpConfig::default(), ..c.training.train_config(batch as usize)? };
    let half = with_backend!(engine, b => half_type(b));
    let half_label = half.as_ref().map(|p| p.name().to_string()).unwrap_or_else(|_| "16-bit".into());
    let mut rungs: Vec<(String, u64, bool, std::result::Result<TrainConfig, String>)> = Vec::new();
    let smaller = (batch / split).max(1);
    rungs.push((format!("smaller batch ({smaller})"), smaller, false, Ok(TrainConfig { batch: smaller as usize, ..base.clone() })));
    let accumulated = TrainConfig { accumulate: split as usize, ..base.clone() };
    let split_ok = accumulated.validate().map(|_| accumulated).map_err(|e| e.to_string());
    rungs.push((format!("accumulate {split} micro-batches of {}", batch / split), batch, true, split_ok.clone()));
    rungs.push(("recompute activations".into(), batch, true, Ok(TrainConfig { recompute: true, ..base.clone() })));
    let amp = |c: TrainConfig| half.clone().map(|p| TrainConfig { amp: AmpConfig::new(p), ..c });
    rungs.push((format!("16-bit ({half_label})"), batch, true, amp(base.clone())));
    let all = split_ok.and_then(|c| amp(TrainConfig { recompute: true, ..c }));
    rungs.push(("all three together".into(), batch, true, all));

    let mut out = Vec::new();
    for (remedy, rows, keeps_batch, cfg) in rungs {
        if sink.stop_requested() {
            break;
        }
        sink.emit(Event::Phase(format!("ladder: batch {batch}, {remedy}")));
        let result = match cfg {
            Err(why) => RungResult::NotRun(why),
            Ok(cfg) => match with_backend!(engine, b => {
                b.reset_memory_peaks();
                let mut bridge = TrainBridge::new(&mut *sink, format!("ladder: {remedy}"));
                train::train(b, data, &cfg, &mut bridge)
            }) {
                Ok(r) => RungResult::Fitted {
                    peaks: MEMORY_CATEGORIES.iter().map(|c| peak(&r.memory, *c)).collect(),
                    total_peak: r.memory.total_peak,
                    epoch_s: r.epochs.iter().map(|e| e.train_wall_s).sum::<f64>() / r.epochs.len().max(1) as f64,
                    samples_per_s: r.samples_per_s,
                },
                Err(e @ (Error::OutOfMemory { .. } | Error::DeviceOutOfMemory { .. })) => RungResult::OutOfMemory(e.to_string()),
                Err(e) => RungResult::NotRun(e.to_string()),
            },
        };
        out.push(Rung { remedy, batch: rows, keeps_batch, result });
        sink.emit(Event::Table(table(batch, &out)));
    }
    Ok(out)
}

/// The smaller batch's epoch time: what every other rung's time is compared with.
fn reference_epoch_s(rungs: &[Rung]) -> Option<f64> {
    rungs.iter().find(|r| !r.keeps_batch).and_then(|r| r.fitted()).map(|f| f.1)
}

pub fn table(batch: u64, rungs: &[Rung]) -> Table {
    let ledger = || Provenance::derived("gpulab's allocation ledger (peak bytes)");
    let mut columns = vec![Column::text("remedy"), Column::num("batch per step", "", 0, Provenance::Measured), Column::text("status")];
    columns.extend(MEMORY_CATEGORIES.iter().map(|c| Column::num(c.name(), "KiB", 1, ledger())));
    columns.extend([
        Column::num("total peak", "MiB", 2, ledger()),
        Column::num("epoch time", "s", 3, Provenance::Measured),
        Column::num("throughput", "samples/s", 0, Provenance::Measured),
        Column::num("time vs smaller batch", "×", 2, Provenance::derived("epoch time ÷ the smaller batch's")),
    ]);
    let reference = reference_epoch_s(rungs);
    let rows = rungs
        .iter()
        .map(|r| {
            let mut row = vec![r.remedy.clone().into(), Cell::Num(r.batch as f64)];
            match &r.result {
                RungResult::Fitted { peaks, total_peak, epoch_s, samples_per_s } => {
                    row.push("fits".into());
                    row.extend(peaks.iter().map(|p| Cell::Num(*p as f64 / 1024.0)));
                    row.extend([mib(*total_peak).into(), (*epoch_s).into(), (*samples_per_s).into()]);
                    row.push(reference.map_or(Cell::Empty, |t| Cell::Num(epoch_s / t.max(1e-12))));
                }
                RungResult::OutOfMemory(m) => {
                    row.push(format!("OUT OF MEMORY: {m}").into());
                    row.extend(std::iter::repeat_n(Cell::Empty, MEMORY_CATEGORIES.len() + 4));
                }
                RungResult::NotRun(m) => {
                    row.push(format!("not run: {m}").into());
                    row.extend(std::iter::repeat_n(Cell::Empty, MEMORY_CATEGORIES.len() + 4));
                }
            }
            row
        })
        .collect();
    Table { title: format!("The out-of-memory ladder for batch {batch}"), columns, rows }
}

/// The conditions the ladder's sentences assert (the property test re-checks each one).
pub mod cond {
    pub const FITTED: &str = "this remedy's run fitted in the budget";
    pub const STILL_OOM: &str = "this remedy's run ran out of memory";
    pub const FASTEST_KEEPING: &str = "this remedy fitted, keeps the batch's update, and no other such remedy had a shorter epoch";
    pub const NONE_KEEPING: &str = "no remedy that keeps the batch's update fitted";
}

/// The ladder's sentences: which rungs fitted (with their measured peak and time), which still
/// ran out of memory, and the fastest remedy that keeps the failed batch's update.
pub fn claims(c: &mut Claims, batch: u64, rungs: &[Rung]) {
    if rungs.is_empty() {
        return;
    }
    let reference = reference_epoch_s(rungs);
    for r in rungs {
        c.about(r.remedy.clone());
        match &r.result {
            RungResult::Fitted { total_peak, epoch_s, .. } => {
                let cost =
                    reference.map(|t| format!(", {:.2}× the smaller batch's epoch time", epoch_s / t.max(1e-12))).unwrap_or_default();
                c.evidence(
                    cond::FITTED,
                    true,
                    format!("Ladder, {}: fits, peak {:.2} MiB, {epoch_s:.3} s per epoch{cost}.", r.remedy, mib(*total_peak)),
                );
            }
            RungResult::OutOfMemory(_) => {
                c.evidence(cond::STILL_OOM, true, format!("Ladder, {}: still out of memory at batch {}.", r.remedy, r.batch));
            }
            RungResult::NotRun(why) => {
                c.fact(Part::Evidence, format!("Ladder, {}: not run ({why}).", r.remedy));
            }
        }
    }
    let keeping = rungs.iter().filter(|r| r.keeps_batch).filter_map(|r| r.fitted().map(|f| (r, f.1)));
    let fastest = keeping.clone().min_by(|a, b| a.1.total_cmp(&b.1));
    match fastest {
        Some((r, t)) => {
            c.about(r.remedy.clone());
            c.summary(
                cond::FASTEST_KEEPING,
                keeping.clone().all(|(_, u)| t <= u),
                format!("Batch {batch}'s update fits with {}: the fastest remedy that keeps it ({t:.3} s per epoch).", r.remedy),
            );
        }
        None => {
            c.about("");
            c.summary(
                cond::NONE_KEEPING,
                !rungs.iter().any(|r| r.keeps_batch && r.fitted().is_some()),
                format!("No remedy kept batch {batch}'s update within the budget; only a smaller batch can help here."),
            );
        }
    }
    c.about("");
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_systems::report::Claim;
    use proptest::prelude::*;

    fn rung() -> impl Strategy<Value = Rung> {
        (0usize..3, any::<bool>(), 1u64..10_000_000, 0.001f64..100.0).prop_map(|(kind, keeps_batch, bytes, epoch_s)| Rung {
            remedy: String::new(),
            batch: 64,
            keeps_batch,
            result: match kind {
                0 => RungResult::Fitted { peaks: vec![bytes / 5; 5], total_peak: bytes, epoch_s, samples_per_s: 1.0 / epoch_s },
                1 => RungResult::OutOfMemory("out of memory".into()),
                _ => RungResult::NotRun("no 16-bit".into()),
            },
        })
    }

    fn oracle(rungs: &[Rung], c: &Claim) -> Option<bool> {
        let of = |s: &str| rungs.iter().find(|r| r.remedy == s);
        let keeping = || rungs.iter().filter(|r| r.keeps_batch).filter_map(|r| r.fitted().map(|f| f.1));
        Some(match c.condition {
            cond::FITTED => of(&c.subject)?.fitted().is_some(),
            cond::STILL_OOM => matches!(of(&c.subject)?.result, RungResult::OutOfMemory(_)),
            cond::FASTEST_KEEPING => {
                let r = of(&c.subject)?;
                let t = r.fitted()?.1;
                r.keeps_batch && keeping().all(|u| t <= u)
            }
            cond::NONE_KEEPING => keeping().next().is_none(),
            _ => return None,
        })
    }

    proptest! {
        /// Rungs fitting or not, keeping the batch or not, in any order: every printed sentence
        /// is true of the numbers, and the ladder always says where batch's update stands.
        #[test]
        fn every_printed_ladder_claim_holds(rungs in proptest::collection::vec(rung(), 0..6)) {
            let rungs: Vec<Rung> = rungs.into_iter().enumerate().map(|(i, r)| Rung { remedy: format!("remedy {i}"), ..r }).collect();
            let mut c = Claims::new();
            claims(&mut c, 64, &rungs);
            c.audit(|x| oracle(&rungs, x)).map_err(TestCaseError::fail)?;
            prop_assert_eq!(rungs.is_empty(), !c.verdict().summary.contains("Batch 64") && !c.verdict().summary.contains("No remedy"));
        }
    }
}
