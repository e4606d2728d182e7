use clap::Args;
use gpulab::data::{self, DatasetSpec};
use gpulab::device::Device;
use gpulab::nn::{AmpConfig, ModelKind, OptimizerKind, Precision};
use gpulab::text::terminal_line;
use gpulab::train::{self, TrainConfig, TrainEvent, TrainReport};
use gpulab::with_backend;

use indicatif::ProgressBar;

use super::progress;

#[derive(Args)]
pub struct TrainArgs {
    #[arg(long, default_value = "gpu", help = format!("Where to train: {}; N is an index from `gpulab info`", gpulab::device::registry::spellings()))]
    backend: String,
    /// digits (embedded), shapes[:res=16,channels=1,n=4000,noise=0.1,classes=4] (generated),
    /// or idx:DIR (MNIST / Fashion-MNIST IDX files you already have).
    #[arg(long, default_value = "digits")]
    dataset: String,
    /// mlp, or cnn: conv3x3(→16) ReLU pool, conv3x3(16→32) ReLU pool, then the hidden layers
    /// (image data sets; fp32).
    #[arg(long, default_value = "mlp")]
    model: String,
    /// Hidden layer widths, e.g. 256,128 (a CNN's dense layers after its convolutions).
    #[arg(long, value_delimiter = ',', default_value = "128,64")]
    hidden: Vec<usize>,
    #[arg(long, default_value_t = 64)]
    batch: usize,
    #[arg(long, default_value_t = 10)]
    epochs: usize,
    #[arg(long, default_value_t = 0.05, allow_negative_numbers = true)]
    lr: f32,
    /// sgd (with momentum) or adamw.
    #[arg(long, default_value = "sgd")]
    optimizer: String,
    #[arg(long, default_value_t = 0.9)]
    momentum: f32,
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f32,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// fp32, or mixed precision: fp16 (with PyTorch's default GradScaler) or bf16 (unscaled).
    #[arg(long, default_value = "fp32")]
    precision: String,
    /// Micro-batches per optimizer step (gradient accumulation); must divide the batch.
    #[arg(long, default_value_t = 1)]
    accumulate: usize,
    /// Recompute hidden activations in backward instead of storing them (checkpointing).
    #[arg(long)]
    recompute: bool,
    /// Read loss and accuracy back from the device every N steps.
    #[arg(long, default_value_t = 20)]
    log_every: usize,
    /// Print the full report as JSON on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    checkpoints: super::checkpointed::CheckpointArgs,
}

pub fn run(a: TrainArgs) -> anyhow::Result<()> {
    let device: Device = a.backend.parse()?;
    let optimizer: OptimizerKind = a.optimizer.parse()?;
    let precision: Precision = a.precision.parse()?;
    let model: ModelKind = a.model.parse()?;
    let cfg = TrainConfig {
        hidden: a.hidden,
        batch: a.batch,
        epochs: a.epochs,
        lr: a.lr,
        optimizer,
        momentum: a.momentum,
        weight_decay: a.weight_decay,
        seed: a.seed,
        log_every: a.log_every,
        amp: AmpConfig::new(precision),
        model,
        accumulate: a.accumulate,
        recompute: a.recompute,
    };
    // Settings are checked before anything slow (data generation, adapter start-up) happens.
    cfg.validate()?;
    if a.checkpoints.dir.is_some() {
        return super::checkpointed::run(a.checkpoints, a.backend, a.dataset, cfg, a.json);
    }
    let spec: DatasetSpec = a.dataset.parse()?;
    let data = data::load(&spec, a.seed)?;
    let mut engine = device.open(None)?;
    let report = with_backend!(&mut engine, b => {
        eprintln!("training {} {} on {} ({} train / {} validation samples) with {}", cfg.model.name(), cfg.hidden.iter().map(|h| h.to_string()).collect::<Vec<_>>().join("-"), terminal_line(&data.name), data.train_len(), data.val_len(), gpulab::tensor::BackendBase::info(b).label());
        run_with_progress(b, &data, &cfg)?
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report);
    }
    Ok(())
}

fn run_with_progress<B: gpulab::tensor::Backend>(b: &mut B, data: &data::Dataset, cfg: &TrainConfig) -> anyhow::Result<TrainReport> {
    eprintln!("per-epoch figures are measured in this run; GPU busy % is derived from GPU timestamp queries");
    let mut progress = TrainProgress::new();
    let report = train::train(b, data, cfg, &mut |ev: TrainEvent| progress.event(ev));
    progress.finish();
    Ok(report?)
}

/// The CLI's face of the training protocol: a progress bar with the latest loss, and a line on
/// stderr per epoch, resume and checkpoint.
pub(super) struct TrainProgress {
    pb: ProgressBar,
}

impl TrainProgress {
    pub(super) fn new() -> Self {
        TrainProgress { pb: progress::bar(0, "train") }
    }

    pub(super) fn finish(&self) {
        self.pb.finish_and_clear();
    }

    pub(super) fn event(&mut self, ev: TrainEvent) {
        // Paths and reasons come from checkpoint files: every line is shown escaped.
        let line = |text: String| self.pb.suspend(|| eprintln!("{}", terminal_line(&text)));
        match ev {
            TrainEvent::Backend { info } => line(format!("training on {}", info.label())),
            TrainEvent::Started { total_steps, .. } => self.pb.set_length(total_steps),
            TrainEvent::Skipped { path, reason, .. } => line(format!("skipped {path}: {reason}")),
            TrainEvent::Resumed { path, step, epoch, batch } => {
                line(format!("resumed from {path}: step {step}, epoch {} batch {batch}", epoch + 1))
            }
            TrainEvent::Fresh => line("starting at step 0".into()),
            TrainEvent::Progress { step, loss, accuracy, .. } => {
                self.pb.set_position(step);
                self.pb.set_message(format!("loss {loss:.4} acc {:.1}%", accuracy * 100.0));
            }
            TrainEvent::Saved { path, bytes, write_s, .. } => {
                line(format!("saved {path}: {bytes} bytes in {:.1} ms (measured)", write_s * 1e3))
            }
            TrainEvent::Epoch(e) => line(format!(
                "epoch {:>3}: train loss {:.4} acc {:5.1}% | val loss {:.4} acc {:5.1}% | {:.0} samples/s{}",
                e.epoch + 1,
                e.train_loss,
                e.train_accuracy * 100.0,
                e.val_loss,
                e.val_accuracy * 100.0,
                e.samples_per_s,
                e.gpu_busy_s.map(|s| format!(" | GPU busy {:.0}%", 100.0 * s / e.train_wall_s.max(1e-12))).unwrap_or_default()
            )),
            _ => {}
        }
    }
}

pub(super) fn print_summary(r: &TrainReport) {
    println!("backend:        {}", r.backend.label());
    println!("data:           {} — {}", terminal_line(&r.dataset), terminal_line(&r.dataset_source));
    // A CNN's description starts with "CNN"; an MLP's is its widths.
    let model = if r.model.starts_with("CNN") { r.model.clone() } else { format!("MLP {}", r.model) };
    println!(
        "model:          {} ({} parameters), {:?}, batch {}, lr {}, {}",
        model,
        r.parameters,
        r.config.optimizer,
        r.config.batch,
        r.config.lr,
        r.config.amp.label()
    );
    if let Some(a) = r.amp.as_ref().filter(|_| r.config.amp.scaling()) {
        let last = a.scale_history.last().map_or(f64::NAN, |s| s[1]);
        println!(
            "loss scale:     {} at the last step; {} of {} steps skipped for inf/NaN gradients (measured)",
            last,
            a.skipped_steps.len(),
            r.steps
        );
    }
    if let Some(a) = &r.amp {
        println!("grad underflow: {:.2}% of nonzero 16-bit activation gradients rounded to zero (measured)", a.flushed_fraction() * 100.0);
    }
    println!(
        "validation acc: {:.2}% after {} (measured)",
        r.final_val_accuracy * 100.0,
        gpulab::format::plural(r.epochs.len() as u64, "epoch")
    );
    println!("training time:  {:.2} s for {} (measured)", r.train_wall_s, gpulab::format::plural(r.steps, "step"));
    println!("throughput:     {:.0} samples/s (measured)", r.samples_per_s);
    println!("step time:      {:.3} ms median (measured, over read-back windows of {} steps)", r.median_step_ms, r.config.log_every);
    match (r.gpu_busy_s, r.gpu_busy_fraction) {
        (Some(s), Some(f)) => println!("GPU busy:       {:.2} s = {:.0}% of training time (derived from GPU timestamps)", s, f * 100.0),
        _ => println!(
            "GPU busy:       unavailable ({})",
            if r.backend.kind == gpulab::tensor::BackendKind::Cpu { "CPU backend" } else { "this adapter has no timestamp queries" }
        ),
    }
    if let Some(c) = &r.device_counts {
        let (steps, _, steady) = c.steady();
        let figures: Vec<String> = steady.per(steps)[..7].iter().map(|(name, v)| format!("{v:.2} {name}")).collect();
        println!("device work:    per step after the first log window: {} (measured: counted by the backend)", figures.join(", "));
        let first = c.first.bind_groups_created + c.first.buffers_created;
        println!(
            "                {:.2} CPU waits per log window over {} windows; {first} bind groups and buffers created in the first (measured)",
            c.total.waits as f64 / c.windows.max(1) as f64,
            c.windows
        );
    }
    println!("peak memory:    {:.2} MiB (measured by gpulab's allocation ledger)", r.memory.total_peak as f64 / (1 << 20) as f64);
    for (cat, _, peak) in &r.memory.categories {
        if *peak > 0 {
            println!("  {:<16} {:>10.1} KiB", cat.name(), *peak as f64 / 1024.0);
        }
    }
    if r.backend.software {
        println!("note: software GPU: runs on your CPU — these are your CPU's numbers, not a GPU's.");
    }
    if r.stopped_early {
        println!("note: the run was stopped early.");
    }
}
