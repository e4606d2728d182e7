//! Benchmarks shared by `gpulab bench` and `cargo bench`: speed is measured here, never in
//! tests. Each result is checked against the CPU reference before its speed is reported.

mod matmul;
mod train_step;

pub use matmul::{MatmulRow, bench_matmul, random_matrix, time_matmul, time_op};
pub use train_step::{TrainBenchConfig, TrainBenchRow, bench_train};
