use clap::{Args, Subcommand};
use gpulab::bench::{self, MatmulDType, MatmulRow, TrainBenchConfig};
use gpulab::device::{Device, Engine, registry};
use gpulab::nn::{AmpConfig, ModelKind, OptimizerKind, Precision};
use gpulab::tensor::BackendKind;
use gpulab::with_backend;

use super::progress;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// GEMM GOP/s (f32 and/or int8) on the CPU and each GPU kernel variant, median of several
    /// runs, each result checked.
    Matmul(MatmulArgs),
    /// Full training steps per second of an MLP on random data.
    Train(TrainArgs),
}

#[derive(Args)]
pub struct MatmulArgs {
    #[arg(long, value_delimiter = ',', default_value = "256,1024,2048")]
    sizes: Vec<usize>,
    #[arg(long, default_value = "all", help = format!(
        "{}, or all (every backend at its default device; one that cannot open is skipped with a note)",
        registry::spellings()
    ))]
    backend: String,
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Element types to time, e.g. f32,f16,bf16,int8 (f16/bf16: 16-bit operands, f32 products,
    /// the mixed-precision GEMM, every GPU variant; int8: i8 operands, exact i32 products).
    #[arg(long, value_delimiter = ',', default_value = "f32", value_parser = parse_dtype)]
    dtype: Vec<MatmulDType>,
    /// One JSON object per line on stdout.
    #[arg(long)]
    json: bool,
}

fn parse_dtype(s: &str) -> Result<MatmulDType, String> {
    match s {
        "f32" => Ok(MatmulDType::F32),
        "int8" | "i8" => Ok(MatmulDType::Int8),
        "f16" => Ok(MatmulDType::F16),
        "bf16" => Ok(MatmulDType::BF16),
        other => Err(format!("unknown --dtype {other:?}: expected f32, f16, bf16 or int8")),
    }
}

#[derive(Args)]
pub struct TrainArgs {
    #[arg(long, default_value = "cpu", help = format!("Where to time: {}", registry::spellings()))]
    backend: String,
    #[arg(long, default_value_t = 784)]
    input: usize,
    #[arg(long, value_delimiter = ',', default_value = "256,128")]
    hidden: Vec<usize>,
    #[arg(long, default_value_t = 10)]
    classes: usize,
    /// mlp, or cnn: 3×3 convolutions (16 and 32 channels, ReLU, 2×2 max-pool) in front of the
    /// same dense layers, on images of --image.
    #[arg(long, default_value = "mlp")]
    model: String,
    /// The CNN's input images, CHANNELSxHEIGHTxWIDTH (their values must number --input;
    /// default: one channel, square).
    #[arg(long)]
    image: Option<String>,
    /// One or more batch sizes, e.g. 32,128,512.
    #[arg(long, value_delimiter = ',', default_value = "128")]
    batch: Vec<usize>,
    /// Seconds to time each batch size.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Training precisions to time, e.g. fp32,fp16,bf16 (fp16 with a GradScaler, bf16
    /// unscaled, as exercise 3 trains them). Interleaved per batch size.
    #[arg(long, value_delimiter = ',', default_value = "fp32")]
    precision: Vec<Precision>,
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
    // `all`: every backend at its default device; one that cannot open (or that this build
    // lacks) is skipped with a note, and the CPU always opens. Otherwise the one device named.
    let all = a.backend == "all";
    let devices: Vec<Device> = if all { registry::BACKENDS.iter().map(|b| b.default_device()).collect() } else { vec![a.backend.parse()?] };
    // Every backend opens first, so a refusal is said before the long GEMM runs.
    let mut engines: Vec<Engine> = Vec::new();
    for d in &devices {
        match d.open(None) {
            Ok(e) => engines.push(e),
            Err(e) if all => eprintln!("note: {} skipped: {e}", d.kind().name().to_uppercase()),
            Err(e) => return Err(e.into()),
        }
    }
    // The CPU (the reference every product is checked against) and the wgpu backend time their
    // own rows, size by size; every other backend times its one GEMM after them.
    let cpu = engines.iter().any(|e| e.kind() == BackendKind::Cpu);
    let mut gpu = None;
    let mut others = Vec::new();
    for e in &mut engines {
        match e.kind() {
            BackendKind::Cpu => {}
            BackendKind::Gpu => gpu = e.as_gpu_mut(),
            _ => others.push(e),
        }
    }
    let pb = progress::spinner("measuring GEMM");
    let print = |r: &MatmulRow| {
        if a.json {
            pb.suspend(|| println!("{}", serde_json::to_string(r).unwrap_or_default()));
        } else {
            let line = format!(
                "n={:<5} {:<4} {:>9.2} GOP/s  {:>10.3} ms  {:<58} {:<18} max rel err {:.1e}",
                r.n,
                r.dtype,
                r.gflops,
                r.median_s * 1e3,
                r.backend,
                r.variant,
                r.max_rel_err
            );
            pb.suspend(|| println!("{line}"));
        }
    };
    let mut rows = if cpu || gpu.is_some() { bench::bench_matmul(&a.sizes, &a.dtype, a.runs, cpu, gpu, print) } else { Ok(Vec::new()) };
    for e in others {
        let Ok(done) = &mut rows else { break };
        let gemm = registry::spec(e.kind()).gemm;
        // CUDA: TF32 (tensor cores, 10-bit mantissas) is opt-in, off for the plain f32 row and
        // timed as its own row after it, so its speed and its larger error are both shown.
        let tf32_was = e.as_cuda_mut().map(|c| c.tf32());
        if let Some(c) = e.as_cuda_mut() {
            c.set_tf32(false);
        }
        let mut r = with_backend!(&mut *e, b => bench::bench_matmul_on(b, gemm, &a.sizes, &a.dtype, a.runs, print));
        if let (Some(c), Some(was)) = (e.as_cuda_mut(), tf32_was) {
            if a.dtype.contains(&MatmulDType::F32) {
                c.set_tf32(true);
                r = r.and_then(|mut v| {
                    bench::bench_matmul_on(c, &format!("{gemm} TF32"), &a.sizes, &[MatmulDType::F32], a.runs, print).map(|t| {
                        v.extend(t);
                        v
                    })
                });
            }
            c.set_tf32(was);
        }
        match r {
            Ok(r) => done.extend(r),
            Err(e) => rows = Err(e),
        }
    }
    pb.finish_and_clear();
    let rows = rows?;
    if !a.json {
        eprintln!(
            "measured on this machine: median of {} runs each; GOP/s = 2n³ / time (FLOP/s for f32, f16 and bf16, integer OP/s for int8)",
            a.runs
        );
        ratios(&rows);
        if rows.iter().any(|r| r.software) {
            eprintln!("note: software GPU: runs on your CPU — its GFLOP/s are your CPU's, not a GPU's.");
        }
    }
    Ok(())
}

/// int8, f16 and bf16 ÷ f32 speed per backend and size (`bench::speed_ratios`, derived).
fn ratios(rows: &[MatmulRow]) {
    for r in bench::speed_ratios(rows) {
        eprintln!("n={:<5} {} / f32 = {:.2}x on {} (derived)", r.n, r.dtype, r.ratio, r.backend);
    }
}

/// The model `--model` and `--image` name, checked before anything is timed.
fn bench_model(a: &TrainArgs) -> anyhow::Result<gpulab::nn::MlpConfig> {
    let kind: ModelKind = a.model.parse()?;
    let image = match &a.image {
        Some(s) => {
            let dims: Vec<usize> = s
                .split('x')
                .map(|d| d.trim().parse::<usize>())
                .collect::<Result<_, _>>()
                .map_err(|_| anyhow::anyhow!("--image {s:?} is not CHANNELSxHEIGHTxWIDTH, e.g. 1x28x28"))?;
            <[usize; 3]>::try_from(dims).map_err(|_| anyhow::anyhow!("--image {s:?} is not CHANNELSxHEIGHTxWIDTH, e.g. 1x28x28"))?
        }
        None => {
            let side = (a.input as f64).sqrt().round() as usize;
            [1, side, side]
        }
    };
    if kind == ModelKind::Cnn && image.iter().product::<usize>() != a.input {
        anyhow::bail!(
            "--model cnn on --image {}x{}x{} needs --input {} (it is {}); give both",
            image[0],
            image[1],
            image[2],
            image.iter().product::<usize>(),
            a.input
        );
    }
    Ok(kind.config(image, a.input, &a.hidden, a.classes)?)
}

fn train(a: TrainArgs) -> anyhow::Result<()> {
    let device: Device = a.backend.parse()?;
    let mut engine = device.open(None)?;
    if !a.json {
        eprintln!(
            "measured on this machine: samples/s and wall ms/step from the whole timed run; median, p90 and worst of windows of 10 steps; GFLOP/s is derived"
        );
    }
    let conv = bench_model(&a)?.conv;
    for &batch in &a.batch {
        let cfg = TrainBenchConfig {
            input: a.input,
            hidden: a.hidden.clone(),
            classes: a.classes,
            batch,
            seconds: a.seconds,
            min_steps: 20,
            optimizer: OptimizerKind::Sgd,
            conv: conv.clone(),
        };
        let mut fp32_rate = None;
        for &p in &a.precision {
            let pb = progress::spinner(&format!("timing batch {batch} at {}", p.name()));
            let row = with_backend!(&mut engine, b => bench::bench_train_amp(b, &cfg, AmpConfig::new(p)));
            pb.finish_and_clear();
            let row = row?;
            if p == Precision::F32 {
                fp32_rate = Some(row.samples_per_s);
            }
            if a.json {
                println!("{}", serde_json::to_string(&row)?);
            } else {
                let ratio = fp32_rate
                    .filter(|_| p != Precision::F32)
                    .map(|f| format!(" | {:.2}× fp32 (derived)", row.samples_per_s / f))
                    .unwrap_or_default();
                println!(
                    "{} | {} | {:<16} | batch {:>4} | {:>9.0} samples/s | {:>7.3} ms/step wall | windows {:.3} median {:.3} p90 {:.3} worst | {:>6.2} GFLOP/s (derived) | {} steps{ratio}",
                    row.backend,
                    if conv.is_some() { row.model.clone() } else { format!("MLP {}", row.model) },
                    row.precision,
                    row.batch,
                    row.samples_per_s,
                    row.step_ms_wall,
                    row.step_ms_median,
                    row.step_ms_p90,
                    row.step_ms_worst,
                    row.gflops,
                    row.steps
                );
                if let Some(g) = row.gemm_ms_median {
                    let share = 100.0 * g / row.step_ms_median;
                    // Timed apart, the GEMMs can come out no faster than the whole step (a
                    // software adapter's noise): then nothing outside them is measurable here.
                    let rest = if share < 100.0 {
                        "the rest is everything else the step does (bias, ReLU, loss, optimizer, the batch's copy)"
                    } else {
                        "no less than the whole step, so what else it does is within the noise of these windows"
                    };
                    println!(
                        "    its GEMMs alone (same shapes, timed here): {g:.3} ms median window = {share:.0} % of the step's median window (derived); {rest}"
                    );
                }
                let s = &row.slow_windows;
                if s.count > 0 {
                    println!(
                        "    {} windows above the p90: per window {:.0} page faults (others {:.0}), {:.0} voluntary / {:.0} involuntary context switches (others {:.0} / {:.0})",
                        s.count,
                        s.minor_faults_slow,
                        s.minor_faults_typical,
                        s.voluntary_switches_slow,
                        s.involuntary_switches_slow,
                        s.voluntary_switches_typical,
                        s.involuntary_switches_typical
                    );
                }
            }
        }
    }
    Ok(())
}
