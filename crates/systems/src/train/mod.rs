//! The training loop. It only talks to a `TrainSink`, so the CLI's progress bars, the GUI's
//! charts and the tests' collectors are interchangeable (burn-train's renderer pattern), and to
//! a `Strategy` that runs each step (one device, or one data-parallel replica of N).

mod amp_step;
mod config;
mod evaluate;
mod f32_step;
pub mod feed;
mod hooks;
mod record;
mod run;
mod schedule;
mod sink;
mod step;
mod strategy;

pub use amp_step::{Amp, AmpReport, AmpWorkspace};
pub use config::{MAX_HIDDEN_LAYERS, MAX_HIDDEN_WIDTH, MAX_TRAINING_BYTES, TrainConfig, check_model_fits};
pub use evaluate::evaluate;
pub use f32_step::F32Phases;
pub use feed::{Feed, Inline};
pub use hooks::{LoaderPosition, NoHooks, StepDone, TrainHooks};
pub use record::{Recorder, Window};
pub use run::{EpochSummary, RunCounts, TrainReport, median, train, train_fed, train_strategy, train_with};
pub use schedule::Schedule;
pub use sink::{NullSink, TrainEvent, TrainSink, memory_held};
pub use step::{ByRows, LayerDone, Micro, Phases, Step, StepBuffers};
pub use strategy::{Rank, SingleDevice, StepAt, StepClock, Strategy};

/// A training step in f32.
pub type F32Step<B> = Step<B, F32Phases>;
/// A mixed-precision training step (16-bit matmuls, f32 master weights).
pub type AmpStep<B> = Step<B, Amp<B>>;
