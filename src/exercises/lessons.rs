//! The lessons, embedded so the app needs no files at run time.

const LESSONS: [&str; 10] = [
    include_str!("../../lessons/01-cpu-vs-gpu.md"),
    include_str!("../../lessons/02-batch-size.md"),
    include_str!("../../lessons/03-mixed-precision.md"),
    include_str!("../../lessons/04-input-pipeline.md"),
    include_str!("../../lessons/05-checkpointing.md"),
    include_str!("../../lessons/06-data-parallel.md"),
    include_str!("../../lessons/07-gpu-profiling.md"),
    include_str!("../../lessons/08-inference-batching.md"),
    include_str!("../../lessons/09-int8-quantization.md"),
    include_str!("../../lessons/10-production-platform.md"),
];

/// The lesson of exercise `number` (1–10).
pub fn text(number: u32) -> &'static str {
    LESSONS.get(number.wrapping_sub(1) as usize).copied().unwrap_or("")
}
