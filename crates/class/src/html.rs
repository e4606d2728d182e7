//! `class.html`: the class view as one self-contained page — inline CSS, no scripts, no
//! network — with a table per exercise and its key figure per machine as an inline SVG bar
//! chart. All text from the reports is escaped.

use std::fmt::Write;

use super::{Class, ExerciseGroup};
use gpulab_core::format::number as value;
use gpulab_systems::report::html::escape;
use gpulab_systems::report::{Cell, Chart, Provenance, Table};

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#1d1d1f;background:#fff}\
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;font-size:.85em;margin:.8em 0;display:block;overflow-x:auto}\
th,td{border:1px solid #d0d0d0;padding:.25em .5em;text-align:left;vertical-align:top}\
th{background:#f0f0f3}td.num{text-align:right;font-variant-numeric:tabular-nums}th small{font-weight:normal;color:#555}\
tr:nth-child(even) td{background:#fafafa}.summary{font-weight:600}.note{color:#555;font-size:.9em}\
svg text{font-family:system-ui,sans-serif;font-size:12px}";

fn color(p: &Provenance) -> &'static str {
    match p {
        Provenance::Measured => "#3b7dd8",
        Provenance::Derived(_) => "#7a5cc0",
        Provenance::Simulated(_) => "#d08a2c",
    }
}

/// The whole page.
pub fn html_page(class: &Class) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>gpulab class view</title>\n<style>{CSS}</style>\n</head>\n<body>\n<h1>gpulab — class view</h1>\n<p class=\"summary\">{}</p>\n<p class=\"note\">One table per exercise, a row per report. The chart shows each exercise's key figure per machine (bars numbered as the table's rows). Every value keeps its source as the report recorded it: measured on that machine, derived from measured numbers, or simulated.</p>\n",
        escape(&class.summary())
    );
    for g in &class.groups {
        group(&mut h, g);
    }
    if !class.skipped.is_empty() {
        h.push_str("<section id=\"skipped\">\n<h2>Skipped files</h2>\n<table>\n<tr><th>file</th><th>reason</th></tr>\n");
        for s in &class.skipped {
            let _ = writeln!(h, "<tr><td>{}</td><td>{}</td></tr>", escape(&s.file), escape(&s.reason));
        }
        h.push_str("</table>\n</section>\n");
    }
    let _ = write!(h, "<p class=\"note\">Written by gpulab {}.</p>\n</body>\n</html>\n", env!("CARGO_PKG_VERSION"));
    h
}

fn group(h: &mut String, g: &ExerciseGroup) {
    let t = g.table();
    let _ = writeln!(h, "<section id=\"ex-{}\">\n<h2>{}</h2>", escape(&g.id), escape(&t.title));
    if let Some(c) = g.chart() {
        bar_svg(h, &c, g);
    }
    table(h, &t);
    h.push_str("</section>\n");
}

fn table(h: &mut String, t: &Table) {
    h.push_str("<table>\n<tr>");
    for c in &t.columns {
        let sub: Vec<String> =
            [c.unit.clone(), c.provenance.as_ref().map(|p| p.label()).unwrap_or_default()].into_iter().filter(|s| !s.is_empty()).collect();
        if sub.is_empty() {
            let _ = write!(h, "<th>{}</th>", escape(&c.name));
        } else {
            let _ = write!(h, "<th>{}<br><small>{}</small></th>", escape(&c.name), escape(&sub.join(" · ")));
        }
    }
    h.push_str("</tr>\n");
    for r in &t.rows {
        h.push_str("<tr>");
        for (i, c) in t.columns.iter().enumerate() {
            let cell = r.get(i).unwrap_or(&Cell::Empty);
            let class = if matches!(cell, Cell::Num(_)) { " class=\"num\"" } else { "" };
            let _ = write!(h, "<td{class}>{}</td>", escape(&cell.format(c)));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
}

/// Horizontal bars, one per machine, from zero (negative values go left of the zero line).
fn bar_svg(h: &mut String, c: &Chart, g: &ExerciseGroup) {
    const W: f64 = 980.0;
    const LABEL_W: f64 = 330.0;
    const VALUE_W: f64 = 230.0;
    const ROW: f64 = 24.0;
    let mut bars: Vec<(usize, f64, &Provenance)> =
        c.series.iter().flat_map(|s| s.points.iter().map(move |p| (p[0] as usize, p[1], &s.provenance))).collect();
    bars.sort_by_key(|b| b.0);
    let lo = bars.iter().map(|b| b.1).fold(0.0, f64::min);
    let mut hi = bars.iter().map(|b| b.1).fold(0.0, f64::max);
    if hi <= lo {
        hi = lo + 1.0;
    }
    let (x0, x1) = (LABEL_W, W - VALUE_W);
    let x = |v: f64| x0 + (v - lo) / (hi - lo) * (x1 - x0);
    let height = ROW * bars.len() as f64 + 10.0;
    let _ = writeln!(
        h,
        "<figure>\n<figcaption>{} ({})</figcaption>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" viewBox=\"0 0 {W} {height}\" role=\"img\" aria-label=\"{}\">",
        escape(&c.title),
        escape(&c.y_label),
        escape(&c.title)
    );
    for (row, (n, v, p)) in bars.iter().enumerate() {
        let y = 5.0 + row as f64 * ROW;
        let machine = g.rows.get(n.wrapping_sub(1)).map(|r| r.machine()).unwrap_or_default();
        let full = format!("{n}. {machine}");
        let shown: String =
            if full.chars().count() > 46 { format!("{}…", full.chars().take(45).collect::<String>()) } else { full.clone() };
        let (a, b) = (x(0.0).min(x(*v)), x(0.0).max(x(*v)));
        let shown_value = format!("{} {} ({})", value(*v), c.y_label, p.short());
        let _ = writeln!(
            h,
            "<g><title>{}: {}</title><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text><rect x=\"{a:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
            escape(&full),
            escape(&shown_value),
            x0 - 8.0,
            y + ROW * 0.65,
            escape(&shown),
            y + 3.0,
            (b - a).max(1.0),
            ROW - 6.0,
            color(p),
            x1 + 6.0,
            y + ROW * 0.65,
            escape(&shown_value)
        );
    }
    let _ = writeln!(h, "<line x1=\"{:.1}\" y1=\"0\" x2=\"{:.1}\" y2=\"{height}\" stroke=\"#555\"/>\n</svg>\n</figure>", x(0.0), x(0.0));
}
