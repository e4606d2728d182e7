//! `gpulab export torch --exercise distributed --out DIR [--set k=v ...]`: writes exercise 6's
//! experiment as a PyTorch DDP program (see `exercises::torch_export`).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use gpulab::exercises::{self, torch_export};

#[derive(Subcommand)]
pub enum ExportCommand {
    /// A runnable PyTorch DDP script (train_ddp.py for torchrun) with the same model, initial
    /// weights, data, shuffling order and hyperparameters.
    Torch(TorchArgs),
}

#[derive(Args)]
pub struct TorchArgs {
    /// The exercise to export; only `distributed` (6) can be exported today.
    #[arg(long)]
    exercise: String,
    /// Folder to write train_ddp.py, config.json, init.safetensors, data.safetensors,
    /// gpulab_losses.json and README.txt into.
    #[arg(long)]
    out: PathBuf,
    /// Override one of the exercise's settings, e.g. --set batch=64 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

pub fn run(c: ExportCommand) -> anyhow::Result<()> {
    let ExportCommand::Torch(a) = c;
    let ex = exercises::find(&a.exercise)
        .ok_or_else(|| anyhow::anyhow!("--exercise: unknown exercise {:?}; known: {}", a.exercise, exercises::ids().join(", ")))?;
    if ex.id() != "distributed" {
        anyhow::bail!("--exercise: only `distributed` (exercise 6) can be exported to PyTorch, not {:?}", ex.id());
    }
    let mut settings = ex.settings();
    settings.apply(&a.set)?;
    let done = torch_export::export(&settings, &a.out)?;
    for f in &done.files {
        println!("wrote {}", gpulab::text::terminal_line(&f.display().to_string()));
    }
    let first: Vec<String> = done.losses.iter().take(3).map(|l| format!("{l:.4}")).collect();
    println!("gpulab's first losses (CPU backend): {} …", first.join(", "));
    println!(
        "run it: cd {} && torchrun --nproc-per-node 2 train_ddp.py   (or `python train_ddp.py --compare` for one process)",
        a.out.display()
    );
    Ok(())
}
