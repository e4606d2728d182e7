//! Command-line parsing (clap) and the subcommands. Each subcommand only parses, calls the
//! library, and prints; progress bars go to stderr so `--json` output on stdout stays clean.

mod bench;
mod info;
mod progress;
mod train;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "gpulab", version, about = "A lab that teaches how GPUs accelerate deep learning, by measuring it on your machine")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// List every GPU adapter (backend, type, driver, features, limits) and the CPU.
    Info(info::InfoArgs),
    /// Train an MLP on a data set and report loss, accuracy and speed.
    Train(train::TrainArgs),
    /// Measure speed: GEMM GFLOP/s or training-step throughput.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

pub fn try_main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Info(a)) => info::run(a),
        Some(Command::Train(a)) => train::run(a),
        Some(Command::Bench(b)) => bench::run(b),
        None => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            println!("\nThe desktop lab is not built yet; start with `gpulab train --backend gpu`.");
            Ok(())
        }
    }
}
