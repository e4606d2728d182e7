//! Plots: live chart histories while a run goes, the report's charts once it has finished. One
//! plot per chart id; log-x by plotting log10(x) with 10^v tick labels; markers as labelled
//! vertical lines; bar charts as grouped bars.

use eframe::egui;
use egui::RichText;
use egui_plot::{Bar, BarChart, HoverPosition, Legend, Line, Plot, PlotPoint, Points, Text, VLine};

use super::job::{LiveChart, decimate};
use super::theme;
use gpulab_exercises::LiveChartSpec;
use gpulab_systems::report::{Chart, ChartKind, Provenance};

/// Points drawn per series at most.
pub const MAX_DRAWN: usize = 2000;

/// What is drawn, whether it came from a live history or a finished report.
pub struct ChartView<'a> {
    pub id: &'a str,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub kind: ChartKind,
    pub log_x: bool,
    pub series: Vec<(&'a str, &'a [[f64; 2]], &'a Provenance)>,
    pub markers: &'a [(f64, String)],
}

impl<'a> ChartView<'a> {
    pub fn from_report(c: &'a Chart) -> Self {
        ChartView {
            id: &c.id,
            title: c.title.clone(),
            x_label: c.x_label.clone(),
            y_label: c.y_label.clone(),
            kind: c.kind,
            log_x: c.log_x,
            series: c.series.iter().map(|s| (s.name.as_str(), s.points.as_slice(), &s.provenance)).collect(),
            markers: &c.markers,
        }
    }

    /// A live history drawn as its exercise declared it (`Exercise::live_charts`).
    pub fn from_live(c: &'a LiveChart, spec: &LiveChartSpec) -> Self {
        ChartView {
            id: &c.id,
            title: format!("{} (live)", spec.title),
            x_label: spec.x_label.clone(),
            y_label: spec.y_label.clone(),
            kind: ChartKind::Line,
            log_x: spec.log_x,
            series: c.series.iter().map(|s| (s.name.as_str(), s.points.as_slice(), &s.provenance)).collect(),
            markers: &[],
        }
    }
}

fn provenance_of(series: &[(&str, &[[f64; 2]], &Provenance)]) -> String {
    let mut labels: Vec<String> = series.iter().map(|s| s.2.label()).collect();
    labels.dedup();
    labels.join("; ")
}

/// `v` with about three significant digits, no trailing noise.
pub fn short_num(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 {
        format!("{:.0}", v)
    } else if a >= 10.0 {
        format!("{:.1}", v)
    } else if a >= 0.1 {
        format!("{:.2}", v)
    } else if a >= 0.001 {
        format!("{:.4}", v)
    } else {
        format!("{:.2e}", v)
    }
}

/// A bar group's x value: whole numbers (runs, batch sizes) without decimals.
fn group_label(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 { format!("{x:.0}") } else { short_num(x) }
}

pub fn show(ui: &mut egui::Ui, c: &ChartView<'_>, salt: &str, height: f32) {
    // Colours and widths from the theme: egui_plot's own palette on dark, the projector palette
    // and thicker lines on the light theme.
    let visuals = ui.visuals().clone();
    let marker = theme::marker(&visuals);
    let width = theme::line_width(&visuals);
    ui.label(RichText::new(&c.title).strong());
    ui.small(format!("{} vs {}{} · {}", c.y_label, c.x_label, if c.log_x { " (log scale)" } else { "" }, provenance_of(&c.series)));
    if c.kind == ChartKind::Bars && !c.markers.is_empty() {
        for (_, m) in c.markers {
            ui.small(RichText::new(format!("— {m}")).color(marker));
        }
    }
    let log_x = c.log_x;
    let tx = move |x: f64| if log_x { x.log10() } else { x };
    let mut plot = Plot::new(("chart", salt, c.id))
        .height(height)
        .legend(Legend::default())
        .x_axis_label(c.x_label.clone())
        .y_axis_label(c.y_label.clone())
        .allow_scroll(false);
    match c.kind {
        ChartKind::Line => {
            if log_x {
                plot = plot.x_axis_formatter(|m, _| short_num(10f64.powf(m.value))).label_formatter(|h| {
                    let (name, p) = match h {
                        HoverPosition::NearDataPoint { plot_name, position, .. } => (*plot_name, *position),
                        HoverPosition::Elsewhere { position } => ("", *position),
                    };
                    Some(format!(
                        "{}{}x = {}\ny = {}",
                        name,
                        if name.is_empty() { "" } else { "\n" },
                        short_num(10f64.powf(p.x)),
                        short_num(p.y)
                    ))
                });
            }
            let series = &c.series;
            let markers = c.markers;
            plot.show(ui, |pui| {
                for (i, (name, pts, prov)) in series.iter().enumerate() {
                    let pts: Vec<[f64; 2]> =
                        decimate(pts, MAX_DRAWN).into_iter().filter(|p| !log_x || p[0] > 0.0).map(|p| [tx(p[0]), p[1]]).collect();
                    // A lone point (e.g. one kernel on the roofline) is a marker, not a line.
                    let colour = theme::series_color(&visuals, i);
                    if pts.len() == 1 {
                        let p = Points::new(format!("{name} ({})", prov.short()), pts).radius(width + 2.5);
                        pui.points(if let Some(c) = colour { p.color(c) } else { p });
                    } else {
                        let l = Line::new(format!("{name} ({})", prov.short()), pts).width(width);
                        pui.line(if let Some(c) = colour { l.color(c) } else { l });
                    }
                }
                let top = series.iter().flat_map(|s| s.1.iter().map(|p| p[1])).fold(f64::NAN, f64::max);
                for (x, label) in markers {
                    if log_x && *x <= 0.0 {
                        continue;
                    }
                    pui.vline(VLine::new(label.clone(), tx(*x)).color(marker));
                    if top.is_finite() {
                        pui.text(Text::new(label.clone(), PlotPoint::new(tx(*x), top), label.clone()).color(marker));
                    }
                }
            });
        }
        ChartKind::Bars => {
            // Distinct x values become groups; each series is one bar per group.
            let mut xs: Vec<f64> = c.series.iter().flat_map(|s| s.1.iter().map(|p| p[0])).collect();
            xs.sort_by(|a, b| a.total_cmp(b));
            xs.dedup();
            let n = c.series.len().max(1) as f64;
            let w = 0.8 / n;
            let xs2 = xs.clone();
            let xl = c.x_label.clone();
            plot = plot.x_axis_formatter(move |m, _| {
                let g = m.value.round();
                if (m.value - g).abs() < 1e-6 && g >= 0.0 && (g as usize) < xs2.len() {
                    format!("{} {}", xl, group_label(xs2[g as usize]))
                } else {
                    String::new()
                }
            });
            let series = &c.series;
            plot.show(ui, |pui| {
                for (si, (name, pts, prov)) in series.iter().enumerate() {
                    let bars: Vec<Bar> = pts
                        .iter()
                        .filter_map(|p| {
                            let g = xs.iter().position(|x| *x == p[0])? as f64;
                            Some(Bar::new(g + (si as f64 - (n - 1.0) / 2.0) * w, p[1]).width(w * 0.95).name(format!(
                                "{name}: {} ({})",
                                short_num(p[1]),
                                prov.short()
                            )))
                        })
                        .collect();
                    let chart = BarChart::new(format!("{name} ({})", prov.short()), bars);
                    pui.bar_chart(if let Some(c) = theme::series_color(&visuals, si) { chart.color(c) } else { chart });
                }
            });
        }
    }
}
