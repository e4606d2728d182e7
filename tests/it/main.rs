//! One integration-test crate with a module per area (ripgrep's layout).

mod cli;
mod common;
mod data;
mod exercises;
mod gui;
mod kernels;
mod ledger;
mod pipeline;
mod pipeline_labs;
mod profiler;
mod training;
mod window;
