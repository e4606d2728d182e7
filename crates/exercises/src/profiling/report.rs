//! Exercise 7's report parts: the kernel table, the roofline chart and the one-click next step.

use super::run::fix_for;
use gpulab_systems::profile::kernels::KernelRow;
use gpulab_systems::profile::peaks::Peaks;
use gpulab_systems::profile::session::ProfiledRun;
use gpulab_systems::report::{Cell, Chart, Column, Provenance, Series, Suggestion, Table};

/// The fix for the last run's bottleneck, as settings the lab applies with one click before
/// profiling again (the last run is the optimized one when `measure_again` ran).
pub(super) fn next_step(runs: &[ProfiledRun]) -> Option<Suggestion> {
    let last = runs.last()?;
    let (what, p, batch) = fix_for(last.diagnosis.bottleneck, &last.pipeline, last.train.config.batch)?;
    let settings = [
        ("num_workers", p.num_workers.to_string()),
        ("prefetch_factor", p.prefetch_factor.to_string()),
        ("cache", p.cache.to_string()),
        ("pin_memory", p.pin_memory.to_string()),
        ("batch", batch.to_string()),
    ];
    Some(Suggestion {
        label: format!("Apply the fix for run {} ({what}) and profile again", last.label),
        settings: settings.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    })
}

pub(super) fn kernel_table(title: &str, rows: &[KernelRow], p: Option<&Peaks>) -> Table {
    let est = || Provenance::derived("kernel timestamps and estimated FLOPs/bytes");
    let columns = vec![
        Column::text("kernel"),
        Column::num("count", "", 0, Provenance::Measured),
        Column::num("total", "ms", 2, Provenance::Measured),
        Column::num("mean", "µs", 1, Provenance::Measured),
        Column::num("achieved", "GFLOP/s", 2, est()),
        Column::num("achieved", "GB/s", 2, est()),
        Column::num("of peak compute", "%", 1, est()),
        Column::num("of peak bandwidth", "%", 1, est()),
        Column::text("roofline"),
    ];
    let rows = rows
        .iter()
        .map(|r| {
            vec![
                Cell::from(r.name.as_str()),
                Cell::Num(r.count as f64),
                (r.total_s * 1e3).into(),
                (r.mean_s() * 1e6).into(),
                r.gflops().into(),
                r.gbps().into(),
                p.map(|p| r.gflops() * 1e9 / p.flops_per_s * 100.0).into(),
                p.map(|p| r.gbps() * 1e9 / p.bytes_per_s * 100.0).into(),
                p.map(|p| if r.memory_bound(p) { "memory-bound" } else { "compute-bound" }).unwrap_or("—").into(),
            ]
        })
        .collect();
    Table { title: title.into(), columns, rows }
}

/// Kernels by arithmetic intensity (log x) and achieved GFLOP/s (log10 on y), under the roofs
/// made of the measured peaks.
pub(super) fn roofline(rows: &[KernelRow], p: &Peaks) -> Chart {
    let mut series: Vec<Series> = rows
        .iter()
        .filter(|r| r.flops > 0.0 && r.bytes > 0.0)
        .map(|r| Series {
            name: r.name.clone(),
            points: vec![[r.intensity(), r.gflops().max(1e-6).log10()]],
            provenance: Provenance::derived("kernel timestamps and estimated FLOPs/bytes"),
        })
        .collect();
    let roof =
        (-12..=16).map(|i| 10f64.powf(i as f64 / 4.0)).map(|x| [x, ((p.bytes_per_s * x).min(p.flops_per_s) / 1e9).log10()]).collect();
    series.insert(
        0,
        Series {
            name: "roof: min(peak compute, peak bandwidth × intensity)".into(),
            points: roof,
            provenance: Provenance::derived("the measured peaks"),
        },
    );
    Chart {
        markers: vec![(p.ridge(), "ridge point".into())],
        ..Chart::line(
            "roofline",
            &format!("Roofline (ridge at {:.2} FLOP/byte)", p.ridge()),
            "arithmetic intensity (FLOP/byte)",
            "log10 achieved GFLOP/s",
        )
        .log_x()
        .with_series(series)
    }
}
