//! Settings and helpers the training exercises share.

use super::Exercise;
use super::live::LiveChartSpec;
use super::settings::{self, Settings, Value};
use gpulab_core::tensor::{MemCategory, MemoryReport};
use gpulab_systems::report::{CheckCard, Metadata, Report};

/// The "backend" setting of a single-backend exercise (read by each exercise's config: `settings::Backends`).
pub fn one_backend(s: Settings) -> Settings {
    s.add(
        "backend",
        "Backend",
        &format!("Where to train: {}", gpulab_core::device::registry::spellings()),
        Value::Devices(vec!["gpu".into()]),
    )
}

/// The model and data settings every training exercise has.
pub fn training_settings(s: Settings, dataset: &str, hidden: &[u64], batch: i64, epochs: i64) -> Settings {
    training_settings_every(s, dataset, hidden, batch, epochs, 10)
}

/// `training_settings` with `log_every` defaulting to `log_every` steps (exercises 4 and 7 log
/// every 5, so a one-epoch default run has windows enough to judge its noise: `noise::run_spread`).
pub fn training_settings_every(s: Settings, dataset: &str, hidden: &[u64], batch: i64, epochs: i64, log_every: i64) -> Settings {
    s.add(
        "dataset",
        "Data set",
        "digits (embedded), shapes[:res=16,channels=1,n=4000,noise=0.1] (generated), or idx:DIR (MNIST files you have)",
        Value::Text(dataset.into()),
    )
    .add("hidden", "Hidden layers", "Widths of the hidden layers, e.g. 256,128", settings::list(hidden, 1, 16384))
    .add("batch", "Batch size", "Samples per training step", settings::int(batch, 1, 65536))
    .add("epochs", "Epochs", "Passes over the training data", settings::int(epochs, 1, 1000))
    .add("lr", "Learning rate", "Optimizer step size: around 0.05 for SGD, 0.001 for AdamW", settings::float(0.05, 1e-6, 10.0))
    .add("optimizer", "Optimizer", "SGD with momentum 0.9, or AdamW", settings::choice("sgd", &["sgd", "adamw"]))
    .add("seed", "Seed", "Same seed, same data order and initial weights on every backend", settings::int(42, 0, i64::MAX))
    .add(
        "log_every",
        "Log every",
        "Read loss and accuracy back from the device every N steps (each read-back makes the CPU wait for the GPU)",
        settings::int(log_every, 1, 100_000),
    )
}

/// The "model" setting of the exercises that can train the small CNN (read by `settings::training::Training`;
/// an exercise without it trains the MLP).
pub fn model_setting(s: Settings) -> Settings {
    s.add("model", "Model", "mlp, or cnn: 3×3 convolutions to 16 then 32 channels, each with ReLU and 2×2 max-pool, then the hidden layers — for image data sets", settings::choice("mlp", &["mlp", "cnn"]))
}

/// The memory settings of the exercises that teach the out-of-memory remedies (read by
/// `settings::training::Training`; an exercise without them trains whole batches and stores activations).
pub fn memory_settings(s: Settings) -> Settings {
    s.add(
        "accumulate",
        "Micro-batches per step",
        "Gradient accumulation: each batch runs as this many equal micro-batches whose gradients are summed before one optimizer step — the same update, a micro-batch's activations (must divide every batch size)",
        settings::int(1, 1, 4096),
    )
    .add(
        "recompute",
        "Recompute activations",
        "Activation recomputation (checkpointing): keep only the layers' input and recompute hidden outputs in backward — less activation memory, more compute",
        Value::Bool(false),
    )
}

/// The "precision" setting of the exercises that train in one precision of their choice (read
/// by `settings::training::Training`; an exercise without it trains in fp32).
pub fn precision_setting(s: Settings) -> Settings {
    s.add(
        "precision",
        "Precision",
        "fp32, or mixed precision: fp16 (with a GradScaler; needs SHADER_F16 on a GPU) or bf16 — see exercise 3",
        settings::choice("fp32", &["fp32", "fp16", "bf16"]),
    )
}

/// The per-step training loss every training run reports live (`sink::TrainBridge`).
pub fn loss_live_chart() -> LiveChartSpec {
    LiveChartSpec::line("loss", "Training loss", "step", "loss (cross-entropy)")
}

/// The live charts of a training run: the loss per read-back, the validation accuracy per
/// epoch, GPU busy % and memory by category per read-back (what `sink::TrainBridge` emits).
pub fn training_live_charts() -> Vec<LiveChartSpec> {
    let mut c = vec![loss_live_chart(), LiveChartSpec::line("val_accuracy", "Validation accuracy", "epoch", "accuracy (%)")];
    c.extend(super::watch::live_charts());
    c
}

pub fn percent(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// "0.70 s" or, below a second, "4.2 ms".
pub fn duration(secs: f64) -> String {
    if secs >= 1.0 { format!("{secs:.2} s") } else { format!("{:.1} ms", secs * 1e3) }
}

/// A report for `ex` run with settings `s`: the fields every exercise fills the same way (its id,
/// title, the settings as given, the machine); the exercise adds its figures, tables and verdict
/// with `Report { figures, .., ..report_for(ex, s, meta) }`.
pub fn report_for(ex: &(impl Exercise + ?Sized), s: &Settings, metadata: Metadata) -> Report {
    let check_yourself =
        super::lessons::check_yourself(ex.lesson()).into_iter().map(|c| CheckCard { question: c.question, answer: c.answer }).collect();
    Report {
        exercise: ex.id().into(),
        title: format!("Exercise {} · {}", ex.number(), ex.title()),
        config: s.to_map(),
        metadata,
        check_yourself,
        ..Default::default()
    }
}

/// A checkpoint interval given in hours: "2.5 h", "40 min", or "4.2 s" when a calibrated run's
/// millisecond checkpoints put the optimum under a minute (it would print as "0 min").
pub fn interval_h(hours: f64) -> String {
    let min = hours * 60.0;
    if min >= 120.0 {
        format!("{hours:.1} h")
    } else if min >= 1.0 {
        format!("{min:.0} min")
    } else {
        format!("{:.1} s", min * 60.0)
    }
}

pub fn plural(n: usize, word: &str) -> String {
    if n == 1 { format!("1 {word}") } else { format!("{n} {word}s") }
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// The first figure whose label starts with `prefix`, else the report's first figure: how an
/// exercise names its key figure (`Exercise::key_figure`).
pub fn figure_or_first<'r>(report: &'r Report, prefix: &str) -> Option<&'r gpulab_systems::report::Figure> {
    report.figures.iter().find(|f| f.label.starts_with(prefix)).or(report.figures.first())
}

/// The ledger categories the memory tables show: what training holds (staging and other are
/// transient and would only add empty columns).
pub const MEMORY_CATEGORIES: [MemCategory; 5] =
    [MemCategory::Parameters, MemCategory::Gradients, MemCategory::OptimizerState, MemCategory::Activations, MemCategory::Inputs];

/// Peak bytes of `cat` in a ledger report; 0 for a category it never saw.
pub fn peak(m: &MemoryReport, cat: MemCategory) -> u64 {
    m.categories.iter().find(|c| c.0 == cat).map(|c| c.2).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_reads_the_peak_column_and_zero_for_absent_categories() {
        let m = MemoryReport {
            categories: vec![(MemCategory::Parameters, 10, 40), (MemCategory::Activations, 0, 7)],
            total_current: 10,
            total_peak: 47,
            budget: None,
        };
        assert_eq!(peak(&m, MemCategory::Parameters), 40);
        assert_eq!(peak(&m, MemCategory::Activations), 7);
        assert_eq!(peak(&m, MemCategory::Gradients), 0);
    }

    #[test]
    fn intervals_keep_their_size_in_words() {
        assert_eq!(interval_h(2.5), "2.5 h");
        assert_eq!(interval_h(40.0 / 60.0), "40 min");
        // A millisecond checkpoint's optimum is seconds, not "0 min".
        assert_eq!(interval_h(4.2 / 3600.0), "4.2 s");
    }
}
