//! The index of a `gpulab run all` folder: one row per exercise with its key figure, verdict,
//! run time and a relative link to its report.html — or the error it failed with.

use std::fmt::Write;

use super::{STYLE, escape, figure_text};
use crate::report::Figure;

/// One exercise in the index.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexRow {
    pub number: u32,
    pub title: String,
    /// The exercise's key figure (`Exercise::key_figure`), when it ran.
    pub key_figure: Option<Figure>,
    pub verdict: String,
    pub seconds: f64,
    /// Relative link to its report.html; None when it failed.
    pub link: Option<String>,
    /// Why it has no report.
    pub error: Option<String>,
}

/// The index page: `heading` says what was run (e.g. the backend override and when).
pub fn index_html(heading: &str, rows: &[IndexRow]) -> String {
    let mut h = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>gpulab: every exercise</title>\n<style>\n{STYLE}\ntd.err{{color:#b3261e}}\n</style>\n</head>\n<body>\n<h1>gpulab: every exercise</h1>\n<p class=\"meta\">{}</p>\n<table>\n<thead><tr><th>#</th><th>exercise</th><th>key figure</th><th>verdict</th><th>run time (s)<span class=\"prov\">measured</span></th></tr></thead>\n<tbody>\n",
        escape(heading)
    );
    for r in rows {
        let title = match &r.link {
            Some(l) => format!("<a href=\"{}\">{}</a>", escape(l), escape(&r.title)),
            None => escape(&r.title),
        };
        let key = r
            .key_figure
            .as_ref()
            .map(|f| {
                format!(
                    "{}: <b>{}</b> <span class=\"prov\">({})</span>",
                    escape(&f.label),
                    escape(&figure_text(f)),
                    escape(f.provenance.short())
                )
            })
            .unwrap_or_else(|| "—".into());
        let verdict = match &r.error {
            Some(e) => format!("<td class=\"err\">failed: {}</td>", escape(e)),
            None => format!("<td>{}</td>", escape(&r.verdict)),
        };
        let _ = writeln!(
            h,
            "<tr><td class=\"n\">{}</td><td>{title}</td><td>{key}</td>{verdict}<td class=\"n\">{:.1}</td></tr>",
            r.number, r.seconds
        );
    }
    h.push_str("</tbody>\n</table>\n</body>\n</html>\n");
    h
}
