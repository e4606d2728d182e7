//! Walking a folder of students' exports. Every file whose name ends in `report.json`
//! (`report.json` as `gpulab run --out` and the lab write it, or `alice-report.json` as a save
//! dialog may name it) is read with `report::read_json`; the report.csv/.md, trace and
//! attachment files beside it are not reports and are passed over silently. The walk does not
//! follow links and is bounded in depth, entries, file size and the bytes read in all.

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
pub const MAX_FILE_BYTES: u64 = report::MAX_JSON_BYTES;
/// Bytes one scan reads at most, all files together: a class's reports are megabytes; past
/// this the rest are listed as skipped, unread. With `MAX_TEXT_BYTES` per string kept, what one
/// scan holds stays bounded however large or many the files are.
pub const MAX_SCAN_BYTES: u64 = 256 << 20;

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
    let mut bytes_read = 0u64;
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
        match read_one(entry.path(), &registry, MAX_SCAN_BYTES - bytes_read, &mut bytes_read) {
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
            Err(Unread::Budget) => {
                let mib = MAX_SCAN_BYTES >> 20;
                class.skipped.push(Skipped {
                    file,
                    reason: format!(
                        "not read: the reports before it took {} MiB of the {mib} MiB this scan reads at most",
                        bytes_read.div_ceil(1 << 20)
                    ),
                });
                class.truncated.get_or_insert_with(|| {
                    format!("Stopped reading reports after {mib} MiB: point it at a smaller folder to see the rest.")
                });
            }
            Err(Unread::Bad(reason)) => class.skipped.push(Skipped { file, reason }),
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

/// Why a file gave no row.
enum Unread {
    /// It would take the scan past `MAX_SCAN_BYTES`.
    Budget,
    /// Unreadable, too large, or not a report of an exercise this gpulab has: the reason.
    Bad(String),
}

impl From<String> for Unread {
    fn from(reason: String) -> Self {
        Unread::Bad(reason)
    }
}

/// One file: a report of an exercise this gpulab has, or why not. At most `left` bytes are
/// read; the bytes read are added to `read`.
fn read_one<'e>(
    path: &Path,
    registry: &'e [Box<dyn Exercise>],
    left: u64,
    read: &mut u64,
) -> std::result::Result<(Report, &'e dyn Exercise), Unread> {
    // One open, checked and read with the limit: a file swapped after the walk saw it is
    // judged by what is read, and a FIFO or device is refused, not waited on.
    let unreadable = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::FileTooLarge => Unread::Bad(format!("{e}")),
        _ => Unread::Bad(format!("unreadable: {e}")),
    };
    let (file, len) = gpulab_core::fsutil::open_regular(path).map_err(unreadable)?;
    if len <= MAX_FILE_BYTES && len > left {
        return Err(Unread::Budget);
    }
    let limit = MAX_FILE_BYTES.min(left);
    let bytes = if len > MAX_FILE_BYTES {
        Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("{len} bytes, over the {} MiB a report may have: not read", MAX_FILE_BYTES >> 20),
        ))
    } else {
        gpulab_core::fsutil::read_at_most(file, limit, len)
    };
    let bytes = bytes.map_err(unreadable)?;
    *read += bytes.len() as u64;
    let r = report::parse_json(&bytes).map_err(|e| why_not(&bytes, e))?;
    match registry.iter().find(|x| x.id() == r.exercise) {
        Some(ex) => Ok((r, ex.as_ref())),
        None => {
            let ids: Vec<&str> = registry.iter().map(|x| x.id()).collect();
            Err(Unread::Bad(format!(
                "a report of exercise {:?}, which this gpulab ({}) does not have (it has {})",
                r.exercise,
                env!("CARGO_PKG_VERSION"),
                ids.join(", ")
            )))
        }
    }
}

/// Why a file's bytes are not a report: not JSON at all, or JSON that is not a gpulab report.
fn why_not(bytes: &[u8], e: serde_json::Error) -> String {
    match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        Err(j) => format!("not JSON: {j}"),
        Ok(_) => format!("JSON, but not a gpulab report ({e}); open a report.json written by gpulab"),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// The walk saw a regular file; by the time it is read, another user swapped in a FIFO (or
    /// a link to a device). The read judges what it opens: refused at once, never waited on.
    #[test]
    fn a_file_swapped_for_a_fifo_or_a_device_after_the_walk_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("report.json");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let link = dir.path().join("zero-report.json");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        for (path, what) in [(fifo, "FIFO"), (link, "character device")] {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let registry = exercises::registry();
                let _ = tx.send(read_one(&path, &registry, MAX_SCAN_BYTES, &mut 0).map(|_| ()).map_err(|e| match e {
                    Unread::Bad(reason) => reason,
                    Unread::Budget => "over the budget".into(),
                }));
            });
            let got = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("reading the swapped file blocked");
            assert!(got.as_ref().is_err_and(|e| e.contains(what)), "{got:?}");
        }
    }
}
