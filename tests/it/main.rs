//! One integration-test crate with a module per area (ripgrep's layout).

mod agreement;
mod allocation;
mod amp;
mod checkpoint;
#[cfg(feature = "gui")]
mod checkpoint_gui;
mod checkpoint_interop;
mod checkpoint_kill;
mod checkpoint_lab;
mod class;
mod cli;
mod cnn;
mod common;
mod conformance;
mod data;
mod device_counts;
mod distributed;
mod exercises;
mod forward;
mod fuzz_seeds;
#[cfg(feature = "gui")]
mod gui;
#[cfg(feature = "gui")]
mod gui_presenter;
#[cfg(feature = "gui")]
mod gui_saved;
mod hostile_inputs;
mod html_report;
mod install;
mod kernels;
mod ladder;
#[cfg(feature = "gui")]
mod learn_gui;
mod ledger;
mod multi_optim;
mod noise;
mod optimizer;
mod pipeline;
mod pipeline_labs;
mod pipeline_parallel;
mod platform;
mod precision;
mod presets;
mod profiler;
mod quant;
mod quant_lab;
mod quant_model;
mod scaler;
mod serve;
mod serve_hostile;
mod step;
mod torch_export;
mod training;
mod watch;
#[cfg(feature = "gui")]
mod window;
