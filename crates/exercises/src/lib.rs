//! The exercises behind one trait, listed once in [`registry`]. The GUI, the CLI and the tests
//! all drive `Exercise::run` and take their lists of exercises from the registry, so whatever
//! one shows, the others can produce and check, and a new exercise needs no change outside this
//! crate and `lessons/`.

mod batch_sweep;
mod checkpointing;
mod common;
pub mod cost;
mod cpu_vs_gpu;
mod device_counts;
mod distributed;
mod inference;
mod input_pipeline;
pub mod lessons;
pub mod live;
pub mod monitor;
mod noise;
mod platform;
mod precision;
pub mod presets;
mod profiled_runs;
mod profiling;
mod quantization;
pub mod run_control;
pub mod settings;
pub mod sink;
pub mod sizing;
pub mod watch;

/// `gpulab export torch --exercise distributed` (exercise 6's hand-off to PyTorch DDP).
pub use distributed::torch_export;
pub use lessons::{Card, check_yourself, without_check_yourself};
pub use live::LiveChartSpec;
pub use presets::Preset;
pub use run_control::RunControl;
pub use settings::{Setting, Settings, Value};
pub use sink::{ChannelSink, CollectSink, Event, Sink};

use gpulab_core::error::Result;
use gpulab_systems::report::Report;

pub trait Exercise: Send + Sync {
    /// The id used on the command line, e.g. `cpu-vs-gpu`.
    fn id(&self) -> &'static str;
    /// 1, 2, …: the order of the chapter (the registry's numbers run from 1 without a gap).
    fn number(&self) -> u32;
    fn title(&self) -> &'static str;
    /// The lesson's markdown, embedded from `lessons/` (`include_str!`), starting `# N · Title`.
    fn lesson(&self) -> &'static str;
    /// The smallest run that still fills every part of the report (seconds on a 2-core CPU, no
    /// GPU needed): `key=value` pairs over the defaults. The lab's tests run every registered
    /// exercise with it, so a new exercise is run through the window without a new test.
    fn quick_run(&self) -> &'static [(&'static str, &'static str)];
    /// The settings with their defaults (which finish in a few minutes on a 2-core machine).
    fn settings(&self) -> Settings;
    /// Checks the settings as a whole; `run` calls it too.
    fn validate(&self, settings: &Settings) -> Result<()>;
    /// Named presets (`presets::Preset`): the defaults with a few values changed to show one
    /// thing ("big enough for a GPU"). The GUI offers them beside "Reset to defaults", the CLI as
    /// `--preset NAME`; every one must pass `validate` (a test checks).
    fn presets(&self) -> Vec<Preset> {
        Vec::new()
    }
    /// The live charts `run` emits points for (`Event::Point { chart, .. }`), with their titles
    /// and axes. Every chart id the exercise emits must be declared here (a test checks).
    fn live_charts(&self) -> Vec<LiveChartSpec> {
        Vec::new()
    }
    /// True when `run` honours the sink's `RunControl` (pause, step, speed): the lab then shows
    /// those controls while it runs.
    fn controllable(&self) -> bool {
        false
    }
    /// The one figure that sums up a run of this exercise (the progress list, the class view):
    /// by default the report's first figure.
    fn key_figure<'r>(&self, report: &'r Report) -> Option<&'r gpulab_systems::report::Figure> {
        report.figures.first()
    }
    /// Runs the lab, reporting to `sink`; returns the report (also when stopped early).
    fn run(&self, settings: &Settings, sink: &mut dyn Sink) -> Result<Report>;
}

/// Every exercise, in the chapter's order: the one list the CLI, the lab, the class view and the
/// tests take theirs from. A new exercise is a module above and a line here.
pub fn registry() -> Vec<Box<dyn Exercise>> {
    // Every exercise that trains or serves on a device runs inside the hardware monitor
    // (monitor.rs); the platform lab simulates its cluster, so there is nothing to watch.
    use monitor::Monitored;
    let mut all: Vec<Box<dyn Exercise>> = vec![
        Box::new(Monitored(cpu_vs_gpu::CpuVsGpu)),
        Box::new(Monitored(batch_sweep::BatchSweep)),
        Box::new(Monitored(precision::PrecisionLab)),
        Box::new(Monitored(input_pipeline::InputPipeline)),
        Box::new(Monitored(checkpointing::CheckpointLab)),
        Box::new(Monitored(distributed::Distributed)),
        Box::new(Monitored(profiling::Profiling)),
        Box::new(Monitored(inference::InferenceBatching)),
        Box::new(Monitored(quantization::QuantizationLab)),
        Box::new(platform::PlatformLab),
    ];
    all.sort_by_key(|e| e.number());
    all
}

/// The exercise with this id (or number).
pub fn find(id: &str) -> Option<Box<dyn Exercise>> {
    registry().into_iter().find(|e| e.id() == id || e.number().to_string() == id)
}

/// The ids in order, for error messages.
pub fn ids() -> Vec<&'static str> {
    registry().iter().map(|e| e.id()).collect()
}
