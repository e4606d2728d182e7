//! A profiler timeline as an inline SVG lane chart: one row per lane (loader workers, the main
//! thread, the GPU queue), a bar per span coloured by stage, a time axis in ms and a legend.
//! Spans closer than half a pixel with the same name are merged, so the file stays small
//! however long the run; the trace JSON beside the report has every span.

use std::fmt::Write;

use super::chart::{PALETTE, linear_ticks, num};
use super::escape;
use crate::profile::Timeline;

const W: f64 = 720.0;
const LABEL_W: f64 = 130.0;
const RIGHT: f64 = 16.0;
const LANE_H: f64 = 22.0;
const TOP: f64 = 8.0;

pub fn timeline_svg(t: &Timeline) -> String {
    let (t0, t1) = t.extent();
    let dur = (t1 - t0).max(1e-9);
    let px = |s: f64| LABEL_W + (s - t0) / dur * (W - LABEL_W - RIGHT);
    let mut names: Vec<&str> = Vec::new();
    for s in &t.spans {
        if !names.contains(&s.name.as_str()) {
            names.push(&s.name);
        }
    }
    let colour = |n: &str| PALETTE[names.iter().position(|m| *m == n).unwrap_or(0) % PALETTE.len()];
    let axis_y = TOP + LANE_H * t.lanes.len() as f64;
    let h = axis_y + 40.0 + 18.0 * names.len().div_ceil(4) as f64;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" width=\"{W}\" height=\"{h:.0}\" viewBox=\"0 0 {W} {h:.0}\" role=\"img\" aria-label=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n<title>{}</title>\n",
        escape(&t.title),
        escape(&t.title)
    );
    for (i, lane) in t.lanes.iter().enumerate() {
        let y = TOP + LANE_H * i as f64;
        let _ = writeln!(
            s,
            "<text x=\"4\" y=\"{:.0}\">{}</text><line x1=\"{LABEL_W}\" y1=\"{:.0}\" x2=\"{:.0}\" y2=\"{:.0}\" stroke=\"#eee\"/>",
            y + 15.0,
            escape(lane),
            y + LANE_H,
            W - RIGHT,
            y + LANE_H
        );
        let mut spans: Vec<_> = t.lane_spans(lane).collect();
        spans.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
        // Merge neighbours of one stage that touch within half a pixel.
        let mut cur: Option<(&str, f64, f64)> = None;
        let flush = |c: Option<(&str, f64, f64)>, s: &mut String| {
            if let Some((n, a, b)) = c {
                let _ = write!(
                    s,
                    "<rect x=\"{a:.1}\" y=\"{:.0}\" width=\"{:.1}\" height=\"{:.0}\" fill=\"{}\"/>",
                    y + 3.0,
                    (b - a).max(0.5),
                    LANE_H - 6.0,
                    colour(n)
                );
            }
        };
        for sp in spans {
            let (a, b) = (px(sp.start_s), px(sp.end_s));
            cur = match cur {
                Some((n, ca, cb)) if n == sp.name && a <= cb + 0.5 => Some((n, ca, cb.max(b))),
                c => {
                    flush(c, &mut s);
                    Some((sp.name.as_str(), a, b))
                }
            };
        }
        flush(cur, &mut s);
        s.push('\n');
    }
    for tick in linear_ticks(0.0, dur * 1e3) {
        let x = px(t0 + tick / 1e3);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{axis_y:.0}\" x2=\"{x:.1}\" y2=\"{:.0}\" stroke=\"#333\"/><text x=\"{x:.1}\" y=\"{:.0}\" text-anchor=\"middle\">{} ms</text>",
            axis_y + 4.0,
            axis_y + 16.0,
            num(tick)
        );
    }
    for (i, n) in names.iter().enumerate() {
        let (x, y) = (LABEL_W + 150.0 * (i % 4) as f64, axis_y + 36.0 + 18.0 * (i / 4) as f64);
        let _ = writeln!(
            s,
            "<rect x=\"{x:.0}\" y=\"{:.0}\" width=\"12\" height=\"10\" fill=\"{}\"/><text x=\"{:.0}\" y=\"{y:.0}\">{}</text>",
            y - 9.0,
            colour(n),
            x + 16.0,
            escape(n)
        );
    }
    s.push_str("</svg>\n");
    s
}
