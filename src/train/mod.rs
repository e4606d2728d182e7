//! The training loop. It only talks to a `TrainSink`, so the CLI's progress bars, the GUI's
//! charts and the tests' collectors are interchangeable (burn-train's renderer pattern).

mod config;
pub mod feed;
mod run;
mod sink;

pub use config::TrainConfig;
pub use feed::{Feed, Inline};
pub use run::{EpochSummary, TrainReport, evaluate, median, train, train_fed};
pub use sink::{NullSink, TrainEvent, TrainSink};
