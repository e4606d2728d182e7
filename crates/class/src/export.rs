//! The class view's files: `class.csv` (one long table, a row per report of every exercise,
//! ready for a spreadsheet's filter; control characters dropped, and a text cell or list item that
//! starts like a formula gets a leading `'`)
//! and `class.html` (one self-contained page). Written atomically, like the reports.

use std::path::{Path, PathBuf};

use super::Class;
use gpulab_core::error::{Error, Result};
use gpulab_core::text::{csv_text_cell, csv_text_list, without_controls};

/// The CSV's header; every row has these fields.
pub const CSV_HEADER: [&str; 18] = [
    "exercise_number",
    "exercise",
    "exercise_title",
    "row",
    "machine",
    "host",
    "adapters",
    "drivers",
    "backends",
    "started_at",
    "gpulab_version",
    "key_figure",
    "value",
    "unit",
    "provenance",
    "stopped_early",
    "driver_telemetry",
    "file",
];

/// The whole class as one CSV text (an exercise's rows together, in the chapter's order).
pub fn csv_text(class: &Class) -> Result<String> {
    let err = |e: csv::Error| Error::Report(format!("writing the class CSV: {e}"));
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CSV_HEADER).map_err(err)?;
    for g in &class.groups {
        for (i, r) in g.rows.iter().enumerate() {
            let (label, value, unit, prov) = match &r.key {
                Some(f) => (f.label.clone(), f.value.to_string(), f.unit.clone(), f.provenance.label()),
                None => (String::new(), String::new(), String::new(), String::new()),
            };
            // Every text field comes from a student's file: its control characters dropped, and
            // neutralised for spreadsheets (each item of a joined list too).
            let t = |s: &str| csv_text_cell(&without_controls(s)).into_owned();
            let list = |v: &[String]| csv_text_list(&v.iter().map(|s| without_controls(s).into_owned()).collect::<Vec<_>>(), "; ");
            w.write_record([
                g.number.to_string(),
                t(&g.id),
                t(&g.title),
                (i + 1).to_string(),
                t(&r.machine()),
                t(&r.host),
                list(&r.adapters),
                list(&r.drivers),
                list(&r.backends),
                t(&r.date),
                t(&r.gpulab_version),
                t(&label),
                value,
                t(&unit),
                t(&prov),
                r.stopped_early.to_string(),
                t(r.telemetry.as_deref().unwrap_or("")),
                t(&r.file),
            ])
            .map_err(err)?;
        }
    }
    let bytes = w.into_inner().map_err(|e| Error::Report(format!("writing the class CSV: {e}")))?;
    String::from_utf8(bytes).map_err(|e| Error::Report(format!("writing the class CSV: {e}")))
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf> {
    gpulab_core::fsutil::write_atomic(dir, &format!(".{name}."), name, bytes).map_err(|(path, source)| Error::Io { path, source })
}

/// Writes `class.csv` and `class.html` into `dir` (created if missing); returns their paths.
pub fn write_all(class: &Class, dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(vec![write(dir, "class.csv", csv_text(class)?.as_bytes())?, write(dir, "class.html", super::html_page(class).as_bytes())?])
}

/// Writes only the CSV to `path` (the lab's "Export CSV…").
pub fn write_csv(class: &Class, path: &Path) -> Result<PathBuf> {
    let (dir, name) = split(path)?;
    write(dir, name, csv_text(class)?.as_bytes())
}

/// Writes only the HTML page to `path` (the lab's "Export HTML…").
pub fn write_html(class: &Class, path: &Path) -> Result<PathBuf> {
    let (dir, name) = split(path)?;
    write(dir, name, super::html_page(class).as_bytes())
}

fn split(path: &Path) -> Result<(&Path, &str)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::InvalidConfig(format!("{} names no file to write", path.display())))?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok((dir, name))
}
