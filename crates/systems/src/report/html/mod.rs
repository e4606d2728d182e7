//! report.html: one self-contained page per report — inline CSS, inline SVG charts, no script
//! and no network, so it reads the same offline, with JavaScript off and on paper. Every text
//! from the report is escaped. `escape` and `chart_svg` are the small public API other pages
//! (the run-all index, the class view) build on.

mod chart;
mod index;
mod timeline;

use std::fmt::Write;

pub use chart::chart_svg;
pub use index::{IndexRow, index_html};
pub use timeline::timeline_svg;

use super::{Attachment, Figure, Report, Table};

/// Text safe inside HTML/XML elements and attributes (control characters other than newline and
/// tab are dropped: XML cannot hold them).
pub fn escape(t: &str) -> String {
    let mut o = String::with_capacity(t.len());
    for c in t.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => o.push(c),
        }
    }
    o
}

/// The light, print-friendly style every gpulab page shares.
pub const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;color:#1b1b1b;background:#fff;max-width:980px;margin:0 auto;padding:16px 24px;line-height:1.45}
h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.25em;border-bottom:1px solid #ccc;padding-bottom:2px;margin-top:1.6em}
.meta,.prov,figcaption,.muted{color:#555;font-size:.9em}
.verdict{background:#f2f6fc;border-left:4px solid #0072B2;padding:8px 14px}.verdict p{font-weight:600;margin:.3em 0}
.warn{background:#fff4e5;border-left:4px solid #E69F00;padding:6px 12px;margin:8px 0}
.warn p{margin:0}
.stopped{background:#fdecea;border-left:4px solid #b3261e;padding:6px 12px}
.figures{display:grid;grid-template-columns:repeat(auto-fill,minmax(210px,1fr));gap:10px}
.figure{border:1px solid #ddd;border-radius:6px;padding:8px 10px}.figure .v{font-size:1.35em;font-weight:600}
table{border-collapse:collapse;margin:8px 0;font-size:.92em}caption{text-align:left;font-weight:600;padding:4px 0}
th,td{border:1px solid #ccc;padding:3px 8px;vertical-align:top}th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
th .prov{display:block;font-weight:normal;font-size:.8em}
figure{margin:14px 0;break-inside:avoid}svg,img{max-width:100%;height:auto}
details{border:1px solid #ddd;border-radius:6px;padding:6px 10px;margin:6px 0}summary{font-weight:600;cursor:pointer}
div.tw{overflow-x:auto}code{background:#f4f4f4;padding:0 3px;border-radius:3px}pre{white-space:pre-wrap;background:#f4f4f4;padding:6px}
@media print{body{max-width:none;padding:0}div.tw{overflow:visible}table{font-size:.8em}details::details-content{content-visibility:visible;display:block}a{color:inherit}table,.figure{break-inside:avoid}}";

/// The whole page for one report.
pub fn to_html(r: &Report) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>\n{STYLE}\n</style>\n</head>\n<body>\n",
        escape(&r.title)
    );
    let m = &r.metadata;
    let _ = writeln!(
        h,
        "<h1>{}</h1>\n<p class=\"meta\">gpulab {} · exercise <code>{}</code> · started {} · seed {}</p>",
        escape(&r.title),
        escape(&m.gpulab_version),
        escape(&r.exercise),
        escape(&m.started_at),
        m.seed
    );
    if r.stopped_early {
        h.push_str("<p class=\"stopped\">This run was stopped early; the figures cover only what finished.</p>\n");
    }
    let _ = writeln!(h, "<section class=\"verdict\" id=\"verdict\">\n<h2>Verdict</h2>\n<p>{}</p>", escape(&r.verdict.summary));
    list(&mut h, r.verdict.evidence.iter());
    h.push_str("</section>\n");
    for n in &r.notes {
        // The note's line; its details (a loader's own error) one click away.
        match super::note_parts(n) {
            (line, None) => {
                let _ = writeln!(h, "<p class=\"warn\">{}</p>", escape(line));
            }
            (line, Some(details)) => {
                let _ = writeln!(
                    h,
                    "<div class=\"warn\"><p>{}</p><details><summary>details</summary><p>{}</p></details></div>",
                    escape(line),
                    escape(details).replace('\n', "<br>\n")
                );
            }
        }
    }
    if let Some(sg) = &r.suggestion {
        let sets: String = sg.settings.iter().map(|(k, v)| format!(" --set {k}={v}")).collect();
        let _ = writeln!(
            h,
            "<h2>Next step</h2>\n<p>{}: <code>gpulab run {}{}</code></p>",
            escape(&sg.label),
            escape(&r.exercise),
            escape(&sets)
        );
    }
    figures(&mut h, &r.figures);
    for t in &r.tables {
        table(&mut h, t);
    }
    if !r.charts.is_empty() {
        h.push_str("<h2>Charts</h2>\n");
    }
    for c in &r.charts {
        let provs = sources(c.series.iter().map(|s| (s.name.as_str(), s.provenance.label())));
        let _ = writeln!(
            h,
            "<figure id=\"chart-{}\">\n<h3>{}</h3>\n{}<figcaption>{} against {}{} · {}</figcaption>\n</figure>",
            escape(&c.id),
            escape(&c.title),
            chart_svg(c),
            escape(&c.y_label),
            escape(&c.x_label),
            if c.log_x { " (log scale)" } else { "" },
            escape(&provs)
        );
    }
    diagrams(&mut h, &r.attachments);
    for t in &r.timelines {
        let _ = writeln!(
            h,
            "<h2>Timeline: {}</h2>\n<figure>\n{}<figcaption>{} Every span is in <a href=\"{}\">{}</a> (open it in ui.perfetto.dev or chrome://tracing).</figcaption>\n</figure>",
            escape(&t.title),
            timeline_svg(t),
            escape(&t.gpu_note),
            escape(&crate::profile::trace::file_name(t)),
            escape(&crate::profile::trace::file_name(t))
        );
    }
    cards(&mut h, r);
    reproduce(&mut h, r);
    h.push_str("</body>\n</html>\n");
    h
}

fn list<'a>(h: &mut String, items: impl Iterator<Item = &'a String>) {
    let items: Vec<String> = items.map(|e| format!("<li>{}</li>", escape(e))).collect();
    if !items.is_empty() {
        let _ = writeln!(h, "<ul>\n{}\n</ul>", items.join("\n"));
    }
}

/// One figure as "value unit".
pub fn figure_text(f: &Figure) -> String {
    gpulab_core::format::with_unit(f.value, &f.unit)
}

fn figures(h: &mut String, figs: &[Figure]) {
    if figs.is_empty() {
        return;
    }
    h.push_str("<h2>Headline figures</h2>\n<div class=\"figures\">\n");
    for f in figs {
        let _ = writeln!(
            h,
            "<div class=\"figure\"><div>{}</div><div class=\"v\">{}</div><div class=\"prov\">{}</div></div>",
            escape(&f.label),
            escape(&figure_text(f)),
            escape(&f.provenance.label())
        );
    }
    h.push_str("</div>\n");
}

fn table(h: &mut String, t: &Table) {
    let _ = writeln!(h, "<h2>{}</h2>\n<div class=\"tw\"><table>\n<thead><tr>", escape(&t.title));
    for c in &t.columns {
        let unit = if c.unit.is_empty() { String::new() } else { format!(" ({})", escape(&c.unit)) };
        let prov = c.provenance.as_ref().map(|p| format!("<span class=\"prov\">{}</span>", escape(p.short()))).unwrap_or_default();
        let _ = write!(h, "<th>{}{unit}{prov}</th>", escape(&c.name));
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for row in &t.rows {
        h.push_str("<tr>");
        for (cell, col) in row.iter().zip(&t.columns) {
            let class = if matches!(cell, super::Cell::Num(_)) { " class=\"n\"" } else { "" };
            let _ = write!(h, "<td{class}>{}</td>", escape(&cell.format(col)));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody>\n</table></div>\n");
    let from = sources(t.columns.iter().filter_map(|c| c.provenance.as_ref().map(|p| (c.name.as_str(), p.label()))));
    if !from.is_empty() {
        let _ = writeln!(h, "<p class=\"prov\">Sources — {from}.</p>", from = escape(&from));
    }
}

/// "a, b: label one; c: label two": names grouped by their provenance label, in first-seen order.
pub fn sources<'a>(pairs: impl Iterator<Item = (&'a str, String)>) -> String {
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for (name, label) in pairs {
        match groups.iter_mut().find(|g| g.0 == label) {
            Some(g) => g.1.push(name),
            None => groups.push((label, vec![name])),
        }
    }
    groups.iter().map(|(label, names)| format!("{}: {label}", names.join(", "))).collect::<Vec<_>>().join("; ")
}

/// SVG attachments (e.g. exercise 10's architecture diagram) as images: an `<img>` never runs
/// what a file holds, so a report read from someone else's JSON stays inert.
fn diagrams(h: &mut String, attachments: &[Attachment]) {
    for a in attachments.iter().filter(|a| a.file_name.ends_with(".svg") && a.bytes.is_empty()) {
        let _ = writeln!(
            h,
            "<h2>Diagram</h2>\n<figure><img alt=\"{}\" src=\"data:image/svg+xml,{}\"><figcaption>{} beside this report</figcaption></figure>",
            escape(&a.file_name),
            percent_encode(&a.text),
            escape(&a.file_name)
        );
    }
}

/// Percent-encoding for a data: URL (every byte but letters, digits and a few safe marks).
fn percent_encode(t: &str) -> String {
    let mut o = String::with_capacity(t.len() * 2);
    for b in t.bytes() {
        if b.is_ascii_alphanumeric() || b" -_.~/:=,;()".contains(&b) {
            o.push(b as char);
        } else {
            let _ = write!(o, "%{b:02X}");
        }
    }
    o
}

/// The lesson's check-yourself questions, each answer behind a click (`<details>`).
fn cards(h: &mut String, r: &Report) {
    if r.check_yourself.is_empty() {
        return;
    }
    h.push_str("<h2>Check yourself</h2>\n<p class=\"muted\">Answer from your own numbers above, then open the card.</p>\n");
    for c in &r.check_yourself {
        let answer = match c.answer.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
            Some(a) => a.lines().map(inline_code).collect::<Vec<_>>().join("<br>\n"),
            None => {
                "<span class=\"muted\">No answer written yet for this question — work it out from the lesson and your run.</span>".into()
            }
        };
        let _ = writeln!(h, "<details><summary>{}</summary>\n<p>{answer}</p></details>", inline_code(&c.question));
    }
}

/// Escapes a line and turns its markdown `code`, **strong** and *emphasis* spans into HTML (an
/// odd number of markers is left as text).
fn inline_code(line: &str) -> String {
    if line.matches('`').count() % 2 == 1 {
        return emphasis(line);
    }
    line.split('`').enumerate().map(|(i, p)| if i % 2 == 1 { format!("<code>{}</code>", escape(p)) } else { emphasis(p) }).collect()
}

fn emphasis(text: &str) -> String {
    let wrap = |t: &str, marker: &str, tag: &str, inner: &dyn Fn(&str) -> String| -> String {
        if t.matches(marker).count() % 2 == 1 {
            return inner(t);
        }
        t.split(marker).enumerate().map(|(i, p)| if i % 2 == 1 { format!("<{tag}>{}</{tag}>", inner(p)) } else { inner(p) }).collect()
    };
    wrap(text, "**", "strong", &|t| wrap(t, "*", "em", &|t| escape(t)))
}

/// Everything needed to run it again.
fn reproduce(h: &mut String, r: &Report) {
    let m = &r.metadata;
    h.push_str("<h2>Reproduce</h2>\n<table>\n<tbody>\n");
    let mut row = |k: &str, v: &str| {
        let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
    };
    row("gpulab", &m.gpulab_version);
    row("started", &m.started_at);
    row("seed", &m.seed.to_string());
    row("precision", &m.precision);
    row("data set", &m.dataset);
    row("host", &m.host);
    for b in &m.backends {
        row(
            "backend",
            &format!(
                "{} · driver {}{}",
                b.label(),
                if b.driver.is_empty() { "—" } else { &b.driver },
                if b.timestamps { " · GPU timestamps" } else { "" }
            ),
        );
    }
    for (k, v) in &m.hyperparameters {
        row(&format!("hyper-parameter {k}"), v);
    }
    h.push_str("</tbody>\n</table>\n");
    if !r.config.is_empty() {
        let sets: String = r
            .config
            .iter()
            .map(|(k, v)| format!(" --set {k}={}", if v.contains(' ') || v.is_empty() { format!("'{v}'") } else { v.clone() }))
            .collect();
        let _ = writeln!(
            h,
            "<p>Settings of this run, as a command:</p>\n<pre><code>gpulab run {}{}</code></pre>",
            escape(&r.exercise),
            escape(&sets)
        );
    }
    let files: Vec<String> = r.attachments.iter().map(|a| format!("<a href=\"{0}\">{0}</a>", escape(&a.file_name))).collect();
    let _ = writeln!(
        h,
        "<p class=\"muted\">Beside this page: <a href=\"report.json\">report.json</a> (everything, re-readable by gpulab), <a href=\"report.csv\">report.csv</a> (every chart point), <a href=\"report.md\">report.md</a>{}{}.</p>",
        if files.is_empty() { "" } else { ", " },
        files.join(", ")
    );
}

#[cfg(test)]
mod tests;
