//! Draws a `report::Diagram` (boxes on a grid with live metric lines, arrows between them);
//! clicking a box shows the settings it was built from. Also the pause / step / speed bar for
//! runs whose exercise honours a `RunControl`. Nothing here knows which exercise drew what.

use eframe::egui;
use egui::{Align2, Color32, FontId, Pos2, Rect, RichText, Sense, Stroke, StrokeKind, Vec2};

use gpulab_exercises::RunControl;
use gpulab_systems::report::{Diagram, edge_points};

/// Speeds offered, as (label, simulated seconds per wall second; 0 = as fast as possible).
pub const SPEEDS: [(&str, f64); 5] =
    [("1 min/s", 60.0), ("10 min/s", 600.0), ("1 h/s", 3600.0), ("6 h/s", 21_600.0), ("as fast as possible", 0.0)];

const LINE_H: f32 = 15.0;
/// Narrowest grid cell, pixels: below it box text would be cut.
const MIN_CELL_W: f32 = 210.0;

pub fn show(ui: &mut egui::Ui, d: &Diagram, salt: &str) {
    ui.label(RichText::new(&d.title).strong());
    ui.small(format!("{} · {} · click a box for its settings", d.caption, d.provenance.label()));
    let (cols, rows) = d.grid();
    if cols == 0 {
        return;
    }
    // A wide diagram in a narrow panel (exercise 10's four columns beside the lesson at 1280
    // px) turns on its side, columns becoming rows, instead of scrolling its boxes out of view.
    let turn = cols > rows && ui.available_width() < cols as f32 * MIN_CELL_W;
    let (cols, rows) = if turn { (rows, cols) } else { (cols, rows) };
    let place = |n: &gpulab_systems::report::DiagramNode| if turn { (n.row, n.col) } else { (n.col, n.row) };
    let sel_id = ui.scope_id().with(("diagram-selected", salt));
    let mut selected: Option<String> = ui.data(|m| m.get_temp(sel_id));
    egui::ScrollArea::horizontal().id_salt(("diagram", salt)).show(ui, |ui| {
        // Boxes keep a readable width; a narrow panel scrolls the diagram sideways instead.
        let cell_w = (ui.available_width() / cols as f32).max(MIN_CELL_W);
        let width = cell_w * cols as f32;
        let box_w = cell_w - 28.0;
        let box_h = 8.0 + LINE_H * d.max_lines() as f32;
        let cell_h = box_h + 28.0;
        let (area, _) = ui.allocate_exact_size(Vec2::new(width, cell_h * rows as f32), Sense::hover());
        let boxes: Vec<Rect> = d
            .nodes
            .iter()
            .map(|n| {
                let (col, row) = place(n);
                Rect::from_min_size(area.min + Vec2::new(cell_w * col as f32 + 4.0, cell_h * row as f32 + 8.0), Vec2::new(box_w, box_h))
            })
            .collect();
        let painter = ui.painter_at(area);
        let visuals = ui.visuals().clone();
        let arrow = Stroke::new(1.5, visuals.text_color());
        for &(a, b) in &d.edges {
            let (Some(ra), Some(rb)) = (boxes.get(a), boxes.get(b)) else { continue };
            let r = |r: &Rect| (r.min.x as f64, r.min.y as f64, r.width() as f64, r.height() as f64);
            let (p, q) = edge_points(r(ra), r(rb));
            let (p, q) = (Pos2::new(p.0 as f32, p.1 as f32), Pos2::new(q.0 as f32, q.1 as f32));
            painter.line_segment([p, q], arrow);
            let dir = (q - p).normalized();
            let side = Vec2::new(-dir.y, dir.x);
            painter.add(egui::Shape::convex_polygon(
                vec![q, q - dir * 9.0 + side * 4.5, q - dir * 9.0 - side * 4.5],
                visuals.text_color(),
                Stroke::NONE,
            ));
        }
        let small = FontId::proportional(12.0);
        for (n, r) in d.nodes.iter().zip(&boxes) {
            let full = [n.label.clone()]
                .into_iter()
                .chain(n.metrics.iter().cloned())
                .chain(n.alerts.iter().map(|a| format!("⚠ {a}")))
                .collect::<Vec<_>>()
                .join("\n");
            let resp = ui.interact(*r, ui.scope_id().with(("diagram-node", salt, &n.id)), Sense::click()).on_hover_text(full);
            let label = n.label.clone();
            resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &label));
            let is_sel = selected.as_deref() == Some(n.id.as_str());
            let fill = match (n.alerts.is_empty(), visuals.dark_mode) {
                (true, true) => Color32::from_rgb(38, 48, 64),
                (true, false) => Color32::from_rgb(234, 241, 251),
                (false, true) => Color32::from_rgb(80, 36, 36),
                (false, false) => Color32::from_rgb(253, 232, 230),
            };
            let stroke = if is_sel || resp.hovered() {
                Stroke::new(2.5, visuals.selection.bg_fill)
            } else {
                Stroke::new(1.0, visuals.widgets.noninteractive.fg_stroke.color)
            };
            painter.rect(*r, 6.0, fill, stroke, StrokeKind::Inside);
            let mut y = r.min.y + 4.0;
            let x = r.min.x + 6.0;
            let clip = painter.with_clip_rect(r.shrink(2.0));
            clip.text(Pos2::new(x, y), Align2::LEFT_TOP, &n.label, FontId::proportional(13.0), visuals.strong_text_color());
            for m in &n.metrics {
                y += LINE_H;
                clip.text(Pos2::new(x, y), Align2::LEFT_TOP, m, small.clone(), visuals.text_color());
            }
            for m in &n.alerts {
                y += LINE_H;
                clip.text(Pos2::new(x, y), Align2::LEFT_TOP, format!("⚠ {m}"), small.clone(), visuals.error_fg_color);
            }
            if resp.clicked() {
                selected = Some(n.id.clone());
                ui.data_mut(|m| m.insert_temp(sel_id, n.id.clone()));
            }
        }
    });
    if let Some(n) = selected.as_deref().and_then(|id| d.node(id)) {
        ui.add_space(4.0);
        ui.horizontal(|ui| {
            ui.label(RichText::new(format!("Settings of {}", n.label)).strong());
            if ui.small_button("Hide").clicked() {
                ui.data_mut(|m| m.remove_temp::<String>(sel_id));
            }
        });
        egui::Grid::new(("diagram-settings", salt)).striped(true).show(ui, |ui| {
            for (k, v) in &n.settings {
                ui.label(k);
                ui.label(v);
                ui.end_row();
            }
        });
        if n.settings.is_empty() {
            ui.small("This box has no settings of its own.");
        }
    }
}

/// Pause / resume, step and speed for a running exercise; `speed` is remembered for the next run.
pub fn run_controls(ui: &mut egui::Ui, c: &RunControl, speed: &mut f64) {
    ui.horizontal(|ui| {
        let paused = c.is_paused();
        if ui.button(if paused { "Resume" } else { "Pause" }).clicked() {
            c.set_paused(!paused);
        }
        if ui.add_enabled(paused, egui::Button::new("Step")).on_hover_text("Advance to the next live point while paused").clicked() {
            c.step();
        }
        let label = ui.label("Speed").id;
        let current = SPEEDS.iter().find(|s| s.1 == *speed).map_or("custom", |s| s.0);
        egui::ComboBox::from_id_salt("run-speed")
            .selected_text(current)
            .show_ui(ui, |ui| {
                for (name, v) in SPEEDS {
                    if ui.selectable_label(*speed == v, name).clicked() {
                        *speed = v;
                        c.set_speed(v);
                    }
                }
            })
            .response
            .labelled_by(label);
        ui.small("simulated time per second of wall time");
    });
}
