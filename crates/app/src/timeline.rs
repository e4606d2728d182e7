//! The profiler's timeline: one lane per loader worker, the main thread and the GPU queue; a
//! horizontal bar per span (drag to pan, ctrl+scroll or pinch to zoom, hover for its duration).
//! Timelines of one report share their time axis, so before and after line up; gaps on the GPU
//! lane are the device idling.

use eframe::egui;
use egui::{Color32, RichText};
use egui_plot::{Bar, BarChart, GridMark, Plot};

use super::theme;
use gpulab_core::spans::{GPU, Timeline};
use gpulab_systems::report::Report;

/// A stage's colour: GPU kernels green; every other stage a fixed colour picked from its name,
/// so the same stage looks the same in every timeline (before and after) without the app
/// knowing which stages a profiler records.
/// Darkened on the light theme so bars stay visible on white.
fn color(v: &egui::Visuals, name: &str, lane: &str) -> Color32 {
    if lane == GPU {
        return theme::on_background(v, Color32::from_rgb(90, 190, 110));
    }
    const PALETTE: [(u8, u8, u8); 8] = [
        (230, 160, 60),
        (200, 120, 200),
        (220, 80, 70),
        (80, 160, 230),
        (120, 120, 230),
        (160, 160, 160),
        (110, 110, 110),
        (190, 190, 120),
    ];
    // FNV-1a: stable across runs and builds, unlike the std hasher.
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3));
    let (r, g, b) = PALETTE[(h % PALETTE.len() as u64) as usize];
    theme::on_background(v, Color32::from_rgb(r, g, b))
}

/// Every timeline of the report, the first and last open.
pub fn show_all(ui: &mut egui::Ui, r: &Report, salt: &str) {
    if r.timelines.is_empty() {
        return;
    }
    ui.add_space(6.0);
    ui.label(RichText::new("Timelines").strong());
    ui.small("One lane per thread or queue, one bar per span. Drag to pan, ctrl+scroll to zoom, hover a bar for its duration; the time axes are linked. Gaps on the GPU lane are the GPU waiting.");
    let last = r.timelines.len() - 1;
    for (i, t) in r.timelines.iter().enumerate() {
        egui::CollapsingHeader::new(RichText::new(&t.title).strong())
            .id_salt(("timeline", salt, i))
            .default_open(i == 0 || i == last)
            .show(ui, |ui| show(ui, t, salt));
    }
}

pub fn show(ui: &mut egui::Ui, t: &Timeline, salt: &str) {
    let (t0, t1) = t.extent();
    let busy = match t.gpu_busy_percent() {
        None => "no GPU kernel times".to_string(),
        Some(p) => format!("GPU busy {p:.0}% of the span shown (derived from timestamps)"),
    };
    ui.small(format!("{:.1} ms · {} spans · {busy}", (t1 - t0) * 1e3, t.spans.len()));
    ui.small(format!("Lanes, top to bottom: {}", t.lanes.join(" · ")));
    if !t.gpu_note.is_empty() {
        ui.add(egui::Label::new(RichText::new(&t.gpu_note).small().weak()).wrap());
    }
    let n = t.lanes.len();
    let y_of = |lane: &str| t.lanes.iter().position(|l| l == lane).map(|i| (n - 1 - i) as f64);
    // One bar chart per stage: same colour, one legend entry.
    let mut names: Vec<(&str, &str)> = Vec::new();
    for s in &t.spans {
        let key = (if s.lane == GPU { "GPU kernel" } else { s.name.as_str() }, if s.lane == GPU { GPU } else { "" });
        if !names.contains(&key) {
            names.push(key);
        }
    }
    let lanes = t.lanes.clone();
    let visuals = ui.visuals().clone();
    let plot = Plot::new(("timeline-plot", salt, &t.title))
        .height(n as f32 * 26.0 + 46.0)
        .link_axis(egui::Id::unique(("timeline-link", salt)), [true, false])
        .allow_scroll(false)
        .allow_zoom([true, false])
        .allow_drag([true, false])
        .show_grid([true, false])
        .include_y(-0.6)
        .include_y(n as f64 - 0.4)
        .x_axis_label("ms since the run started")
        .y_axis_min_width(110.0)
        .y_grid_spacer(move |_| (0..n).map(|i| GridMark { value: i as f64, step_size: 1.0 }).collect())
        .y_axis_formatter(move |m, _| {
            let i = n as f64 - 1.0 - m.value;
            if i.fract().abs() < 1e-6 && i >= 0.0 { lanes.get(i as usize).cloned().unwrap_or_default() } else { String::new() }
        })
        .label_formatter(|_| None);
    plot.show(ui, |pui| {
        for (name, lane_kind) in &names {
            let bars: Vec<Bar> = t
                .spans
                .iter()
                .filter(|s| if *lane_kind == GPU { s.lane == GPU } else { s.lane != GPU && s.name == *name })
                .filter_map(|s| {
                    let y = y_of(&s.lane)?;
                    let label = if s.lane == GPU {
                        format!("{}: {:.1} µs", s.name, s.duration() * 1e6)
                    } else {
                        format!("{} · {}: {:.2} ms", s.lane, s.name, s.duration() * 1e3)
                    };
                    Some(
                        Bar::new(y, s.duration() * 1e3)
                            .base_offset((s.start_s - t0) * 1e3)
                            .width(0.7)
                            .name(label)
                            .fill(color(&visuals, &s.name, &s.lane))
                            .stroke(egui::Stroke::NONE),
                    )
                })
                .collect();
            pui.bar_chart(
                BarChart::new(*name, bars)
                    .horizontal()
                    .color(color(&visuals, name, lane_kind))
                    .element_formatter(Box::new(|b, _| b.name.clone())),
            );
        }
    });
}
