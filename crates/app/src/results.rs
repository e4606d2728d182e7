//! A finished report on screen: verdict, notes, headline figures, tables — every number with its
//! provenance.

use eframe::egui;
use egui::{Color32, RichText};

use gpulab_systems::report::{Cell, Report, Table};

/// The dark theme's warning colour; widgets use `ui.visuals().warn_fg_color`, which each theme sets.
pub const WARN: Color32 = Color32::from_rgb(240, 170, 50);
/// Longest cell text shown in full; longer text is cut with the whole on hover.
const MAX_CELL_CHARS: usize = 60;

pub fn verdict(ui: &mut egui::Ui, r: &Report) {
    egui::Frame::group(ui.style()).fill(ui.visuals().faint_bg_color).show(ui, |ui| {
        ui.set_width(ui.available_width());
        ui.label(RichText::new("Verdict (computed from the numbers)").small().weak());
        if r.stopped_early {
            ui.colored_label(ui.visuals().warn_fg_color, "Stopped early: the numbers below cover only what ran.");
        }
        ui.add(egui::Label::new(RichText::new(&r.verdict.summary).strong()).wrap());
        for e in &r.verdict.evidence {
            ui.horizontal_top(|ui| {
                ui.label("•");
                ui.add(egui::Label::new(e).wrap());
            });
        }
    });
}

pub fn notes(ui: &mut egui::Ui, r: &Report) {
    for n in &r.notes {
        let software = n.to_lowercase().contains("software gpu");
        let warn = ui.visuals().warn_fg_color;
        let frame =
            egui::Frame::group(ui.style()).stroke(egui::Stroke::new(1.0, if software { warn } else { ui.visuals().weak_text_color() }));
        frame.show(ui, |ui| {
            ui.set_width(ui.available_width());
            let text =
                if software { RichText::new(format!("Warning: {n}")).color(warn).strong() } else { RichText::new(format!("Note: {n}")) };
            ui.add(egui::Label::new(text).wrap());
        });
    }
}

pub fn figures(ui: &mut egui::Ui, r: &Report) {
    if r.figures.is_empty() {
        return;
    }
    ui.label(RichText::new("Headline figures").strong());
    for f in &r.figures {
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new(gpulab_core::format::with_unit(f.value, &f.unit)).strong().size(16.0));
            ui.label(&f.label);
            ui.label(RichText::new(f.provenance.short()).small().weak()).on_hover_text(f.provenance.label());
        });
    }
}

pub fn table(ui: &mut egui::Ui, t: &Table, salt: &str) {
    ui.label(RichText::new(&t.title).strong());
    egui::ScrollArea::horizontal().id_salt(("table-scroll", salt, &t.title)).show(ui, |ui| {
        // Cells keep their width; the table scrolls sideways instead of wrapping letters.
        ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
        egui::Grid::new(("table", salt, &t.title)).striped(true).spacing([14.0, 4.0]).show(ui, |ui| {
            for c in &t.columns {
                let unit = if c.unit.is_empty() { String::new() } else { format!("({})", c.unit) };
                let prov = c.provenance.as_ref().map(|p| p.short()).unwrap_or("");
                let sub = [unit.as_str(), prov].iter().filter(|s| !s.is_empty()).copied().collect::<Vec<_>>().join(" · ");
                let resp = ui.vertical(|ui| {
                    ui.label(RichText::new(&c.name).strong());
                    if !sub.is_empty() {
                        ui.label(RichText::new(sub).small().weak());
                    }
                });
                if let Some(p) = &c.provenance {
                    resp.response.on_hover_text(format!("{} {} · {}", c.name, unit, p.label()));
                }
            }
            ui.end_row();
            for row in &t.rows {
                for (i, c) in t.columns.iter().enumerate() {
                    let cell = row.get(i).unwrap_or(&Cell::Empty);
                    let text = cell.format(c);
                    let bad = text.contains("OUT OF MEMORY") || text.starts_with("failed");
                    let shown = if text.chars().count() > MAX_CELL_CHARS {
                        format!("{}…", text.chars().take(MAX_CELL_CHARS).collect::<String>())
                    } else {
                        text.clone()
                    };
                    let rich = if bad { RichText::new(shown).color(ui.visuals().error_fg_color) } else { RichText::new(shown) };
                    let resp = ui.label(rich);
                    if text.chars().count() > MAX_CELL_CHARS {
                        resp.on_hover_text(text);
                    }
                }
                ui.end_row();
            }
        });
    });
}

/// Verdict, notes, figures and tables.
pub fn report(ui: &mut egui::Ui, r: &Report, salt: &str) {
    verdict(ui, r);
    ui.add_space(4.0);
    notes(ui, r);
    ui.add_space(4.0);
    figures(ui, r);
    for t in &r.tables {
        ui.add_space(6.0);
        table(ui, t, salt);
    }
    super::timeline::show_all(ui, r, salt);
}

/// One line that says what a report was run on.
pub fn provenance_line(r: &Report) -> String {
    let backends: Vec<String> =
        r.metadata.backends.iter().map(|b| if b.software { format!("{} (software GPU)", b.name) } else { b.name.clone() }).collect();
    format!("{} · {} · {}", r.metadata.started_at, if backends.is_empty() { "—".into() } else { backends.join(", ") }, r.metadata.host)
}
