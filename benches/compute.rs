//! `cargo bench`: GEMM GFLOP/s (CPU and every GPU matmul variant) and MLP training
//! throughput, through the same code as `gpulab bench`. Speed lives here, not in tests.

use gpulab::bench::{MatmulDType, TrainBenchConfig, bench_matmul, bench_train};
use gpulab::device::{CpuBackend, GpuBackend, GpuSelector};
use gpulab::nn::OptimizerKind;

fn main() {
    // `cargo test --benches` runs this too; keep that quick.
    let quick = std::env::args().any(|a| a == "--test");
    let sizes: &[usize] = if quick { &[64] } else { &[256, 1024, 2048] };
    let mut gpu = match GpuBackend::open(&GpuSelector::Auto, None) {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("GPU benchmarks skipped: {e}");
            None
        }
    };
    println!("GEMM (f32 and int8, median of 5 runs, measured; GOP/s = 2n³ / time)");
    let rows = bench_matmul(sizes, &[MatmulDType::F32, MatmulDType::Int8], if quick { 1 } else { 5 }, true, gpu.as_mut(), |r| {
        println!("  n={:<5} {:<4} {:>9.2} GOP/s  {:<60} {}", r.n, r.dtype, r.gflops, r.backend, r.variant);
    });
    if let Err(e) = rows {
        eprintln!("GEMM benchmark failed: {e}");
    }

    println!("MLP 784-256-128-10 training steps (SGD momentum, random data, measured)");
    for batch in [32, 128, 512] {
        let cfg = TrainBenchConfig {
            input: 784,
            hidden: vec![256, 128],
            classes: 10,
            batch,
            seconds: if quick { 0.01 } else { 3.0 },
            min_steps: if quick { 1 } else { 20 },
            optimizer: OptimizerKind::Sgd,
        };
        let report = |r: gpulab::Result<gpulab::bench::TrainBenchRow>| match r {
            Ok(r) => println!("  batch {:>4} {:>10.0} samples/s {:>8.3} ms/step  {}", r.batch, r.samples_per_s, r.step_ms_median, r.backend),
            Err(e) => eprintln!("  batch {batch}: {e}"),
        };
        report(bench_train(&mut CpuBackend::new(), &cfg));
        if let Some(g) = gpu.as_mut() {
            report(bench_train(g, &cfg));
        }
    }
}
