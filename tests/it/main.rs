//! One integration-test crate with a module per area (ripgrep's layout).

mod amp;
mod cli;
mod common;
mod data;
mod exercises;
mod gui;
mod kernels;
mod ledger;
mod precision;
mod training;
mod window;
