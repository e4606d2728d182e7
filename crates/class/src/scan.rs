//! Walking a folder of students' exports. Every file whose name ends in `report.json`
//! (`report.json` as `gpulab run --out` and the lab write it, or `alice-report.json` as a save
//! dialog may name it) is read with `report::read_json`; the report.csv/.md, trace and
//! attachment files beside it are not reports and are passed over silently. The walk does not
//! follow links and is bounded in depth, entries and file size.

use std::collections::BTreeMap;
use std::path::Path;

use walkdir::WalkDir;

use super::{Class, ExerciseGroup, MachineRow, Skipped};
use gpulab_core::error::{Error, Result};
use gpulab_exercises::{self as exercises, Exercise};
use gpulab_systems::report::{self, Report};

/// Folders deeper than this below the root are not read.
pub const MAX_DEPTH: usize = 16;
/// Files and folders visited at most.
pub const MAX_ENTRIES: usize = 100_000;
/// A report larger than this is skipped unread (gpulab's are kilobytes to a few megabytes).
pub const MAX_FILE_BYTES: u64 = 64 << 20;

fn is_report_name(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|n| n.to_lowercase().ends_with("report.json"))
}

pub(super) fn read(dir: &Path) -> Result<Class> {
    let meta = std::fs::metadata(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), source })?;
    if !meta.is_dir() {
        let why = "not a folder: give the folder that holds the students' report.json files";
        return Err(Error::Io { path: dir.to_path_buf(), source: std::io::Error::new(std::io::ErrorKind::InvalidInput, why) });
    }
    let registry = exercises::registry();
    let mut class = Class { root: dir.to_path_buf(), ..Default::default() };
    let mut groups: BTreeMap<u32, ExerciseGroup> = BTreeMap::new();
    let rel = |p: &Path| p.strip_prefix(dir).unwrap_or(p).display().to_string();
    let mut too_deep = false;
    for (n, entry) in WalkDir::new(dir).max_depth(MAX_DEPTH).follow_links(false).sort_by_file_name().into_iter().enumerate() {
        if n >= MAX_ENTRIES {
            class.truncated = Some(format!("Stopped after {MAX_ENTRIES} files and folders: point it at a smaller folder."));
            break;
        }
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let file = e.path().map(rel).unwrap_or_else(|| "(a folder entry)".into());
                class.skipped.push(Skipped { file, reason: format!("unreadable: {e}") });
                continue;
            }
        };
        if entry.depth() == MAX_DEPTH && entry.file_type().is_dir() {
            too_deep = true;
        }
        if !entry.file_type().is_file() || !is_report_name(entry.file_name()) {
            continue;
        }
        let file = rel(entry.path());
        match read_one(entry.path(), &registry) {
            Ok((r, ex)) => {
                let row = MachineRow::from_report(file, &r, ex.key_figure(&r));
                let g = groups.entry(ex.number()).or_insert_with(|| ExerciseGroup {
                    id: ex.id().into(),
                    number: ex.number(),
                    title: ex.title().into(),
                    rows: Vec::new(),
                });
                g.rows.push(row);
            }
            Err(reason) => class.skipped.push(Skipped { file, reason }),
        }
    }
    if too_deep && class.truncated.is_none() {
        class.truncated = Some(format!("Folders more than {MAX_DEPTH} levels deep were not read."));
    }
    class.groups = groups.into_values().collect();
    for g in &mut class.groups {
        g.rows.sort_by(|a, b| a.file.cmp(&b.file));
    }
    Ok(class)
}

/// One file: a report of an exercise this gpulab has, or the reason it is not.
fn read_one<'e>(path: &Path, registry: &'e [Box<dyn Exercise>]) -> std::result::Result<(Report, &'e dyn Exercise), String> {
    let len = std::fs::metadata(path).map_err(|e| format!("unreadable: {e}"))?.len();
    if len > MAX_FILE_BYTES {
        return Err(format!("{len} bytes, more than the {} MiB a report may have: not read", MAX_FILE_BYTES >> 20));
    }
    let r = report::read_json(path).map_err(|e| why_not(path, e))?;
    match registry.iter().find(|x| x.id() == r.exercise) {
        Some(ex) => Ok((r, ex.as_ref())),
        None => {
            let ids: Vec<&str> = registry.iter().map(|x| x.id()).collect();
            Err(format!(
                "a report of exercise {:?}, which this gpulab ({}) does not have (it has {})",
                r.exercise,
                env!("CARGO_PKG_VERSION"),
                ids.join(", ")
            ))
        }
    }
}

/// Why `read_json` refused a file: not JSON at all, JSON that is not a gpulab report, or
/// unreadable.
fn why_not(path: &Path, e: Error) -> String {
    match e {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::InvalidData => {
            match std::fs::read(path).map(|b| serde_json::from_slice::<serde::de::IgnoredAny>(&b)) {
                Ok(Err(j)) => format!("not JSON: {j}"),
                _ => format!("JSON, but {source}"),
            }
        }
        Error::Io { source, .. } => format!("unreadable: {source}"),
        other => other.to_string(),
    }
}
