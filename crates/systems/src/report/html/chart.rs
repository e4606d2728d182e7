//! A report chart as inline SVG: axes with ticks and labels (log-x when the chart says so), one
//! polyline or bar group per series, the chart's markers, and a legend naming each series with
//! its provenance. Plain text out; no drawing toolkit, no script.

use std::fmt::Write;

use super::escape;
use crate::report::{Chart, ChartKind, Series};

/// Drawing size of the plot area and its margins, in CSS pixels.
const W: f64 = 720.0;
const PLOT_H: f64 = 300.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 16.0;
/// Below the plot: tick labels and the x-axis label.
const X_AXIS_H: f64 = 48.0;
const LEGEND_LINE: f64 = 18.0;
/// Points drawn per series at most; longer series are thinned evenly (the CSV has them all).
const MAX_POINTS: usize = 1500;

/// Series colours (Okabe–Ito, readable for colour-blind readers and in greyscale print).
pub const PALETTE: [&str; 8] = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"];

/// The chart as an `<svg>` element to place inline in HTML (no XML prologue). Every text is
/// escaped; non-finite points (and x ≤ 0 on a log axis) are left out and said so in the legend.
pub fn chart_svg(c: &Chart) -> String {
    let (series, dropped): (Vec<Vec<[f64; 2]>>, Vec<usize>) =
        c.series.iter().map(|s| drawable(s, c.log_x && c.kind == ChartKind::Line)).unzip();
    let dropped: usize = dropped.iter().sum();
    let mut legend: Vec<(Option<&str>, String)> = c
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            // The full provenance where it fits the line; the page's caption always has it.
            let full = format!("{} — {}", s.name, s.provenance.label());
            (
                Some(PALETTE[i % PALETTE.len()]),
                if full.chars().count() <= 100 { full } else { format!("{} — {}", s.name, s.provenance.short()) },
            )
        })
        .collect();
    if c.kind == ChartKind::Bars || !c.markers.is_empty() {
        legend.extend(c.markers.iter().map(|(x, m)| (None, format!("marker at {}: {m}", num(*x)))));
    }
    legend.extend(c.targets.iter().map(|(y, t)| (None, format!("target at {}: {t}", num(*y)))));
    if dropped > 0 {
        legend.push((None, format!("{dropped} points not drawn (not finite, or x ≤ 0 on the log axis); report.csv has every point")));
    }
    let h = TOP + PLOT_H + X_AXIS_H + LEGEND_LINE * legend.len() as f64 + 8.0;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-chart=\"{}\" width=\"{W}\" height=\"{h:.0}\" viewBox=\"0 0 {W} {h:.0}\" role=\"img\" aria-label=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n<title>{}</title>\n",
        escape(&c.id),
        escape(&c.title),
        escape(&c.title)
    );
    let all: Vec<[f64; 2]> = series.iter().flatten().copied().collect();
    if all.is_empty() {
        let _ = writeln!(
            s,
            "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"middle\" fill=\"#555\">no data points in this run</text>",
            W / 2.0,
            TOP + PLOT_H / 2.0
        );
    } else {
        match c.kind {
            ChartKind::Line => line_body(&mut s, c, &series, &all),
            ChartKind::Bars => bars_body(&mut s, c, &series, &all),
        }
    }
    let _ =
        writeln!(s, "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{:.0}\" height=\"{PLOT_H}\" fill=\"none\" stroke=\"#333\"/>", W - LEFT - RIGHT);
    let x_title = if c.log_x && c.kind == ChartKind::Line { format!("{} (log scale)", c.x_label) } else { c.x_label.clone() };
    let _ = writeln!(
        s,
        "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"middle\">{}</text>",
        LEFT + (W - LEFT - RIGHT) / 2.0,
        TOP + PLOT_H + 40.0,
        escape(&x_title)
    );
    let _ = writeln!(
        s,
        "<text transform=\"translate(16 {:.0}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        TOP + PLOT_H / 2.0,
        escape(&c.y_label)
    );
    for (i, (colour, text)) in legend.iter().enumerate() {
        let y = TOP + PLOT_H + X_AXIS_H + LEGEND_LINE * i as f64 + 12.0;
        match colour {
            Some(col) => {
                let _ = write!(s, "<rect x=\"{LEFT}\" y=\"{:.0}\" width=\"14\" height=\"10\" fill=\"{col}\"/>", y - 9.0);
            }
            None => {
                let _ = write!(
                    s,
                    "<line x1=\"{LEFT}\" y1=\"{:.0}\" x2=\"{:.0}\" y2=\"{:.0}\" stroke=\"#b3261e\" stroke-dasharray=\"4 3\"/>",
                    y - 4.0,
                    LEFT + 14.0,
                    y - 4.0
                );
            }
        }
        let _ = writeln!(s, "<text x=\"{:.0}\" y=\"{y:.0}\">{}</text>", LEFT + 20.0, escape(text));
    }
    s.push_str("</svg>\n");
    s
}

/// The points that can be drawn (finite, x > 0 on a log axis, thinned to `MAX_POINTS`) and how
/// many could not be (thinning does not count).
fn drawable(s: &Series, log_x: bool) -> (Vec<[f64; 2]>, usize) {
    let ok: Vec<[f64; 2]> = s.points.iter().copied().filter(|p| p[0].is_finite() && p[1].is_finite() && (!log_x || p[0] > 0.0)).collect();
    let dropped = s.points.len() - ok.len();
    if ok.len() <= MAX_POINTS {
        return (ok, dropped);
    }
    let step = ok.len().div_ceil(MAX_POINTS);
    let mut v: Vec<[f64; 2]> = ok.iter().step_by(step).copied().collect();
    if let Some(last) = ok.last().filter(|l| v.last() != Some(l)) {
        v.push(*last);
    }
    (v, dropped)
}

/// A linear or log10 axis mapping data values onto a pixel span.
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    px0: f64,
    px1: f64,
}

impl Axis {
    fn to_px(&self, v: f64) -> f64 {
        let t = if self.log { v.log10() } else { v };
        let (lo, hi) = if self.log { (self.lo.log10(), self.hi.log10()) } else { (self.lo, self.hi) };
        self.px0 + (t - lo) / (hi - lo) * (self.px1 - self.px0)
    }
}

fn line_body(s: &mut String, c: &Chart, series: &[Vec<[f64; 2]>], all: &[[f64; 2]]) {
    let (xlo, xhi) = min_max(all.iter().map(|p| p[0]));
    let (xlo, xhi) = if c.log_x { widen_log(xlo, xhi) } else { widen(xlo, xhi) };
    let (ylo, yhi) = min_max(all.iter().map(|p| p[1]).chain(target_ys(c)));
    let (ylo, yhi, yticks) = y_range(ylo, yhi, false);
    let x = Axis { lo: xlo, hi: xhi, log: c.log_x, px0: LEFT, px1: W - RIGHT };
    let y = Axis { lo: ylo, hi: yhi, log: false, px0: TOP + PLOT_H, px1: TOP };
    let xticks = if c.log_x { log_ticks(xlo, xhi) } else { linear_ticks(xlo, xhi) };
    y_grid(s, &y, &yticks);
    target_lines(s, c, &y);
    for t in xticks {
        let px = x.to_px(t);
        let _ = writeln!(
            s,
            "<line x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{:.0}\" stroke=\"#e4e4e4\"/><text x=\"{px:.1}\" y=\"{:.0}\" text-anchor=\"middle\">{}</text>",
            TOP + PLOT_H,
            TOP + PLOT_H + 16.0,
            num(t)
        );
    }
    for (i, (mx, label)) in c.markers.iter().enumerate() {
        if !(mx.is_finite() && *mx >= xlo && *mx <= xhi) {
            continue;
        }
        let px = x.to_px(*mx);
        let ty = TOP + 14.0 + 14.0 * (i % 3) as f64;
        let anchor = if px > W - 200.0 { "end" } else { "start" };
        let dx = if anchor == "end" { -4.0 } else { 4.0 };
        let _ = writeln!(
            s,
            "<line class=\"marker\" x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{:.0}\" stroke=\"#b3261e\" stroke-dasharray=\"4 3\"/><text x=\"{:.1}\" y=\"{ty:.0}\" text-anchor=\"{anchor}\" fill=\"#b3261e\" font-size=\"11\">{}</text>",
            TOP + PLOT_H,
            px + dx,
            escape(label)
        );
    }
    for (i, pts) in series.iter().enumerate() {
        let col = PALETTE[i % PALETTE.len()];
        let path: Vec<String> = pts.iter().map(|p| format!("{:.1},{:.1}", x.to_px(p[0]), y.to_px(p[1]))).collect();
        let _ = writeln!(s, "<polyline class=\"series\" fill=\"none\" stroke=\"{col}\" stroke-width=\"2\" points=\"{}\"/>", path.join(" "));
        if pts.len() <= 60 {
            for p in pts {
                let _ = write!(s, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{col}\"/>", x.to_px(p[0]), y.to_px(p[1]));
            }
            s.push('\n');
        }
    }
}

fn bars_body(s: &mut String, c: &Chart, series: &[Vec<[f64; 2]>], all: &[[f64; 2]]) {
    let mut groups: Vec<f64> = all.iter().map(|p| p[0]).collect();
    groups.sort_by(f64::total_cmp);
    groups.dedup();
    let (ylo, yhi) = min_max(all.iter().map(|p| p[1]).chain(target_ys(c)));
    let (ylo, yhi, yticks) = y_range(ylo, yhi, true);
    let y = Axis { lo: ylo, hi: yhi, log: false, px0: TOP + PLOT_H, px1: TOP };
    y_grid(s, &y, &yticks);
    target_lines(s, c, &y);
    let gw = (W - LEFT - RIGHT) / groups.len() as f64;
    let n = series.len().max(1) as f64;
    let bw = 0.8 * gw / n;
    // Label every k-th group so the labels do not overlap.
    let every = (groups.len() as f64 * 48.0 / (W - LEFT - RIGHT)).ceil().max(1.0) as usize;
    for (g, gx) in groups.iter().enumerate() {
        if g % every == 0 {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.0}\" text-anchor=\"middle\">{}</text>",
                LEFT + gw * (g as f64 + 0.5),
                TOP + PLOT_H + 16.0,
                escape(&c.x_names.iter().find(|(x, _)| x == gx).map_or_else(|| num(*gx), |(_, name)| name.clone()))
            );
        }
    }
    let zero = y.to_px(0.0_f64.clamp(ylo, yhi));
    for (i, pts) in series.iter().enumerate() {
        let col = PALETTE[i % PALETTE.len()];
        let name = escape(&c.series[i].name);
        for p in pts {
            let Some(g) = groups.iter().position(|gx| *gx == p[0]) else { continue };
            let bx = LEFT + gw * g as f64 + 0.1 * gw + bw * i as f64;
            let py = y.to_px(p[1]);
            let (top, height) = (py.min(zero), (py - zero).abs().max(0.5));
            let _ = write!(
                s,
                "<rect class=\"bar\" x=\"{bx:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{height:.1}\" fill=\"{col}\"><title>{name}: {}</title></rect>",
                (bw * 0.95).max(1.0),
                num(p[1])
            );
        }
        s.push('\n');
    }
}

/// The chart's finite target values, which the y range includes so every target line shows.
fn target_ys(c: &Chart) -> impl Iterator<Item = f64> + '_ {
    c.targets.iter().map(|t| t.0).filter(|y| y.is_finite())
}

/// A dashed horizontal line per target (a latency SLO, an efficiency goal), labelled at the
/// plot's right edge.
fn target_lines(s: &mut String, c: &Chart, y: &Axis) {
    for (ty, label) in c.targets.iter().filter(|t| t.0.is_finite()) {
        let py = y.to_px(*ty);
        let _ = writeln!(
            s,
            "<line class=\"target\" x1=\"{LEFT}\" y1=\"{py:.1}\" x2=\"{:.0}\" y2=\"{py:.1}\" stroke=\"#b3261e\" stroke-dasharray=\"6 3\" stroke-width=\"1.5\"/><text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#b3261e\" font-size=\"11\">{}</text>",
            W - RIGHT,
            W - RIGHT - 4.0,
            py - 4.0,
            escape(label)
        );
    }
}

/// Horizontal grid lines with the y tick labels.
fn y_grid(s: &mut String, y: &Axis, ticks: &[f64]) {
    for t in ticks {
        let py = y.to_px(*t);
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{py:.1}\" x2=\"{:.0}\" y2=\"{py:.1}\" stroke=\"#e4e4e4\"/><text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            LEFT - 6.0,
            py + 4.0,
            num(*t)
        );
    }
}

fn min_max(v: impl Iterator<Item = f64>) -> (f64, f64) {
    v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)))
}

/// A non-empty linear range around [lo, hi].
fn widen(lo: f64, hi: f64) -> (f64, f64) {
    if hi > lo { (lo, hi) } else { (lo - lo.abs().max(1.0) * 0.5, hi + hi.abs().max(1.0) * 0.5) }
}

/// A non-empty log range (lo > 0) around [lo, hi].
fn widen_log(lo: f64, hi: f64) -> (f64, f64) {
    if hi > lo { (lo, hi) } else { (lo / 2.0, hi * 2.0) }
}

/// The y range rounded out to whole ticks, and the ticks. Bars (and a range that starts near
/// zero) include zero.
fn y_range(lo: f64, hi: f64, bars: bool) -> (f64, f64, Vec<f64>) {
    let (mut lo, mut hi) = (lo, hi);
    if bars || (lo > 0.0 && lo < 0.5 * hi) {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
    }
    let (lo, hi) = widen(lo, hi);
    let step = nice_step((hi - lo) / 5.0);
    let (lo, hi) = ((lo / step).floor() * step, (hi / step).ceil() * step);
    (lo, hi, ticks_between(lo, hi, step))
}

/// About five ticks at 1, 2 or 5 × 10^k inside [lo, hi].
pub fn linear_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let step = nice_step((hi - lo) / 5.0);
    ticks_between((lo / step).ceil() * step, hi, step)
}

fn ticks_between(from: f64, to: f64, step: f64) -> Vec<f64> {
    let n = ((to - from) / step + 1e-9).floor().max(0.0) as usize;
    (0..=n.min(50)).map(|i| from + step * i as f64).map(|t| if t.abs() < step * 1e-9 { 0.0 } else { t }).collect()
}

fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    mag * if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    }
}

/// Ticks on a log axis within [lo, hi] (lo > 0): the powers of ten, and 2× and 5× them when the
/// range spans less than two and a half decades.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let mults: &[f64] = if (hi / lo).log10() < 2.5 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    let mut t = Vec::new();
    for e in a.max(-300)..=b.min(300) {
        for m in mults {
            let v = m * 10f64.powi(e);
            if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                t.push(v);
            }
        }
    }
    t
}

/// A tick or value label: short, with k/M/G for large numbers (`format::compact`).
pub fn num(v: f64) -> String {
    gpulab_core::format::compact(v)
}
