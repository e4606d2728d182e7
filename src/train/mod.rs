//! The training loop. It only talks to a `TrainSink`, so the CLI's progress bars, the GUI's
//! charts and the tests' collectors are interchangeable (burn-train's renderer pattern).

mod amp_step;
mod config;
mod hooks;
mod run;
mod sink;
mod stepper;

pub use amp_step::AmpReport;
pub use config::TrainConfig;
pub use hooks::{LoaderPosition, NoHooks, StepDone, TrainHooks};
pub use run::{EpochSummary, TrainReport, evaluate, median, train, train_with};
pub use sink::{NullSink, TrainEvent, TrainSink};
