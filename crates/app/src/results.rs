//! A finished report on screen: verdict, notes, headline figures, tables — every number with its
//! provenance.

use eframe::egui;
use egui::{Color32, RichText};

use gpulab_systems::report::{Cell, Report, Table};

/// The dark theme's warning colour; widgets use `ui.visuals().warn_fg_color`, which each theme sets.
pub const WARN: Color32 = Color32::from_rgb(240, 170, 50);
/// Longest cell text shown in full; longer text is cut with the whole on hover.
const MAX_CELL_CHARS: usize = 60;

/// The verdict: its summary (at most two sentences that answer the exercise's question), with
/// the evidence folded under it.
pub fn verdict(ui: &mut egui::Ui, r: &Report, salt: &str) {
    egui::Frame::group(ui.style()).fill(ui.visuals().faint_bg_color).show(ui, |ui| {
        ui.set_width(ui.available_width());
        ui.label(RichText::new("Verdict (computed from the numbers)").small().weak());
        if r.stopped_early {
            ui.colored_label(ui.visuals().warn_fg_color, "Stopped early: the numbers below cover only what ran.");
        }
        ui.add(egui::Label::new(RichText::new(&r.verdict.summary).strong()).wrap());
        let n = r.verdict.evidence.len();
        if n > 0 {
            egui::CollapsingHeader::new(format!("Why: the evidence ({n} {})", if n == 1 { "line" } else { "lines" }))
                .id_salt(("evidence", salt))
                .default_open(false)
                .show(ui, |ui| {
                    for e in &r.verdict.evidence {
                        ui.horizontal_top(|ui| {
                            ui.label("•");
                            ui.add(egui::Label::new(e).wrap());
                        });
                    }
                });
        }
    });
}

/// The report's notes: a software-GPU warning stays in view; the others (prices, sizing,
/// telemetry) fold under one header, each note's details folded again under its line.
pub fn notes(ui: &mut egui::Ui, r: &Report, salt: &str) {
    let parts: Vec<(&str, Option<&str>)> = r.notes.iter().map(|n| gpulab_systems::report::note_parts(n)).collect();
    let is_warning = |n: &str| n.to_lowercase().contains("software gpu");
    let warn = ui.visuals().warn_fg_color;
    for (n, _) in parts.iter().filter(|(n, _)| is_warning(n)) {
        egui::Frame::group(ui.style()).stroke(egui::Stroke::new(1.0, warn)).show(ui, |ui| {
            ui.set_width(ui.available_width());
            ui.add(egui::Label::new(RichText::new(format!("Warning: {n}")).color(warn).strong()).wrap());
        });
    }
    let others: Vec<&(&str, Option<&str>)> = parts.iter().filter(|(n, _)| !is_warning(n)).collect();
    if others.is_empty() {
        return;
    }
    egui::CollapsingHeader::new(format!("Notes ({})", others.len())).id_salt(("notes", salt)).default_open(false).show(ui, |ui| {
        for (i, (n, details)) in others.iter().enumerate() {
            egui::Frame::group(ui.style()).stroke(egui::Stroke::new(1.0, ui.visuals().weak_text_color())).show(ui, |ui| {
                ui.set_width(ui.available_width());
                ui.add(egui::Label::new(format!("Note: {n}")).wrap());
                if let Some(d) = details {
                    egui::CollapsingHeader::new(RichText::new("details").small())
                        .id_salt(("note-details", salt, i))
                        .default_open(false)
                        .show(ui, |ui| {
                            ui.add(egui::Label::new(RichText::new(*d).small()).wrap());
                        });
                }
            });
        }
    });
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
    verdict(ui, r, salt);
    ui.add_space(4.0);
    notes(ui, r, salt);
    ui.add_space(4.0);
    figures(ui, r);
    for t in &r.tables {
        ui.add_space(6.0);
        table(ui, t, salt);
    }
    super::timeline::show_all(ui, r, salt);
}

/// What `size=auto` trained, where it chose the model: the settings' own widths did not run.
pub fn sized_line(r: &Report) -> Option<String> {
    let (hidden, epochs) = gpulab_exercises::sizing::trained(&r.config)?;
    let epochs = epochs.parse::<u64>().map(|n| format!(" for {}", gpulab_core::format::plural(n, "epoch"))).unwrap_or_default();
    Some(format!("Hidden layers sized to {hidden}{epochs} by size=auto (from the measured peak, not the widths in the settings)."))
}

/// One line that says what a report was run on.
pub fn provenance_line(r: &Report) -> String {
    let backends: Vec<String> =
        r.metadata.backends.iter().map(|b| if b.software { format!("{} (software GPU)", b.name) } else { b.name.clone() }).collect();
    format!("{} · {} · {}", r.metadata.started_at, if backends.is_empty() { "—".into() } else { backends.join(", ") }, r.metadata.host)
}
