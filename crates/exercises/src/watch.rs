//! Watching the device during training: the two live charts every training exercise declares
//! and fills per log window — GPU busy % (the backend's busy time from GPU timestamps over the
//! window's wall time) and the memory ledger by category. One helper; `sink::TrainBridge` calls
//! it for every training run's log windows (in process, a replica's, a child's JSON lines).

use super::live::LiveChartSpec;
use super::sink::{Event, Sink};
use gpulab_core::tensor::{MemCategory, MemoryReport};
use gpulab_systems::report::{Cell, Chart, Column, Provenance, Series, Table};
pub use gpulab_systems::train::{Recorder, Window};

pub const GPU_BUSY: &str = "gpu_busy";
pub const MEMORY: &str = "memory";

fn busy_provenance() -> Provenance {
    Provenance::derived("GPU timestamps ÷ the log window's wall time")
}

/// The two charts, for an exercise's `live_charts()`.
pub fn live_charts() -> Vec<LiveChartSpec> {
    vec![
        LiveChartSpec::line(
            GPU_BUSY,
            "GPU busy per log window (GPU timestamps; none on the CPU or without timestamp queries)",
            "step",
            "GPU busy (% of wall time)",
        )
        .provenance(busy_provenance()),
        LiveChartSpec::line(MEMORY, "Memory held, by ledger category", "step", "MiB"),
    ]
}

/// Emits the window's points: busy % on `run`'s series, and one memory series per category
/// ("activations", or "GPU · activations" when `run` names one of several runs).
pub fn emit(sink: &mut dyn Sink, run: &str, w: &Window) {
    let x = w.step as f64;
    if let Some(pct) = w.busy_percent() {
        let series = if run.is_empty() { "GPU busy".to_string() } else { run.to_string() };
        sink.emit(Event::Point { chart: GPU_BUSY.into(), series, x, y: pct, provenance: busy_provenance() });
    }
    for &(cat, bytes) in &w.memory {
        let series = if run.is_empty() { cat.name().to_string() } else { format!("{run} · {}", cat.name()) };
        sink.emit(Event::Point { chart: MEMORY.into(), series, x, y: super::common::mib(bytes), provenance: Provenance::Measured });
    }
}

/// Memory over a run by ledger category, one line per category (and per run when several are
/// drawn): a report chart from recorded windows.
pub fn memory_chart(runs: &[(&str, &[Window])]) -> Chart {
    let mut series: Vec<Series> = Vec::new();
    for (run, windows) in runs {
        for cat in MemCategory::ALL {
            let points: Vec<[f64; 2]> = windows
                .iter()
                .filter_map(|w| w.memory.iter().find(|m| m.0 == cat).map(|m| [w.step as f64, super::common::mib(m.1)]))
                .collect();
            if !points.is_empty() {
                let name = if runs.len() == 1 { cat.name().to_string() } else { format!("run {run} · {}", cat.name()) };
                series.push(Series { name, points, provenance: Provenance::Measured });
            }
        }
    }
    Chart::line("memory_over_run", "Memory held over the run, by ledger category (at each log window)", "step", "MiB").with_series(series)
}

/// Peak bytes per ledger category (the ledger's own peaks, so allocations between log windows
/// count too), one column per run, and the share of the largest.
pub fn peaks_table(runs: &[(&str, &MemoryReport)]) -> Table {
    let mut columns = vec![Column::text("category")];
    for (run, _) in runs {
        columns.push(Column::num(&format!("peak · run {run}"), "MiB", 2, Provenance::Measured));
    }
    let total: Vec<u64> = runs.iter().map(|r| r.1.total_peak).collect();
    let mut rows: Vec<Vec<Cell>> = MemCategory::ALL
        .iter()
        .filter(|&&cat| runs.iter().any(|r| super::common::peak(r.1, cat) > 0))
        .map(|&cat| {
            let mut row = vec![Cell::from(cat.name())];
            row.extend(runs.iter().map(|r| Cell::Num(super::common::mib(super::common::peak(r.1, cat)))));
            row
        })
        .collect();
    let mut row = vec![Cell::from("all categories at once (peak of the total)")];
    row.extend(total.iter().map(|&t| Cell::Num(super::common::mib(t))));
    rows.push(row);
    Table { title: "Peak memory by category (ledger)".into(), columns, rows }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::CollectSink;

    #[test]
    fn busy_percent_is_busy_over_wall_capped_and_absent_without_timestamps() {
        let w = |busy, wall| Window { step: 10, wall_s: wall, busy_s: busy, ..Default::default() };
        assert_eq!(w(Some(0.25), 1.0).busy_percent(), Some(25.0));
        assert_eq!(w(Some(1.2), 1.0).busy_percent(), Some(100.0));
        assert_eq!(w(None, 1.0).busy_percent(), None);
        assert_eq!(w(Some(0.1), 0.0).busy_percent(), None);
    }

    #[test]
    fn emit_names_series_by_run_and_category_and_skips_busy_on_the_cpu() {
        let report = MemoryReport {
            categories: vec![(MemCategory::Parameters, 1 << 20, 1 << 21), (MemCategory::Staging, 0, 9)],
            total_current: 1 << 20,
            total_peak: 1 << 21,
            budget: None,
        };
        let mut sink = CollectSink::default();
        emit(
            &mut sink,
            "CPU",
            &Window { step: 5, wall_s: 0.5, busy_s: None, memory: gpulab_systems::train::memory_held(&report), ..Default::default() },
        );
        emit(&mut sink, "", &Window { step: 6, wall_s: 0.5, busy_s: Some(0.25), ..Default::default() });
        let points: Vec<(String, String, f64, f64)> = sink
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Point { chart, series, x, y, .. } => Some((chart.clone(), series.clone(), *x, *y)),
                _ => None,
            })
            .collect();
        assert_eq!(points, vec![(MEMORY.into(), "CPU · parameters".into(), 5.0, 1.0), (GPU_BUSY.into(), "GPU busy".into(), 6.0, 50.0)]);
    }

    #[test]
    fn the_memory_chart_and_peak_table_follow_the_ledger() {
        let w = |step, act| Window {
            step,
            wall_s: 0.1,
            busy_s: None,
            memory: vec![(MemCategory::Parameters, 1 << 20), (MemCategory::Activations, act)],
            ..Default::default()
        };
        let windows = vec![w(10, 2 << 20), w(20, 3 << 20)];
        let chart = memory_chart(&[("1", &windows)]);
        let names: Vec<&str> = chart.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["parameters", "activations"]);
        assert_eq!(chart.series[1].points, vec![[10.0, 2.0], [20.0, 3.0]]);
        let report = MemoryReport {
            categories: vec![
                (MemCategory::Parameters, 1 << 20, 1 << 20),
                (MemCategory::Activations, 0, 4 << 20),
                (MemCategory::Other, 0, 0),
            ],
            total_current: 1 << 20,
            total_peak: 5 << 20,
            budget: None,
        };
        let t = peaks_table(&[("1", &report)]);
        assert_eq!(t.rows.len(), 3, "parameters, activations and the total; empty categories left out");
        assert!(matches!(t.rows[1][1], Cell::Num(v) if v == 4.0));
        assert!(matches!(t.rows[2][1], Cell::Num(v) if v == 5.0));
    }
}
