//! Report writers: JSON (the whole report, re-readable), CSV (every chart series as long-format
//! rows), Markdown (summary, tables, verdict) and HTML (everything, charts as SVG; html/). Files are written to a temporary name and
//! renamed, so an interrupted export never leaves half a report.

use std::path::{Path, PathBuf};

use super::Report;
use gpulab_core::error::{Error, Result};
use gpulab_core::text::{csv_text_cell, markdown_text};

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("report");
    gpulab_core::fsutil::write_atomic(dir, &format!(".{name}."), name, bytes)
        .map(|_| ())
        .map_err(|(path, source)| Error::Io { path, source })
}

pub fn write_json(report: &Report, path: &Path) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(report).map_err(|e| Error::Report(format!("serialising it as JSON: {e}")))?;
    atomic_write(path, &bytes)
}

/// The largest report.json read. gpulab's are kilobytes to a few megabytes (exercise 10's
/// carries its scenario, a replayed traffic CSV included); parsed, a report takes a few times
/// its size in memory.
pub const MAX_JSON_BYTES: u64 = 32 << 20;

/// Reads a report.json: a regular file only, at most `MAX_JSON_BYTES` (`fsutil::read_limited`).
pub fn read_json(path: &Path) -> Result<Report> {
    let bytes = gpulab_core::fsutil::read_limited(path, MAX_JSON_BYTES).map_err(io(path))?;
    // A file that is not a report is bad data in that file, not a bad setting.
    parse_json(&bytes).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not a gpulab report ({e}); open a report.json written by gpulab"),
        ),
    })
}

/// The most JSON values (numbers, strings, array and object members) a report.json may hold.
/// gpulab's hold tens of thousands; parsed, each takes tens of bytes, so this bounds the memory
/// a crafted file of tiny values (`[[],[],…]`, which grows 8× when parsed) can take.
pub const MAX_JSON_VALUES: usize = 1_000_000;

/// A report.json's bytes as a Report (what `read_json` and a fuzzer drive); a file of more than
/// `MAX_JSON_VALUES` values is refused before it is parsed.
pub fn parse_json(bytes: &[u8]) -> serde_json::Result<Report> {
    let values = json_values(bytes);
    if values > MAX_JSON_VALUES {
        return Err(serde::de::Error::custom(format!(
            "it holds about {values} JSON values, more than the {MAX_JSON_VALUES} a report may have"
        )));
    }
    serde_json::from_slice(bytes)
}

/// About how many values a JSON text holds: its commas and opening brackets outside strings
/// (one pass, no allocation; malformed text is left to the parser).
fn json_values(bytes: &[u8]) -> usize {
    let (mut n, mut in_string, mut escaped) = (1, false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b'[' | b'{' => n += 1,
                _ => {}
            }
        }
    }
    n
}

/// Every chart series as rows: chart, series, x, y, provenance (text neutralised for
/// spreadsheets, `text::csv_text_cell`).
pub fn write_csv(report: &Report, path: &Path) -> Result<()> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let csv_err = |e: csv::Error| Error::Io { path: path.to_path_buf(), source: std::io::Error::other(e) };
    w.write_record(["chart", "x_label", "y_label", "series", "x", "y", "provenance"]).map_err(csv_err)?;
    for c in &report.charts {
        for s in &c.series {
            for [x, y] in &s.points {
                let prov = s.provenance.label();
                let [title, x_label, y_label, name, prov] = [&c.title, &c.x_label, &c.y_label, &s.name, &prov].map(|t| csv_text_cell(t));
                w.write_record([&*title, &x_label, &y_label, &name, &x.to_string(), &y.to_string(), &prov]).map_err(csv_err)?;
            }
        }
    }
    let bytes = w.into_inner().map_err(|e| Error::Io { path: path.to_path_buf(), source: std::io::Error::other(e.to_string()) })?;
    atomic_write(path, &bytes)
}

/// The report as Markdown. Every string in it may have come from a file (a scenario's names, a
/// checkpoint's data-set text, a student's report), so each is written with
/// `text::markdown_text`: HTML, links, code and table bars show as text, controls escaped.
pub fn markdown(report: &Report) -> String {
    let t = |s: &str| markdown_text(s).into_owned();
    let mut md = format!("# {}\n\n", t(&report.title));
    if report.stopped_early {
        md.push_str("**This run was stopped early; the figures cover only what finished.**\n\n");
    }
    md.push_str(&format!("## Verdict\n\n{}\n\n", t(&report.verdict.summary)));
    for e in &report.verdict.evidence {
        md.push_str(&format!("- {}\n", t(e)));
    }
    for n in &report.notes {
        let (line, details) = super::note_parts(n);
        md.push_str(&format!("\n> {}\n", t(line)));
        if let Some(d) = details {
            md.push_str(">\n");
            for l in d.lines() {
                md.push_str(&format!("> - {}\n", t(l)));
            }
        }
    }
    if !report.figures.is_empty() {
        md.push_str("\n## Headline figures\n\n| figure | value | source |\n| --- | ---: | --- |\n");
        for f in &report.figures {
            md.push_str(&format!(
                "| {} | {} | {} |\n",
                t(&f.label),
                t(&gpulab_core::format::with_unit(f.value, &f.unit)),
                t(&f.provenance.label())
            ));
        }
    }
    for tab in &report.tables {
        md.push_str(&format!("\n## {}\n\n", t(&tab.title)));
        let head: Vec<String> =
            tab.columns.iter().map(|c| if c.unit.is_empty() { t(&c.name) } else { format!("{} ({})", t(&c.name), t(&c.unit)) }).collect();
        md.push_str(&format!("| {} |\n|{}\n", head.join(" | "), " --- |".repeat(tab.columns.len())));
        for r in &tab.rows {
            let cells: Vec<String> = r.iter().zip(&tab.columns).map(|(c, col)| t(&c.format(col))).collect();
            md.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        let sources: Vec<String> =
            tab.columns.iter().filter_map(|c| c.provenance.as_ref().map(|p| format!("{}: {}", t(&c.name), t(&p.label())))).collect();
        if !sources.is_empty() {
            md.push_str(&format!("\nSources — {}.\n", sources.join("; ")));
        }
    }
    for c in &report.charts {
        md.push_str(&format!(
            "\n## Chart: {}\n\n{} against {}; the points are in report.csv.\n",
            t(&c.title),
            t(&c.y_label),
            t(&c.x_label)
        ));
        for s in &c.series {
            md.push_str(&format!("- {} — {} points, {}\n", t(&s.name), s.points.len(), t(&s.provenance.label())));
        }
        for (x, label) in &c.markers {
            md.push_str(&format!("- marker at {x}: {}\n", t(label)));
        }
    }
    let m = &report.metadata;
    md.push_str(&format!(
        "\n## Reproduce\n\n- gpulab {} · started {} · seed {}\n- precision {} · data set {}\n- host: {}\n",
        t(&m.gpulab_version),
        t(&m.started_at),
        m.seed,
        t(&m.precision),
        t(&m.dataset),
        t(&m.host)
    ));
    for b in &m.backends {
        md.push_str(&format!("- backend: {} · driver {}\n", t(&b.label()), t(&b.driver)));
    }
    for (k, v) in &report.config {
        md.push_str(&format!("- {} = {}\n", t(k), t(v)));
    }
    md
}

pub fn write_markdown(report: &Report, path: &Path) -> Result<()> {
    atomic_write(path, markdown(report).as_bytes())
}

/// The index page of a `gpulab run all` folder (see `html::index_html`).
pub fn write_index(path: &Path, heading: &str, rows: &[super::html::IndexRow]) -> Result<()> {
    atomic_write(path, super::html::index_html(heading, rows).as_bytes())
}

pub fn write_html(report: &Report, path: &Path) -> Result<()> {
    atomic_write(path, super::html::to_html(report).as_bytes())
}

/// Writes report.json, report.csv, report.md and report.html into `dir`; returns their paths.
pub fn write_all(report: &Report, dir: &Path) -> Result<Vec<PathBuf>> {
    let paths = [dir.join("report.json"), dir.join("report.csv"), dir.join("report.md"), dir.join("report.html")];
    write_json(report, &paths[0])?;
    write_csv(report, &paths[1])?;
    write_markdown(report, &paths[2])?;
    write_html(report, &paths[3])?;
    let mut paths = paths.to_vec();
    // Each recorded timeline also goes out as a Chrome/Perfetto trace beside the report.
    for t in &report.timelines {
        let p = dir.join(crate::profile::trace::file_name(t));
        let bytes = serde_json::to_vec(&crate::profile::trace::to_json(t))
            .map_err(|e| Error::Report(format!("serialising the trace {}: {e}", p.display())))?;
        atomic_write(&p, &bytes)?;
        paths.push(p);
    }
    for a in &report.attachments {
        let plain = !a.file_name.is_empty() && !a.file_name.contains(['/', '\\']) && !a.file_name.starts_with('.');
        if !plain {
            return Err(Error::Report(format!("attachment name {:?} is not a plain file name", a.file_name)));
        }
        let p = dir.join(&a.file_name);
        atomic_write(&p, if a.bytes.is_empty() { a.text.as_bytes() } else { &a.bytes })?;
        paths.push(p);
    }
    Ok(paths)
}
