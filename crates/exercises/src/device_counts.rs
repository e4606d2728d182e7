//! The device work a GPU run counted (dispatches, submissions, waits, objects created, bytes
//! moved), as one table row per training run: `TrainBridge` emits a run's row when its
//! `TrainEvent::Counts` arrives, and `monitor::run_monitored` gathers the rows of every run of
//! an exercise into its report. Every figure is a count divided by steps or windows: measured.

use gpulab_systems::report::{Cell, Column, Provenance, Table};
use gpulab_systems::train::RunCounts;

/// The table's title (the monitor finds the rows by it).
pub const TITLE: &str = "Device work per training step (after the first log window)";

/// The table with one row per (run, counts).
pub fn table(rows: &[(String, RunCounts)]) -> Table {
    let per_step = |name: &str, unit: &str, decimals| Column::num(name, unit, decimals, Provenance::Measured);
    let derived = Provenance::derived("the counted workgroups and invocations");
    Table {
        title: TITLE.into(),
        columns: vec![
            Column::text("run"),
            Column::num("steps", "", 0, Provenance::Measured),
            per_step("dispatches", "per step", 1),
            per_step("queue submissions", "per step", 2),
            per_step("CPU waits on the GPU", "per log window", 2),
            per_step("bind groups created", "per step", 2),
            per_step("buffers created", "per step", 2),
            per_step("uploaded", "KiB per step", 1),
            per_step("read back", "KiB per step", 2),
            per_step("workgroups", "per step", 0),
            Column::num("invocations per workgroup", "mean", 0, derived),
            Column::num("bind groups + buffers created", "first log window", 0, Provenance::Measured),
        ],
        rows: rows.iter().map(|(name, c)| row(name, c)).collect(),
    }
}

/// Per step after the first log window (its one-time costs are the last column); a run with
/// a single window is shown whole.
fn row(name: &str, c: &RunCounts) -> Vec<Cell> {
    let (steps, windows, t) = if c.windows > 1 { c.steady() } else { (c.steps, c.windows, c.total) };
    let t = &t;
    let first = c.first.bind_groups_created + c.first.buffers_created;
    let n = steps.max(1) as f64;
    vec![
        name.into(),
        (steps as f64).into(),
        (t.dispatches as f64 / n).into(),
        (t.submits as f64 / n).into(),
        (t.waits as f64 / windows.max(1) as f64).into(),
        (t.bind_groups_created as f64 / n).into(),
        (t.buffers_created as f64 / n).into(),
        (t.bytes_uploaded as f64 / 1024.0 / n).into(),
        (t.bytes_read_back as f64 / 1024.0 / n).into(),
        (t.workgroups as f64 / n).into(),
        (t.workgroups > 0).then(|| t.invocations as f64 / t.workgroups as f64).into(),
        (first as f64).into(),
    ]
}

/// Adds `new`'s rows to `into` (a row of the same run replaces the older one).
pub fn merge(into: &mut Table, new: Table) {
    for r in new.rows {
        match into.rows.iter_mut().find(|o| o.first() == r.first()) {
            Some(o) => *o = r,
            None => into.rows.push(r),
        }
    }
}
