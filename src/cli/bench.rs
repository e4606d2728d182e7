use clap::{Args, Subcommand};
use gpulab::bench::{self, MatmulRow, TrainBenchConfig};
use gpulab::device::{Device, Engine, GpuSelector};
use gpulab::nn::OptimizerKind;
use gpulab::with_backend;

use super::progress;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// GEMM GFLOP/s on the CPU and each GPU kernel variant, median of several runs, checked
    /// against the CPU result.
    Matmul(MatmulArgs),
    /// Full training steps per second of an MLP on random data.
    Train(TrainArgs),
}

#[derive(Args)]
pub struct MatmulArgs {
    #[arg(long, value_delimiter = ',', default_value = "256,1024,2048")]
    sizes: Vec<usize>,
    /// cpu, gpu[:N|:NAME], or all (the CPU and the default GPU).
    #[arg(long, default_value = "all")]
    backend: String,
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// One JSON object per line on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct TrainArgs {
    #[arg(long, default_value = "cpu")]
    backend: String,
    #[arg(long, default_value_t = 784)]
    input: usize,
    #[arg(long, value_delimiter = ',', default_value = "256,128")]
    hidden: Vec<usize>,
    #[arg(long, default_value_t = 10)]
    classes: usize,
    /// One or more batch sizes, e.g. 32,128,512.
    #[arg(long, value_delimiter = ',', default_value = "128")]
    batch: Vec<usize>,
    /// Seconds to time each batch size.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Matmul(a) => matmul(a),
        BenchCommand::Train(a) => train(a),
    }
}

fn matmul(a: MatmulArgs) -> anyhow::Result<()> {
    let (cpu, gpu_dev) = match a.backend.as_str() {
        "all" => (true, Some(Device::Gpu(GpuSelector::Auto))),
        other => match other.parse::<Device>()? {
            Device::Cpu => (true, None),
            d => (false, Some(d)),
        },
    };
    let mut gpu = match gpu_dev.map(|d| d.open(None)) {
        Some(Ok(Engine::Gpu(g))) => Some(g),
        Some(Ok(Engine::Cpu(_) | Engine::Cuda(_))) | None => None,
        Some(Err(e)) if cpu => {
            eprintln!("note: GPU skipped: {e}");
            None
        }
        Some(Err(e)) => return Err(e.into()),
    };
    let pb = progress::spinner("measuring GEMM");
    let print = |r: &MatmulRow| {
        if a.json {
            pb.suspend(|| println!("{}", serde_json::to_string(r).unwrap_or_default()));
        } else {
            let line = format!(
                "n={:<5} {:>9.2} GFLOP/s  {:>10.3} ms  {:<58} {:<18} max rel err {:.1e}",
                r.n,
                r.gflops,
                r.median_s * 1e3,
                r.backend,
                r.variant,
                r.max_rel_err
            );
            pb.suspend(|| println!("{line}"));
        }
    };
    let rows = bench::bench_matmul(&a.sizes, a.runs, cpu, gpu.as_deref_mut(), print);
    pb.finish_and_clear();
    let rows = rows?;
    if !a.json {
        eprintln!("measured on this machine: median of {} runs each; GFLOP/s = 2n³ / time", a.runs);
        if rows.iter().any(|r| r.software) {
            eprintln!("note: software GPU: runs on your CPU — its GFLOP/s are your CPU's, not a GPU's.");
        }
    }
    Ok(())
}

fn train(a: TrainArgs) -> anyhow::Result<()> {
    let device: Device = a.backend.parse()?;
    let mut engine = device.open(None)?;
    if !a.json {
        eprintln!("samples/s and ms/step are measured on this machine (median over windows of 10 steps); GFLOP/s is derived from them");
    }
    for &batch in &a.batch {
        let cfg = TrainBenchConfig { input: a.input, hidden: a.hidden.clone(), classes: a.classes, batch, seconds: a.seconds, min_steps: 20, optimizer: OptimizerKind::Sgd };
        let pb = progress::spinner(&format!("timing batch {batch}"));
        let row = with_backend!(&mut engine, b => bench::bench_train(b, &cfg));
        pb.finish_and_clear();
        let row = row?;
        if a.json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!(
                "{} | MLP {} | batch {:>4} | {:>9.0} samples/s | {:>8.3} ms/step (median) | {:>6.2} GFLOP/s (derived) | {} steps",
                row.backend, row.model, row.batch, row.samples_per_s, row.step_ms_median, row.gflops, row.steps
            );
        }
    }
    Ok(())
}
