//! Plots: live chart histories while a run goes, the report's charts once it has finished. One
//! plot per chart id; log-x by plotting log10(x) with 10^v tick labels; markers as labelled
//! vertical lines; bar charts as grouped bars.

use eframe::egui;
use egui::{Color32, RichText};
use egui_plot::{Bar, BarChart, GridMark, HLine, HoverPosition, Line, Plot, PlotPoint, Points, Text, VLine};

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
    /// Horizontal target lines (y, label).
    pub hlines: &'a [(f64, String)],
    /// Names of bar groups by their x value ("1 slow", "4 + cache").
    pub x_names: &'a [(f64, String)],
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
            hlines: &c.targets,
            x_names: &c.x_names,
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
            hlines: &[],
            x_names: &[],
        }
    }
}

impl ChartView<'_> {
    /// A bar group's name: its run's name where the chart gives one, else "x label value".
    fn group_name(&self, x: f64) -> String {
        match self.x_names.iter().find(|(v, _)| *v == x) {
            Some((_, name)) => name.clone(),
            None => format!("{} {}", self.x_label, group_label(x)),
        }
    }
}

fn provenance_of(series: &[(&str, &[[f64; 2]], &Provenance)]) -> String {
    let mut labels: Vec<String> = series.iter().map(|s| s.2.label()).collect();
    labels.dedup();
    labels.join("; ")
}

/// A chart label: `format::compact` (k/M/G, three significant digits).
pub fn short_num(v: f64) -> String {
    gpulab_core::format::compact(v)
}

/// A bar group's x value: whole numbers (runs, batch sizes) without decimals.
fn group_label(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 { format!("{x:.0}") } else { short_num(x) }
}

/// The value of a series that never moves (a loss scale that stayed at 65536, a share pinned at
/// 100 %): drawn as a line it would sit on an axis zoomed into nothing (65510–65560), so it is
/// shown as its number. None for fewer than three points or any change.
pub fn flat_value(pts: &[[f64; 2]]) -> Option<f64> {
    let first = pts.first()?[1];
    (pts.len() >= 3 && first.is_finite() && pts.iter().all(|p| (p[1] - first).abs() <= 1e-9 * first.abs())).then_some(first)
}

/// Grid marks for a log10 axis: every decade, and 2× and 5× within it when fewer than two
/// decades show; more than eight decades thin to every second or fifth.
pub fn log_marks(lo: f64, hi: f64) -> Vec<GridMark> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return Vec::new();
    }
    let span = hi - lo;
    let every = if span > 20.0 {
        5
    } else if span > 8.0 {
        2
    } else {
        1
    };
    let mut marks = Vec::new();
    for e in (lo.floor() as i64)..=(hi.ceil() as i64) {
        if e.rem_euclid(every) == 0 && (lo..=hi).contains(&(e as f64)) {
            marks.push(GridMark { value: e as f64, step_size: every as f64 });
        }
        if span < 2.0 {
            for m in [2f64, 5.0] {
                let v = e as f64 + m.log10();
                if (lo..=hi).contains(&v) {
                    marks.push(GridMark { value: v, step_size: 0.3 });
                }
            }
        }
    }
    marks
}

/// The legend: a row above the plot, so it never covers a point.
fn legend(ui: &mut egui::Ui, entries: &[(String, Color32)]) {
    ui.horizontal_wrapped(|ui| {
        for (name, colour) in entries {
            let h = ui.text_style_height(&egui::TextStyle::Small);
            let (rect, _) = ui.allocate_exact_size(egui::vec2(h * 1.4, h), egui::Sense::hover());
            ui.painter().rect_filled(rect.shrink2(egui::vec2(0.0, h * 0.3)), 1.0, *colour);
            ui.label(RichText::new(name).small());
            ui.add_space(6.0);
        }
    });
}

pub fn show(ui: &mut egui::Ui, c: &ChartView<'_>, salt: &str, height: f32) {
    // Colours and widths from the theme: a palette per theme, thicker lines on the light one.
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
    // A chart whose every series is flat says its numbers instead of drawing flat lines.
    let flat: Vec<Option<f64>> = c.series.iter().map(|s| flat_value(s.1)).collect();
    if c.kind == ChartKind::Line && !flat.is_empty() && flat.iter().all(Option::is_some) {
        for ((name, pts, prov), v) in c.series.iter().zip(&flat) {
            let v = v.unwrap_or(f64::NAN);
            ui.label(format!(
                "{name}: {} {} at every one of its {} points ({})",
                gpulab_core::format::number(v),
                c.y_label,
                pts.len(),
                prov.short()
            ));
        }
        return;
    }
    let entries: Vec<(String, Color32)> = c
        .series
        .iter()
        .enumerate()
        .map(|(i, (name, _, prov))| (format!("{name} ({})", prov.short()), theme::series_color(&visuals, i)))
        .collect();
    legend(ui, &entries);
    let log_x = c.log_x;
    let tx = move |x: f64| if log_x { x.log10() } else { x };
    let mut plot = Plot::new(("chart", salt, c.id))
        .height(height)
        .x_axis_label(c.x_label.clone())
        .y_axis_label(c.y_label.clone())
        .y_axis_formatter(|m, _| short_num(m.value))
        .allow_scroll(false);
    match c.kind {
        ChartKind::Line => {
            if log_x {
                plot = plot
                    .x_grid_spacer(|input| log_marks(input.bounds.0, input.bounds.1))
                    .x_axis_formatter(|m, _| short_num(10f64.powf(m.value)))
                    .label_formatter(|h| {
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
            let hlines = c.hlines;
            plot.show(ui, |pui| {
                for (i, (name, pts, prov)) in series.iter().enumerate() {
                    let pts: Vec<[f64; 2]> =
                        decimate(pts, MAX_DRAWN).into_iter().filter(|p| !log_x || p[0] > 0.0).map(|p| [tx(p[0]), p[1]]).collect();
                    // A lone point (e.g. one kernel on the roofline) is a marker, not a line.
                    let colour = theme::series_color(&visuals, i);
                    if pts.len() == 1 {
                        pui.points(Points::new(format!("{name} ({})", prov.short()), pts).radius(width + 2.5).color(colour));
                    } else {
                        pui.line(Line::new(format!("{name} ({})", prov.short()), pts).width(width).color(colour));
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
                target_lines(pui, hlines, marker);
            });
        }
        ChartKind::Bars => {
            // Distinct x values become groups; each series is one bar per group.
            let mut xs: Vec<f64> = c.series.iter().flat_map(|s| s.1.iter().map(|p| p[0])).collect();
            xs.sort_by(|a, b| a.total_cmp(b));
            xs.dedup();
            // Each group's bars share 0.8 of its width: one bar per run (exercise 7's runs,
            // one series each) is as wide and centred as a group of several.
            let in_group = |x: f64| c.series.iter().filter(|s| s.1.iter().any(|p| p[0] == x)).count().max(1) as f64;
            let counts: Vec<f64> = xs.iter().map(|x| in_group(*x)).collect();
            let names: Vec<String> = xs.iter().map(|x| c.group_name(*x)).collect();
            plot = plot.x_axis_formatter(move |m, _| {
                let g = m.value.round();
                if (m.value - g).abs() < 1e-6 && g >= 0.0 && (g as usize) < names.len() { names[g as usize].clone() } else { String::new() }
            });
            let series = &c.series;
            let hlines = c.hlines;
            plot.show(ui, |pui| {
                for (si, (name, pts, prov)) in series.iter().enumerate() {
                    let bars: Vec<Bar> = pts
                        .iter()
                        .filter_map(|p| {
                            let gi = xs.iter().position(|x| *x == p[0])?;
                            let n = counts[gi];
                            let w = 0.8 / n;
                            // This bar's place among the series that have a bar in this group.
                            let k = series[..si].iter().filter(|s| s.1.iter().any(|q| q[0] == p[0])).count() as f64;
                            Some(Bar::new(gi as f64 + (k - (n - 1.0) / 2.0) * w, p[1]).width(w * 0.95).name(format!(
                                "{name}: {} ({})",
                                short_num(p[1]),
                                prov.short()
                            )))
                        })
                        .collect();
                    let chart = BarChart::new(format!("{name} ({})", prov.short()), bars);
                    pui.bar_chart(chart.color(theme::series_color(&visuals, si)));
                }
                target_lines(pui, hlines, marker);
            });
        }
    }
}

/// Horizontal target lines (an SLO, an efficiency goal), dashed, labelled at the left.
fn target_lines(pui: &mut egui_plot::PlotUi<'_>, hlines: &[(f64, String)], colour: Color32) {
    let left = pui.plot_bounds().min()[0];
    for (y, label) in hlines {
        pui.hline(HLine::new(label.clone(), *y).color(colour).style(egui_plot::LineStyle::dashed_loose()));
        pui.text(Text::new(label.clone(), PlotPoint::new(left, *y), label.clone()).color(colour).anchor(egui::Align2::LEFT_BOTTOM));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_series_is_a_number() {
        assert_eq!(flat_value(&[[0.0, 65536.0], [1.0, 65536.0], [2.0, 65536.0]]), Some(65536.0));
        assert_eq!(flat_value(&[[0.0, 65536.0], [1.0, 65536.0], [2.0, 32768.0]]), None);
        assert_eq!(flat_value(&[[0.0, 1.0], [1.0, 1.0]]), None);
        assert_eq!(flat_value(&[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]), Some(0.0));
    }

    #[test]
    fn log_axes_have_labelled_decades() {
        let m = log_marks(0.2, 3.7);
        let decades: Vec<f64> = m.iter().filter(|g| g.step_size == 1.0).map(|g| g.value).collect();
        assert_eq!(decades, [1.0, 2.0, 3.0]);
        let near = log_marks(1.0, 2.5);
        assert!(near.iter().any(|g| (g.value - 2f64.log10() - 1.0).abs() < 1e-12), "{near:?}");
        assert!(log_marks(0.0, 30.0).iter().all(|g| g.value as i64 % 5 == 0));
        assert!(log_marks(1.0, f64::NAN).is_empty());
    }
}
