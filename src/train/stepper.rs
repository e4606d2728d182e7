//! One training step and the validation pass, in f32 or in mixed precision: the loop in
//! `run.rs` is the same for both and only talks to this.

use super::amp_step::{AmpReport, Amp, AmpWorkspace};
use super::{TrainConfig, evaluate};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::nn::{GradScalerState, Mlp, Workspace};
use crate::tensor::Backend;

pub enum Stepper<B: Backend> {
    F32 { full: Workspace<B>, tail: Option<Workspace<B>> },
    Amp { amp: Box<Amp<B>>, full: AmpWorkspace<B>, tail: Option<AmpWorkspace<B>> },
}

impl<B: Backend> Stepper<B> {
    pub fn new(b: &mut B, model: &Mlp<B>, cfg: &TrainConfig, batch: usize) -> Result<Self> {
        Ok(match Amp::new(b, model, cfg.amp)? {
            None => Stepper::F32 { full: Workspace::new(b, &model.cfg, batch, true)?, tail: None },
            Some(amp) => {
                let full = AmpWorkspace::new(b, &model.cfg, amp.dt, batch, true)?;
                Stepper::Amp { amp: Box::new(amp), full, tail: None }
            }
        })
    }

    /// Compiles every kernel a step uses before the clock starts: one forward and backward
    /// pass on the (zero) workspace touches them all and leaves the parameters unchanged.
    pub fn warm_up(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<()> {
        b.prepare()?;
        match self {
            Stepper::F32 { full, .. } => {
                model.forward(b, full)?;
                model.backward(b, full)?;
            }
            Stepper::Amp { amp, full, .. } => {
                amp.cast_weights(b, model)?;
                amp.forward(b, model, full)?;
                amp.backward(b, model, full)?;
                // The warm-up's gradient statistics are not the run's: read and drop them.
                full.take_totals(b)?;
                return Ok(());
            }
        }
        self.take_totals(b).map(|_| ())
    }

    /// The input tensors for a batch of `rows` samples (the last batch of an epoch may be
    /// short: it gets a workspace of its own). The feed writes the batch into them.
    pub fn inputs(&mut self, b: &mut B, model: &Mlp<B>, rows: usize) -> Result<(&mut B::Tensor, &mut B::Tensor)> {
        Ok(match self {
            Stepper::F32 { full, tail } => {
                let ws = if rows == full.batch {
                    full
                } else {
                    if tail.as_ref().is_none_or(|t| t.batch != rows) {
                        *tail = Some(Workspace::new(b, &model.cfg, rows, true)?);
                    }
                    tail.as_mut().expect("created above")
                };
                (&mut ws.x, &mut ws.y)
            }
            Stepper::Amp { amp, full, tail } => {
                let ws = if rows == full.batch {
                    full
                } else {
                    if tail.as_ref().is_none_or(|t| t.batch != rows) {
                        *tail = Some(AmpWorkspace::new(b, &model.cfg, amp.dt, rows, true)?);
                    }
                    tail.as_mut().expect("created above")
                };
                ws.inputs()
            }
        })
    }

    /// Trains one step on the batch `inputs` was given (`rows` samples).
    pub fn train(&mut self, b: &mut B, model: &mut Mlp<B>, rows: usize, step: u64) -> Result<()> {
        match self {
            Stepper::F32 { full, tail } => model.train_step(b, if rows == full.batch { full } else { tail.as_mut().expect("inputs() made it") }),
            Stepper::Amp { amp, full, tail } => {
                let ws = if rows == full.batch { full } else { tail.as_mut().expect("inputs() made it") };
                amp.train_step(b, model, ws, step)
            }
        }
    }

    /// (loss sum, correct count) accumulated since the last call; resets them.
    pub fn take_totals(&mut self, b: &mut B) -> Result<(f64, u64)> {
        match self {
            Stepper::F32 { full, tail } => {
                let (mut loss, mut correct) = full.take_totals(b)?;
                if let Some(t) = tail.as_mut() {
                    let (l, c) = t.take_totals(b)?;
                    (loss, correct) = (loss + l, correct + c);
                }
                Ok((loss, correct))
            }
            Stepper::Amp { amp, full, tail } => {
                let (mut loss, mut correct, mut stats) = full.take_totals(b)?;
                if let Some(t) = tail.as_mut() {
                    let (l, c, s) = t.take_totals(b)?;
                    (loss, correct) = (loss + l, correct + c);
                    stats = [stats[0] + s[0], stats[1] + s[1]];
                }
                amp.report.grad_elements_nonzero += stats[0];
                amp.report.grad_elements_flushed += stats[1];
                Ok((loss, correct))
            }
        }
    }

    /// Validation in the run's precision.
    pub fn evaluate(&mut self, b: &mut B, model: &Mlp<B>, data: &Dataset, batch: usize) -> Result<(f64, f64)> {
        match self {
            Stepper::F32 { .. } => evaluate(b, model, data, batch),
            Stepper::Amp { amp, .. } => amp.evaluate(b, model, data, batch),
        }
    }

    /// The loss scaler's state (what a checkpoint keeps), when this run scales.
    pub fn scaler_state(&self) -> Option<GradScalerState> {
        match self {
            Stepper::Amp { amp, .. } => amp.scaler.as_ref().map(|s| s.state),
            Stepper::F32 { .. } => None,
        }
    }

    /// Continues scaling from a checkpoint's state. A state without a scaler to take it means
    /// the checkpoint and this run disagree about precision: refused, not ignored.
    pub fn restore_scaler(&mut self, state: GradScalerState) -> Result<()> {
        match self {
            Stepper::Amp { amp, .. } if amp.scaler.is_some() => {
                amp.scaler.as_mut().expect("checked").state = state;
                Ok(())
            }
            _ => Err(Error::InvalidConfig("the checkpoint holds a loss scaler's state but this run does not scale its loss; resume with the checkpoint's precision".into())),
        }
    }

    pub fn into_amp_report(self) -> Option<AmpReport> {
        match self {
            Stepper::F32 { .. } => None,
            Stepper::Amp { amp, .. } => Some(amp.report),
        }
    }
}
