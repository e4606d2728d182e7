//! Exercise 2's run: each batch size trained in turn (an out-of-memory batch recorded, the sweep
//! going on), then the out-of-memory ladder on the largest batch that did not fit.

use super::report::{build_report, results_table};
use super::{BatchSweep, oom_ladder};
use crate::settings::Settings;
use crate::settings::batch_sweep::Config;
use crate::sink::{Event, Sink, TrainBridge};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::prelude::*;
use gpulab_core::with_backend;
use gpulab_systems::report::{Metadata, Report};
use gpulab_systems::train::{self, TrainReport};

/// What one batch size gave.
pub(super) enum Outcome {
    Trained(Box<TrainReport>),
    OutOfMemory(String),
    Failed(String),
}

pub(super) fn run(ex: &BatchSweep, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
    let mut c = Config::parse(s)?;
    let device = c.backend.clone();
    let budget_mib = c.vram_budget_mib;
    let budget = (budget_mib > 0.0).then_some((budget_mib * (1u64 << 20) as f64) as u64);
    let data = c.training.load_dataset()?;
    let sizes = c.batch_sizes.clone();
    let (resolved, sizing) = crate::sizing::resolve(s, &mut c.training, &device, &data, sizes.len() as f64, 0.0, sink)?;
    let s = &resolved;

    sink.emit(Event::Phase(format!("opening {device}")));
    let mut engine = device.open(budget)?;
    let info = with_backend!(&mut engine, b => b.info());
    let mut meta = Metadata::new(c.training.seed as u64);
    meta.dataset = format!("{} — {}", data.name, data.source);
    meta.hyperparameters = s.to_map();
    meta.hyperparameters.insert("architecture".into(), c.training.architecture(&data)?);
    meta.backends.push(info.clone());

    let mut outcomes: Vec<(u64, Outcome)> = Vec::new();
    for &batch in &sizes {
        if sink.stop_requested() {
            break;
        }
        sink.emit(Event::Phase(format!("batch {batch}")));
        let cfg = c.training.train_config(batch as usize)?;
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
        Some(batch) if c.ladder && !sink.stop_requested() => Some((batch, oom_ladder::run(&c, &mut engine, &data, batch, sink)?)),
        _ => None,
    };
    let stopped_early = sink.stop_requested();
    let mut report = build_report(ex, s, meta, &outcomes, budget, stopped_early, ladder.as_ref());
    crate::sizing::annotate(sizing.as_ref(), &mut report);
    Ok(report)
}
