//! The training loop. It only talks to a `TrainSink`, so the CLI's progress bars, the GUI's
//! charts and the tests' collectors are interchangeable (burn-train's renderer pattern).

mod amp_step;
mod config;
pub mod feed;
mod hooks;
mod run;
mod sink;
mod stepper;

pub use amp_step::AmpReport;
pub use config::TrainConfig;
pub use feed::{Feed, Inline};
pub use hooks::{LoaderPosition, NoHooks, StepDone, TrainHooks};
pub use run::{EpochSummary, TrainReport, evaluate, median, train, train_fed, train_with};
pub use sink::{NullSink, TrainEvent, TrainSink};
