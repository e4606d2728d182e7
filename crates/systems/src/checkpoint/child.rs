//! The training process of a checkpointed run: what it is told (as `gpulab train` arguments,
//! so a parent can start it) and how it runs (training with a `Checkpointer`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::{Checkpointer, Policy};
use crate::data::{self, DatasetSpec};
use crate::train::{self, TrainConfig, TrainEvent, TrainReport};
use gpulab_core::device::Device;
use gpulab_core::error::Result;
use gpulab_core::tensor::prelude::*;
use gpulab_core::with_backend;

#[derive(Clone, Debug)]
pub struct ChildSpec {
    pub backend: String,
    pub dataset: String,
    pub cfg: TrainConfig,
    pub dir: PathBuf,
    pub policy: Policy,
    pub resume: bool,
}

impl ChildSpec {
    /// The `gpulab train …` arguments that run this spec and report JSON lines.
    pub fn args(&self) -> Vec<String> {
        let c = &self.cfg;
        let hidden = c.hidden.iter().map(|h| h.to_string()).collect::<Vec<_>>().join(",");
        let optimizer = match c.optimizer {
            crate::nn::OptimizerKind::Sgd => "sgd",
            crate::nn::OptimizerKind::AdamW => "adamw",
        };
        let mut a: Vec<String> = ["train", "--jsonl", "--backend", &self.backend, "--dataset", &self.dataset, "--hidden", &hidden]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for (k, v) in [
            ("--model", c.model.name().to_string()),
            ("--batch", c.batch.to_string()),
            ("--epochs", c.epochs.to_string()),
            ("--lr", c.lr.to_string()),
            ("--optimizer", optimizer.to_string()),
            ("--momentum", c.momentum.to_string()),
            ("--weight-decay", c.weight_decay.to_string()),
            ("--seed", c.seed.to_string()),
            ("--log-every", c.log_every.to_string()),
            // The child gets the precision with its default scaling; a custom scaler or loss
            // weight (in-process runs only) has no flag.
            ("--precision", c.amp.precision.name().to_string()),
            ("--checkpoint-dir", self.dir.display().to_string()),
            ("--checkpoint-every", self.policy.every_steps.to_string()),
            ("--checkpoint-every-epochs", self.policy.every_epochs.to_string()),
            ("--keep-last", self.policy.keep_last.to_string()),
        ] {
            a.push(k.into());
            a.push(v);
        }
        if self.resume {
            a.push("--resume".into());
        }
        a
    }
}

/// Trains `spec` with checkpoints, reporting every event (the loop's and the checkpointer's)
/// to `emit`; `request` asks for a checkpoint after the current step.
pub fn run_child(spec: &ChildSpec, emit: &mut dyn FnMut(TrainEvent), request: Arc<AtomicBool>) -> Result<TrainReport> {
    spec.cfg.validate()?;
    let device: Device = spec.backend.parse()?;
    let data_spec: DatasetSpec = spec.dataset.parse()?;
    let data = data::load(&data_spec, spec.cfg.seed)?;
    let mut engine = device.open(None)?;
    with_backend!(&mut engine, b => {
        emit(TrainEvent::Backend { info: b.info() });
        // Both the loop's events and the checkpointer's go to `emit`; the RefCell lets them share it.
        let emit = std::cell::RefCell::new(emit);
        let mut ck_emit = |ev: TrainEvent| (emit.borrow_mut())(ev);
        let mut hooks = Checkpointer::new(spec.dir.clone(), spec.policy, spec.resume, spec.cfg.clone(), data.name.clone(), request, &mut ck_emit);
        let mut sink = |ev: TrainEvent| (emit.borrow_mut())(ev);
        let report = train::train_with(b, &data, &spec.cfg, &mut sink, &mut hooks, &mut train::Inline)?;
        let model = spec.cfg.model.config(data.shape, data.features, &spec.cfg.hidden, data.classes)?.label();
        (emit.borrow_mut())(TrainEvent::Finished { steps: report.steps, val_accuracy: report.final_val_accuracy, train_wall_s: report.train_wall_s, model, parameters: report.parameters as u64 });
        Ok(report)
    })
}
