//! Exercise 1: the same model, data and seed on the CPU and on each selected GPU, then a matmul
//! size sweep that finds where (or whether) the GPU starts to win.

use super::common::{self, percent};
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink, TrainBridge};
use super::{Exercise, Preset};
use crate::common::report_for;
use gpulab_core::device::telemetry::UtilizationSampler;
use gpulab_core::device::{Device, Engine};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{BackendInfo, prelude::*};
use gpulab_core::with_backend;
use gpulab_systems::bench::{random_matrix, time_matmul};
use gpulab_systems::report::{Cell, Chart, ChartKind, Column, Figure, Metadata, Provenance, Report, Series, Table, Verdict};
use gpulab_systems::train::{self, TrainReport};

pub struct CpuVsGpu;

/// One backend's training result (or why it has none).
struct Trained {
    device: String,
    info: Option<BackendInfo>,
    result: std::result::Result<TrainReport, String>,
    /// Mean GPU utilisation NVML reported during training (NVIDIA only).
    nvml_utilization: Option<f64>,
}

/// The label every GPU's speed ratio starts with (the class view charts it across machines).
const SPEED_RATIO: &str = "GPU / CPU training speed";

impl Exercise for CpuVsGpu {
    fn id(&self) -> &'static str {
        "cpu-vs-gpu"
    }
    fn number(&self) -> u32 {
        1
    }
    fn title(&self) -> &'static str {
        "CPU vs GPU"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../lessons/01-cpu-vs-gpu.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[("backends", "cpu"), ("epochs", "1"), ("hidden", "32"), ("sweep_sizes", "16,32"), ("sweep_runs", "1")]
    }

    /// The GPU / CPU training-speed ratio, of a hardware GPU where one ran.
    fn key_figure<'r>(&self, report: &'r Report) -> Option<&'r Figure> {
        let ratios = || report.figures.iter().filter(|f| f.label.starts_with(SPEED_RATIO));
        ratios().find(|f| !f.label.contains("software GPU")).or_else(|| ratios().next()).or(report.figures.first())
    }

    fn live_charts(&self) -> Vec<super::LiveChartSpec> {
        let mut c = common::training_live_charts();
        c.push(super::LiveChartSpec::line("gflops", "Matmul speed", "matrix size n", "GFLOP/s").log_x());
        c
    }
    fn settings(&self) -> Settings {
        let s = Settings::default().add(
            "backends",
            "Backends",
            &format!(
                "Where to train: {}; gpu is the best adapter, gpu:N its index in the hardware panel",
                gpulab_core::device::registry::spellings()
            ),
            Value::Devices(vec!["cpu".into(), "gpu".into()]),
        );
        let s = common::model_setting(common::training_settings(s, "digits", &[128, 64], 64, 5))
            .add("sweep_sizes", "Matmul sizes", "n for the n×n×n matmul sweep", settings::list(&[64, 128, 256, 512, 1024], 1, 8192))
            .add("sweep_runs", "Runs per size", "Timed runs per matmul size (the median is reported)", settings::int(3, 1, 50));
        super::sizing::settings(s)
    }

    fn presets(&self) -> Vec<Preset> {
        super::sizing::presets(
            "The lesson's small model: a few seconds anywhere, and too small for any GPU to win at training",
            (
                "A 2048-wide MLP at batch 256 on 64×64 colour shapes, and matmuls up to n = 4096: enough work per step for a GPU to win",
                &[("batch", "256"), ("epochs", "3"), ("sweep_sizes", "256,512,1024,2048,4096")],
            ),
            (
                "The model sized from the GPU's measured peak (cached per adapter) so its training takes about 20 s on a laptop or a workstation",
                &[("batch", "256"), ("target_s", "20"), ("sweep_sizes", "256,512,1024,2048")],
            ),
        )
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        s.devices("backends")?;
        common::validate_training(s)?;
        s.list("sweep_sizes")?;
        s.int("sweep_runs")?;
        super::sizing::validate(s)
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        self.validate(s)?;
        let data = common::load_dataset(s)?;
        let devices = s.devices("backends")?;
        // size=auto sizes the model for the first GPU chosen (the CPU when none is).
        let sizing_device = devices.iter().find(|d| !matches!(d, Device::Cpu)).or(devices.first()).cloned().unwrap_or(Device::Cpu);
        let (resolved, sizing) = super::sizing::resolve(s, &sizing_device, &data, 1.0, 0.0, sink)?;
        let s = &resolved;
        let cfg = common::train_config(s, s.int("batch")? as usize)?;
        let sizes: Vec<usize> = s.list("sweep_sizes")?.into_iter().map(|v| v as usize).collect();
        let runs = s.int("sweep_runs")? as usize;

        let mut meta = Metadata::new(cfg.seed);
        meta.dataset = format!("{} — {}", data.name, data.source);
        meta.hyperparameters = s.to_map();
        meta.hyperparameters.insert("architecture".into(), common::architecture(s, &data)?);

        // Training on every backend, one after another.
        let mut engines: Vec<(String, Engine)> = Vec::new();
        let mut trained = Vec::new();
        for d in &devices {
            if sink.stop_requested() {
                break;
            }
            sink.emit(Event::Phase(format!("training on {d}")));
            let mut engine = match d.open(None) {
                Ok(e) => e,
                Err(e) => {
                    sink.emit(Event::Log(format!("{d}: {e}")));
                    trained.push(Trained { device: d.to_string(), info: None, result: Err(e.to_string()), nvml_utilization: None });
                    continue;
                }
            };
            let info = with_backend!(&mut engine, b => b.info());
            let series = short_label(&info);
            sink.emit(Event::Log(format!("training on {}", info.label())));
            let sampler = if info.kind != gpulab_core::tensor::BackendKind::Cpu { UtilizationSampler::start(&info.name) } else { None };
            let result = with_backend!(&mut engine, b => {
                let mut bridge = TrainBridge { sink: &mut *sink, series, total_steps: 0 };
                train::train(b, &data, &cfg, &mut bridge)
            });
            if let Err(e) = &result {
                sink.emit(Event::Log(format!("{}: {e}", info.label())));
            }
            let nvml_utilization = sampler.and_then(UtilizationSampler::finish);
            trained.push(Trained {
                device: d.to_string(),
                info: Some(info.clone()),
                result: result.map_err(|e| e.to_string()),
                nvml_utilization,
            });
            meta.backends.push(info);
            engines.push((d.to_string(), engine));
            sink.emit(Event::Table(training_table(&trained)));
        }

        // The matmul sweep on the CPU (always, as the baseline) and every GPU that opened.
        let mut sweep: Vec<(BackendInfo, Vec<(usize, f64)>)> = Vec::new();
        if !engines.iter().any(|(_, e)| e.kind() == gpulab_core::tensor::BackendKind::Cpu) {
            engines.insert(0, ("cpu".into(), Device::Cpu.open(None)?));
        }
        'sweep: for (_, engine) in engines.iter_mut() {
            let info = with_backend!(&mut *engine, b => b.info());
            sink.emit(Event::Phase(format!("matmul sweep on {}", short_label(&info))));
            let mut points = Vec::new();
            for (i, &n) in sizes.iter().enumerate() {
                if sink.stop_requested() {
                    sweep.push((info, points));
                    break 'sweep;
                }
                let (a, bm) = (random_matrix(n * n, 1), random_matrix(n * n, 2));
                let secs = with_backend!(&mut *engine, b => time_matmul(b, &a, &bm, n, runs));
                match secs {
                    Ok((secs, _)) => {
                        let gflops = 2.0 * (n as f64).powi(3) / secs / 1e9;
                        points.push((n, gflops));
                        sink.emit(Event::Point {
                            chart: "gflops".into(),
                            series: short_label(&info),
                            x: n as f64,
                            y: gflops,
                            provenance: Provenance::Measured,
                        });
                    }
                    Err(e) => sink.emit(Event::Log(format!("{} n={n}: {e}", short_label(&info)))),
                }
                sink.emit(Event::Progress { done: i as u64 + 1, total: sizes.len() as u64 });
            }
            sweep.push((info, points));
        }

        let stopped_early = sink.stop_requested();
        let mut report = build_report(self, s, meta, &trained, &sweep, stopped_early);
        super::sizing::annotate(sizing.as_ref(), &mut report);
        if trained.iter().all(|t| t.result.is_err()) && !stopped_early {
            let why: Vec<String> = trained.iter().filter_map(|t| t.result.as_ref().err().map(|e| format!("{}: {e}", t.device))).collect();
            return Err(Error::InvalidConfig(format!("no backend could train: {}", why.join("; "))));
        }
        Ok(report)
    }
}

/// A short name for charts: "CPU" or the adapter name with "(software)" where it applies.
pub(super) fn short_label(info: &BackendInfo) -> String {
    // "llvmpipe (LLVM 15.0.6, 256 bits)" → "llvmpipe": the details are in the full label.
    let name = info.name.split(" (").next().unwrap_or(&info.name);
    match info.kind {
        gpulab_core::tensor::BackendKind::Cpu => "CPU".into(),
        _ if info.software => format!("{name} {} (software GPU)", info.api),
        _ => format!("{name} {}", info.api),
    }
}

fn training_table(trained: &[Trained]) -> Table {
    let mut t = Table {
        title: "Training".into(),
        columns: vec![
            Column::text("backend"),
            Column::num("training time", "s", 2, Provenance::Measured),
            Column::num("throughput", "samples/s", 0, Provenance::Measured),
            Column::num("median step", "ms", 3, Provenance::Measured),
            Column::num("GPU busy", "%", 0, Provenance::derived("GPU timestamp queries ÷ training time")),
            Column::num("NVML utilisation", "%", 0, Provenance::derived("mean of the NVIDIA driver's utilisation samples every 100 ms")),
            Column::num("validation accuracy", "%", 2, Provenance::Measured),
            Column::num("peak memory", "MiB", 2, Provenance::derived("gpulab's allocation ledger")),
            Column::text("status"),
        ],
        rows: Vec::new(),
    };
    for tr in trained {
        let name = tr.info.as_ref().map(|i| i.label()).unwrap_or_else(|| tr.device.clone());
        t.rows.push(match &tr.result {
            Ok(r) => vec![
                name.into(),
                r.train_wall_s.into(),
                r.samples_per_s.into(),
                r.median_step_ms.into(),
                r.gpu_busy_fraction.map(|f| f * 100.0).into(),
                tr.nvml_utilization.into(),
                (r.final_val_accuracy * 100.0).into(),
                common::mib(r.memory.total_peak).into(),
                if r.stopped_early { "stopped" } else { "ok" }.into(),
            ],
            Err(e) => {
                let mut row = vec![Cell::from(name)];
                row.extend(std::iter::repeat_n(Cell::Empty, 7));
                row.push(format!("failed: {e}").into());
                row
            }
        });
    }
    t
}

/// The first size from which the GPU beats the CPU at every larger size, if any.
fn crossover(cpu: &[(usize, f64)], gpu: &[(usize, f64)]) -> Option<usize> {
    let wins: Vec<(usize, bool)> = gpu.iter().filter_map(|(n, g)| cpu.iter().find(|(m, _)| m == n).map(|(_, c)| (*n, g > c))).collect();
    let first_loss_from_end = wins.iter().rposition(|(_, w)| !w);
    match first_loss_from_end {
        None => wins.first().map(|(n, _)| *n),
        Some(i) => wins.get(i + 1).map(|(n, _)| *n),
    }
}

fn build_report(
    ex: &CpuVsGpu,
    s: &Settings,
    meta: Metadata,
    trained: &[Trained],
    sweep: &[(BackendInfo, Vec<(usize, f64)>)],
    stopped_early: bool,
) -> Report {
    let mut report = Report { stopped_early, ..report_for(ex, s, meta) };
    report.tables.push(training_table(trained));

    // Sweep table: one row per size, one column per backend, plus GPU/CPU ratios.
    let cpu_points =
        sweep.iter().find(|(i, _)| i.kind == gpulab_core::tensor::BackendKind::Cpu).map(|(_, p)| p.clone()).unwrap_or_default();
    let gpus: Vec<&(BackendInfo, Vec<(usize, f64)>)> =
        sweep.iter().filter(|(i, _)| i.kind != gpulab_core::tensor::BackendKind::Cpu).collect();
    let mut columns = vec![
        Column::num("n", "", 0, Provenance::Measured),
        Column::num("CPU", "GFLOP/s", 2, Provenance::derived("2n³ ÷ median measured time")),
    ];
    for (info, _) in &gpus {
        columns.push(Column::num(&short_label(info), "GFLOP/s", 2, Provenance::derived("2n³ ÷ median measured time")));
        columns.push(Column::num(&format!("{} ÷ CPU", short_label(info)), "×", 3, Provenance::derived("the two GFLOP/s columns")));
    }
    let mut sizes: Vec<usize> = sweep.iter().flat_map(|(_, p)| p.iter().map(|(n, _)| *n)).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let at = |points: &[(usize, f64)], n: usize| points.iter().find(|(m, _)| *m == n).map(|(_, g)| *g);
    let rows = sizes
        .iter()
        .map(|&n| {
            let cpu = at(&cpu_points, n);
            let mut row = vec![Cell::Num(n as f64), cpu.into()];
            for (_, p) in &gpus {
                let g = at(p, n);
                row.push(g.into());
                row.push(g.zip(cpu).map(|(g, c)| g / c).into());
            }
            row
        })
        .collect();
    report.tables.push(Table { title: "Matmul sweep".into(), columns, rows });

    // Charts.
    let mut loss = Chart {
        id: "loss".into(),
        title: "Training loss".into(),
        x_label: "step".into(),
        y_label: "loss".into(),
        kind: ChartKind::Line,
        log_x: false,
        series: vec![],
        markers: vec![],
    };
    let mut acc = Chart {
        id: "val_accuracy".into(),
        title: "Validation accuracy".into(),
        x_label: "epoch".into(),
        y_label: "accuracy (%)".into(),
        ..loss.clone()
    };
    for t in trained {
        if let (Ok(r), Some(info)) = (&t.result, &t.info) {
            let name = short_label(info);
            // The loss per epoch is what the report keeps; live charts show every read-back.
            loss.series.push(Series {
                name: name.clone(),
                points: r.epochs.iter().map(|e| [(e.epoch + 1) as f64, e.train_loss]).collect(),
                provenance: Provenance::Measured,
            });
            acc.series.push(Series {
                name,
                points: r.epochs.iter().map(|e| [(e.epoch + 1) as f64, e.val_accuracy * 100.0]).collect(),
                provenance: Provenance::Measured,
            });
        }
    }
    loss.x_label = "epoch".into();
    let mut gflops = Chart {
        id: "gflops".into(),
        title: "Matmul throughput".into(),
        x_label: "matrix size n".into(),
        y_label: "GFLOP/s".into(),
        kind: ChartKind::Line,
        log_x: true,
        series: vec![],
        markers: vec![],
    };
    for (info, p) in sweep {
        gflops.series.push(Series {
            name: short_label(info),
            points: p.iter().map(|(n, g)| [*n as f64, *g]).collect(),
            provenance: Provenance::derived("2n³ ÷ median measured time"),
        });
    }

    // Verdict, from the numbers.
    let mut v = Verdict::default();
    let cpu_run = trained.iter().find_map(|t| match (&t.result, &t.info) {
        (Ok(r), Some(i)) if i.kind == gpulab_core::tensor::BackendKind::Cpu => Some(r),
        _ => None,
    });
    let gpu_runs: Vec<(&BackendInfo, &TrainReport, Option<f64>)> = trained
        .iter()
        .filter_map(|t| match (&t.result, &t.info) {
            (Ok(r), Some(i)) if i.kind != gpulab_core::tensor::BackendKind::Cpu => Some((i, r, t.nvml_utilization)),
            _ => None,
        })
        .collect();
    let mut summary = Vec::new();
    for (info, r, nvml) in &gpu_runs {
        let name = short_label(info);
        if let Some(c) = cpu_run {
            let speedup = c.train_wall_s / r.train_wall_s.max(1e-12);
            let (word, factor) = if speedup >= 1.0 { ("faster", speedup) } else { ("slower", 1.0 / speedup) };
            report.figures.push(Figure {
                label: format!("{name} trains {word} than the CPU by"),
                value: factor,
                unit: "×".into(),
                provenance: Provenance::derived("the two measured training times"),
            });
            // The same comparison as one signed-direction ratio (above 1: the GPU is faster),
            // which compares across machines.
            report.figures.push(Figure {
                label: format!("{SPEED_RATIO} ({name})"),
                value: speedup,
                unit: "×".into(),
                provenance: Provenance::derived("CPU training time ÷ GPU training time"),
            });
            summary.push(format!(
                "Training on {name} took {} against {} on the CPU: {factor:.1}× {word}.",
                common::duration(r.train_wall_s),
                common::duration(c.train_wall_s)
            ));
            let why = if info.software {
                format!(
                    "{name} is a software GPU: runs on your CPU. It emulates GPU threads on the same cores the CPU backend uses, and pays for the emulation, so it cannot win here."
                )
            } else if let Some(busy) = r.gpu_busy_fraction.filter(|b| *b < 0.5) {
                format!(
                    "The GPU was busy only {} of the training time: this model is too small to keep it fed, and per-step costs (submitting work, reading back results) dominate. Bigger batches or a bigger model move the balance.",
                    percent(busy)
                )
            } else if speedup >= 1.0 {
                format!(
                    "The GPU was busy {} of the time, so the win comes from its parallel arithmetic.",
                    r.gpu_busy_fraction.map(percent).unwrap_or_else(|| "an unmeasured share".into())
                )
            } else {
                "The GPU's arithmetic advantage does not cover its per-step overheads at this size.".to_string()
            };
            summary.push(why);
        }
        v.evidence.push(format!(
            "{name}: {:.0} samples/s, median step {:.3} ms, GPU busy {}{}, validation accuracy {:.2}%.",
            r.samples_per_s,
            r.median_step_ms,
            r.gpu_busy_fraction.map(percent).unwrap_or_else(|| "not measurable (no timestamp queries)".into()),
            nvml.map(|u| format!(" (the NVIDIA driver reported {u:.0}% utilisation)")).unwrap_or_default(),
            r.final_val_accuracy * 100.0
        ));
    }
    if let Some(c) = cpu_run {
        v.evidence.push(format!(
            "CPU: {:.0} samples/s, median step {:.3} ms, validation accuracy {:.2}%.",
            c.samples_per_s,
            c.median_step_ms,
            c.final_val_accuracy * 100.0
        ));
    }
    for (info, p) in gpus.iter().map(|g| (&g.0, &g.1)) {
        let name = short_label(info);
        let peak_g = p.iter().map(|(_, g)| *g).fold(0.0, f64::max);
        let peak_c = cpu_points.iter().map(|(_, g)| *g).fold(0.0, f64::max);
        match crossover(&cpu_points, p) {
            Some(n) => {
                gflops.markers.push((n as f64, format!("{name} wins from n = {n}")));
                v.evidence.push(format!("Matmul: {name} beats the CPU from n = {n} upward (peaks {peak_g:.1} vs {peak_c:.1} GFLOP/s)."));
            }
            None => v.evidence.push(format!(
                "Matmul: {name} does not beat the CPU at any size up to n = {} on this machine (peaks {peak_g:.1} vs {peak_c:.1} GFLOP/s).",
                p.last().map(|(n, _)| *n).unwrap_or(0)
            )),
        }
    }
    if summary.is_empty() {
        summary.push(match cpu_run {
            Some(c) => format!(
                "Only the CPU trained ({:.2} s, {:.0} samples/s); select a GPU backend to compare.",
                c.train_wall_s, c.samples_per_s
            ),
            None => "No backend finished training; see the status column.".into(),
        });
    }
    v.summary = summary.join(" ");
    report.note_software_backends();
    report.verdict = v;
    report.charts = vec![loss, acc, gflops];
    report
}

#[cfg(test)]
mod tests {
    use super::crossover;

    #[test]
    fn crossover_is_where_the_gpu_keeps_winning() {
        let cpu = [(64, 10.0), (128, 10.0), (256, 10.0), (512, 10.0)];
        assert_eq!(crossover(&cpu, &[(64, 1.0), (128, 12.0), (256, 9.0), (512, 20.0)]), Some(512));
        assert_eq!(crossover(&cpu, &[(64, 11.0), (128, 12.0), (256, 13.0), (512, 20.0)]), Some(64));
        assert_eq!(crossover(&cpu, &[(64, 1.0), (128, 2.0), (256, 3.0), (512, 4.0)]), None);
    }
}
