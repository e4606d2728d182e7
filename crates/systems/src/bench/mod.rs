//! Benchmarks shared by `gpulab bench` and `cargo bench`: speed is measured here, never in
//! tests. Each result is checked against the CPU reference before its speed is reported.

mod matmul;
mod matmul16;
mod matmul_i8;
mod ratios;
mod step_gemms;
mod train_step;

pub use matmul::{
    MatmulDType, MatmulRow, bench_matmul, bench_matmul_on, random_matrix, time_matmul, time_matmul_samples, time_op, time_op_spread,
};
pub use matmul_i8::{random_i8, time_matmul_i8};
pub use matmul16::time_matmul16;
pub use ratios::{SpeedRatio, speed_ratios};
pub use train_step::{SlowWindows, TrainBenchConfig, TrainBenchRow, bench_train, bench_train_amp};
