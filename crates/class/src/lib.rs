//! The class view: many machines' reports side by side. `read` walks a folder tree of
//! students' exported `report.json` files, groups them by exercise, and turns each group into a
//! table (a row per report: the machine, its adapters and drivers, the date, the exercise's
//! key figure, `Exercise::key_figure`, with its provenance, and the driver telemetry the run
//! recorded) and a bar chart of the key figure
//! per machine. Files that are not gpulab reports are listed with the reason and skipped.
//! No GUI or terminal code: the CLI (`gpulab class`) and the lab draw what this returns;
//! `export` writes it as CSV, `html` as one self-contained page.

mod export;
mod html;
mod scan;

use std::path::{Path, PathBuf};

use gpulab_core::error::Result;
use gpulab_core::tensor::BackendKind;
use gpulab_systems::report::{Cell, Chart, Column, Figure, Report, Series, Table};

pub use export::{CSV_HEADER, csv_text, write_all, write_csv, write_html};
pub use html::html_page;
pub use scan::{MAX_DEPTH, MAX_ENTRIES, MAX_FILE_BYTES, MAX_SCAN_BYTES};

/// Every report found under a folder, grouped by exercise, and the files skipped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Class {
    /// The folder that was read.
    pub root: PathBuf,
    /// One group per exercise that has at least one report, in the chapter's order.
    pub groups: Vec<ExerciseGroup>,
    /// Files that looked like reports but could not be used, with the reason.
    pub skipped: Vec<Skipped>,
    /// Set when the walk stopped at a bound (entries or depth): says which.
    pub truncated: Option<String>,
}

/// A file left out of the class view and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Skipped {
    /// The path below the root folder.
    pub file: String,
    pub reason: String,
}

/// All the reports of one exercise.
#[derive(Clone, Debug, PartialEq)]
pub struct ExerciseGroup {
    pub id: String,
    pub number: u32,
    pub title: String,
    /// One row per report, sorted by file path.
    pub rows: Vec<MachineRow>,
}

/// One report: the machine it ran on and the exercise's key figure.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineRow {
    /// The path below the root folder.
    pub file: String,
    /// CPU name, threads and OS, as the report's metadata says.
    pub host: String,
    /// The GPU backends (wgpu adapters, CUDA devices) the run used; a software adapter is
    /// labelled as one.
    pub adapters: Vec<String>,
    /// The drivers of those adapters (empty strings dropped).
    pub drivers: Vec<String>,
    /// Backend kinds used: cpu, gpu, cuda.
    pub backends: Vec<String>,
    /// When the run started (RFC 3339, as recorded).
    pub date: String,
    pub gpulab_version: String,
    /// `Exercise::key_figure` of the report, with its provenance as recorded.
    pub key: Option<Figure>,
    /// The driver telemetry the run recorded, one line per device (`exercises::monitor`), or
    /// that none was; None where the report has neither.
    pub telemetry: Option<String>,
    pub stopped_early: bool,
}

/// The longest string a row keeps from a report (a host name, an adapter, a key figure's
/// label): a crafted report's 30 MB string is cut here, saying so, so a class of them holds
/// kilobytes per row instead of the strings themselves.
pub const MAX_TEXT_BYTES: usize = 4096;

/// `s`, cut to `MAX_TEXT_BYTES` (at a character boundary) with a note of how much was cut.
fn keep(s: &str) -> String {
    if s.len() <= MAX_TEXT_BYTES {
        return s.to_string();
    }
    let mut end = MAX_TEXT_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes cut)", &s[..end], s.len() - end)
}

/// A key figure with its strings held to `MAX_TEXT_BYTES`.
fn keep_figure(f: &Figure) -> Figure {
    let provenance = match &f.provenance {
        gpulab_systems::report::Provenance::Derived(s) => gpulab_systems::report::Provenance::Derived(keep(s)),
        gpulab_systems::report::Provenance::Simulated(s) => gpulab_systems::report::Provenance::Simulated(keep(s)),
        p => p.clone(),
    };
    Figure { label: keep(&f.label), value: f.value, unit: keep(&f.unit), provenance }
}

impl MachineRow {
    fn from_report(file: String, r: &Report, key: Option<&Figure>) -> Self {
        let m = &r.metadata;
        let gpus: Vec<_> = m.backends.iter().filter(|b| b.kind != BackendKind::Cpu).collect();
        let mut adapters: Vec<String> = gpus
            .iter()
            .map(|b| if b.software { format!("{} (software GPU: runs on your CPU)", keep(&b.name)) } else { keep(&b.name) })
            .collect();
        adapters.dedup();
        let mut drivers: Vec<String> = gpus.iter().map(|b| keep(b.driver.trim())).filter(|d| !d.is_empty()).collect();
        drivers.dedup();
        let mut backends: Vec<String> = m.backends.iter().map(|b| b.kind.name().to_string()).collect();
        backends.sort();
        backends.dedup();
        MachineRow {
            file,
            host: keep(&m.host),
            adapters,
            drivers,
            backends,
            date: keep(&m.started_at),
            gpulab_version: keep(&m.gpulab_version),
            key: key.map(keep_figure),
            telemetry: gpulab_exercises::monitor::class_summary(r).map(|t| keep(&t)),
            stopped_early: r.stopped_early,
        }
    }

    /// A short name for the machine: its first hardware adapter (else its first adapter, else
    /// "CPU only") and its CPU.
    pub fn machine(&self) -> String {
        let cpu = self.host.split(" (").next().unwrap_or(&self.host).trim();
        // A hardware adapter names the machine better than a software one beside it.
        let gpu = match self.adapters.iter().find(|a| !a.contains("software GPU")).or(self.adapters.first()) {
            Some(a) => {
                let name = a.split(" (").next().unwrap_or(a);
                if a.contains("software GPU") { format!("{name} (software GPU)") } else { name.to_string() }
            }
            None => "CPU only".to_string(),
        };
        if cpu.is_empty() { gpu } else { format!("{gpu} · {cpu}") }
    }
}

/// Reads every report under `dir` (see `scan` for which files and the bounds). An unreadable
/// `dir` is an error; everything wrong inside it is a `Skipped` entry.
pub fn read(dir: &Path) -> Result<Class> {
    scan::read(dir)
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 { format!("1 {word}") } else { format!("{n} {word}s") }
}

/// Decimals for a column of values: about three significant digits for the typical one.
fn decimals_for(values: &[f64]) -> usize {
    let mut mags: Vec<f64> = values.iter().filter(|v| v.is_finite()).map(|v| v.abs()).collect();
    mags.sort_by(f64::total_cmp);
    match mags.get(mags.len() / 2) {
        Some(m) if *m >= 100.0 => 0,
        Some(m) if *m >= 10.0 => 1,
        Some(m) if *m >= 1.0 => 2,
        Some(_) => 3,
        None => 2,
    }
}

/// The one value shared by every item, if there is one.
fn common<T: PartialEq + Clone>(mut items: impl Iterator<Item = T>) -> Option<T> {
    let first = items.next()?;
    items.all(|x| x == first).then_some(first)
}

impl ExerciseGroup {
    fn keys(&self) -> impl Iterator<Item = &Figure> {
        self.rows.iter().filter_map(|r| r.key.as_ref())
    }

    /// The key figure's unit when every row's key figure has the same one.
    pub fn unit(&self) -> Option<String> {
        common(self.keys().map(|f| f.unit.clone()))
    }

    /// The key figure's label when every row's is the same, else a generic name.
    pub fn key_name(&self) -> String {
        common(self.keys().map(|f| f.label.clone())).unwrap_or_else(|| "key figure".into())
    }

    /// The class table: a row per report, the key figure with its provenance on every row.
    pub fn table(&self) -> Table {
        let unit = self.unit();
        let provenance = common(self.keys().map(|f| f.provenance.clone()));
        let values: Vec<f64> = self.keys().map(|f| f.value).collect();
        let value_col =
            Column { name: "value".into(), unit: unit.clone().unwrap_or_default(), decimals: decimals_for(&values), provenance };
        // The key figure right after the machine, so it shows without scrolling sideways.
        let columns = vec![
            Column::text("#"),
            Column::text("machine"),
            Column::text("key figure"),
            value_col,
            Column::text("source"),
            Column::text("date"),
            Column::text("run"),
            Column::text("driver telemetry"),
            Column::text("CPU / host"),
            Column::text("adapters"),
            Column::text("driver"),
            Column::text("backends"),
            Column::text("file"),
        ];
        let list = |v: &[String]| if v.is_empty() { Cell::Empty } else { Cell::Text(v.join("; ")) };
        let rows = self
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let (label, value, source) = match &r.key {
                    Some(f) if unit.is_some() => (Cell::from(f.label.as_str()), Cell::Num(f.value), Cell::Text(f.provenance.label())),
                    // Units differ between rows: each value carries its own.
                    Some(f) => (
                        Cell::from(f.label.as_str()),
                        Cell::Text(gpulab_core::format::with_unit(f.value, &f.unit)),
                        Cell::Text(f.provenance.label()),
                    ),
                    None => (Cell::from("none in this report"), Cell::Empty, Cell::Empty),
                };
                vec![
                    Cell::Text((i + 1).to_string()),
                    Cell::Text(r.machine()),
                    label,
                    value,
                    source,
                    Cell::Text(r.date.clone()),
                    Cell::from(if r.stopped_early { "stopped early" } else { "complete" }),
                    r.telemetry.clone().map(Cell::Text).unwrap_or(Cell::Empty),
                    Cell::Text(r.host.clone()),
                    list(&r.adapters),
                    list(&r.drivers),
                    list(&r.backends),
                    Cell::Text(r.file.clone()),
                ]
            })
            .collect();
        Table { title: format!("Exercise {} · {}", self.number, self.title), columns, rows }
    }

    /// The key figure per machine as bars (x: the row's # in the table: machine 1, 2, …), one series per
    /// provenance so every bar keeps its label. Rows without a key figure, or whose unit
    /// differs from the first row's, are left out. None when no row has a key figure.
    pub fn chart(&self) -> Option<Chart> {
        let first_unit = self.keys().next()?.unit.clone();
        let mut series: Vec<Series> = Vec::new();
        for (i, r) in self.rows.iter().enumerate() {
            let Some(f) = r.key.as_ref().filter(|f| f.unit == first_unit && f.value.is_finite()) else { continue };
            let point = [(i + 1) as f64, f.value];
            match series.iter_mut().find(|s| s.provenance == f.provenance) {
                Some(s) => s.points.push(point),
                None => series.push(Series { name: "key figure".into(), points: vec![point], provenance: f.provenance.clone() }),
            }
        }
        if series.is_empty() {
            return None;
        }
        Some(
            Chart::bars(&format!("class-{}", self.id), &format!("{} per machine", self.key_name()), "machine", &first_unit)
                .with_series(series),
        )
    }
}

impl Class {
    /// How many reports were read into the groups.
    pub fn report_count(&self) -> usize {
        self.groups.iter().map(|g| g.rows.len()).sum()
    }

    /// One line for the top of every view: reports, exercises, skipped files, bounds hit.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} from {} under {}; {} skipped.",
            plural(self.report_count(), "report"),
            plural(self.groups.len(), "exercise"),
            self.root.display(),
            plural(self.skipped.len(), "file")
        );
        if let Some(t) = &self.truncated {
            s.push_str(&format!(" {t}"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_systems::report::Provenance;

    fn row(file: &str, key: Option<(f64, &str)>) -> MachineRow {
        MachineRow {
            file: file.into(),
            host: "CPU X (4 threads), linux".into(),
            adapters: vec![],
            drivers: vec![],
            backends: vec!["cpu".into()],
            date: String::new(),
            gpulab_version: String::new(),
            key: key.map(|(value, unit)| Figure { label: format!("k {unit}"), value, unit: unit.into(), provenance: Provenance::Measured }),
            telemetry: None,
            stopped_early: false,
        }
    }

    /// A report that fell back to another figure (another unit) keeps its own unit in the
    /// table and stays out of the chart; a report without figures shows an empty value.
    #[test]
    fn mixed_units_and_missing_key_figures() {
        let g = ExerciseGroup {
            id: "x".into(),
            number: 1,
            title: "X".into(),
            rows: vec![row("a", Some((2.5, "×"))), row("b", Some((120.0, "requests/s"))), row("c", None)],
        };
        assert_eq!(g.unit(), None);
        let t = g.table();
        let v = t.columns.iter().position(|c| c.name == "value").unwrap();
        assert_eq!(t.columns[v].unit, "");
        assert_eq!(t.rows[0][v], Cell::Text("2.5 ×".into()));
        assert_eq!(t.rows[1][v], Cell::Text("120 requests/s".into()));
        assert_eq!(t.rows[2][v], Cell::Empty);
        let c = g.chart().unwrap();
        assert_eq!(c.y_label, "×");
        assert_eq!(c.series.iter().flat_map(|s| s.points.clone()).collect::<Vec<_>>(), vec![[1.0, 2.5]]);
        let none = ExerciseGroup { rows: vec![row("c", None)], ..g };
        assert!(none.chart().is_none());
    }
}
