//! Command-line parsing (clap) and the subcommands. Each subcommand only parses, calls the
//! library, and prints; progress bars go to stderr so `--json` output on stdout stays clean.

mod bench;
mod checkpointed;
mod class;
#[cfg(test)]
mod doc_check;
mod export;
mod info;
mod progress;
mod run;
mod run_all;
mod serve;
mod train;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "gpulab", version, about = "A lab that teaches how GPUs accelerate deep learning, by measuring it on your machine")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Open the lab, render the real window for --frames frames, save a PNG here, and exit.
    #[arg(long, value_name = "PATH")]
    screenshot: Option<std::path::PathBuf>,
    /// The exercise to show at start (id or number), e.g. with --screenshot.
    #[arg(long, value_name = "ID")]
    exercise: Option<String>,
    /// Frames to render before the screenshot is taken.
    #[arg(long, default_value_t = 10)]
    frames: u32,
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
    /// List the exercises, one per line, starting with the id.
    List,
    /// Run one exercise headless, with progress bars, and write its report; `run all` runs every
    /// exercise and writes an index.html linking their reports.
    Run(run::RunArgs),
    /// Serve a model over HTTP on loopback with dynamic batching (exercise 8's server).
    Serve(serve::ServeArgs),
    /// Send load to a running `gpulab serve` (open or closed loop) and print the percentiles.
    Loadgen(serve::LoadgenArgs),
    /// Export an exercise's experiment for another engine: `export torch --exercise distributed`.
    #[command(subcommand)]
    Export(export::ExportCommand),
    /// Read a folder of students' report.json files: a table per exercise, a row per machine,
    /// with each exercise's key figure; --out writes class.csv and class.html.
    Class(class::ClassArgs),
    /// Print an exercise's lesson (Markdown), by id or number.
    Lesson {
        /// The exercise id or number, e.g. cpu-vs-gpu or 1.
        id: String,
    },
}

pub fn try_main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if matches!(cli.command, Some(Command::Info(_) | Command::List | Command::Lesson { .. } | Command::Bench(_))) {
        quiet_broken_pipe();
    }
    // The commands that compute on this thread drive the CPU backend from a rayon worker
    // (`cpu::drive`); serve's inference thread does so itself.
    use gpulab::device::cpu::drive;
    match cli.command {
        Some(Command::Info(a)) => info::run(a),
        Some(Command::Train(a)) => drive(|| train::run(a)),
        Some(Command::Bench(b)) => drive(|| bench::run(b)),
        Some(Command::List) => run::list(),
        Some(Command::Run(a)) => drive(|| run::run(a)),
        Some(Command::Serve(a)) => serve::serve(a),
        Some(Command::Loadgen(a)) => serve::loadgen(a),
        Some(Command::Lesson { id }) => run::lesson(&id),
        Some(Command::Export(c)) => drive(|| export::run(c)),
        Some(Command::Class(a)) => drive(|| class::run(a)),
        None => open_lab(cli.screenshot, cli.exercise, cli.frames),
    }
}

/// The commands that print to stdout end quietly when the reader goes away (`gpulab list |
/// head`), as other command-line tools do, instead of panicking in `println!`: Rust ignores
/// SIGPIPE so that writes fail, and these commands have nothing to save when stdout closes.
/// Not for the lab, the server, exercise runs or `class` (which writes its files after
/// printing and takes a closed pipe as the end of its output, cli/class.rs `print`).
fn quiet_broken_pipe() {
    #[cfg(unix)]
    // SAFETY: restores the default disposition of one signal, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(feature = "gui")]
fn open_lab(screenshot: Option<std::path::PathBuf>, exercise: Option<String>, frames: u32) -> anyhow::Result<()> {
    let opts = gpulab::app::AppOptions { screenshot, exercise, frames };
    Ok(gpulab::app::run(opts)?)
}

/// A headless build has no window to open: say so and point at what it can do.
#[cfg(not(feature = "gui"))]
fn open_lab(screenshot: Option<std::path::PathBuf>, _exercise: Option<String>, _frames: u32) -> anyhow::Result<()> {
    let what =
        if screenshot.is_some() { "--screenshot needs the lab window, but" } else { "gpulab with no subcommand opens the lab window, but" };
    anyhow::bail!(
        "{what} this build has no GUI (built with --no-default-features). Use the headless commands — `gpulab list`, `gpulab run <exercise>`, `gpulab train`, `gpulab bench`, `gpulab info` (see `gpulab --help`) — or build with the default `gui` feature (`cargo build --release`) for the lab."
    )
}
