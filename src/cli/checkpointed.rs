//! `gpulab train --checkpoint-dir …`: training that saves checkpoints and can resume after a
//! crash. With --jsonl it reports one JSON event per line on stdout and saves on a "save" line
//! on stdin — how the lab's checkpoint exercise drives it as a child process.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Args;
use gpulab::checkpoint::{ChildSpec, Policy, run_child};
use gpulab::train::{TrainConfig, TrainEvent};

#[derive(Args)]
pub struct CheckpointArgs {
    /// Save checkpoints (safetensors) in this folder.
    #[arg(long = "checkpoint-dir", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Save every N steps (0 = not by steps).
    #[arg(long = "checkpoint-every", default_value_t = 20, requires = "dir")]
    every_steps: u64,
    /// Save every E epochs (0 = not by epochs).
    #[arg(long = "checkpoint-every-epochs", default_value_t = 0, requires = "dir")]
    every_epochs: usize,
    /// Keep the newest K checkpoints.
    #[arg(long = "keep-last", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..), requires = "dir")]
    keep_last: u64,
    /// Continue from the newest valid checkpoint in the folder.
    #[arg(long, requires = "dir")]
    resume: bool,
    /// Report JSON lines on stdout; a line "save" on stdin asks for a checkpoint.
    #[arg(long, requires = "dir")]
    jsonl: bool,
}

pub fn run(a: CheckpointArgs, backend: String, dataset: String, cfg: TrainConfig, json: bool) -> anyhow::Result<()> {
    let dir = a.dir.expect("checked by the caller");
    let policy = Policy { every_steps: a.every_steps, every_epochs: a.every_epochs, keep_last: a.keep_last as usize, at_end: true };
    let spec = ChildSpec { backend, dataset, cfg, dir, policy, resume: a.resume };
    let request = Arc::new(AtomicBool::new(false));
    if a.jsonl {
        let flag = request.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines().map_while(|l| l.ok()) {
                if line.trim() == "save" {
                    flag.store(true, Ordering::Relaxed);
                }
            }
        });
        // The parent reads these lines; once it has gone there is no one to train for.
        let mut emit = |ev: TrainEvent| {
            if writeln!(std::io::stdout(), "{}", ev.to_line()).is_err() {
                std::process::exit(1);
            }
        };
        return match run_child(&spec, &mut emit, request) {
            Ok(_) => Ok(()),
            Err(e) => {
                println!("{}", TrainEvent::Failed { message: e.to_string() }.to_line());
                Err(e.into())
            }
        };
    }
    let mut progress = super::train::TrainProgress::new();
    let report = run_child(&spec, &mut |ev| progress.event(ev), request);
    progress.finish();
    let report = report?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        super::train::print_summary(&report);
    }
    Ok(())
}
