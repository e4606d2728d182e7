//! The lab's panels: the exercise list, the lesson, the run controls with the settings, the
//! results (live charts while running, the report after) and the status bar.

use eframe::egui;

use egui::RichText;

use super::charts::{self, ChartView};
use super::diagram;
use super::job::Status;
use super::lab::GpulabApp;
use super::results;
use super::shortcuts::{self, tip};
use super::timeline;

impl GpulabApp {
    pub(super) fn exercise_list(&mut self, ui: &mut egui::Ui) {
        ui.add_space(4.0);
        ui.heading("Exercises").on_hover_text(format!(
            "{} / {}: previous / next exercise",
            ui.ctx().format_shortcut(&shortcuts::PREVIOUS),
            ui.ctx().format_shortcut(&shortcuts::NEXT)
        ));
        ui.add_space(4.0);
        let mut clicked = None;
        for ex in &self.exercises {
            let sel = self.saved.selected == ex.id();
            let label = format!("{}. {}", ex.number(), ex.title());
            let text = RichText::new(label);
            let running = self.job.as_ref().is_some_and(|j| j.exercise == ex.id());
            ui.horizontal(|ui| {
                let r = ui.add(egui::Button::selectable(sel, text).wrap_mode(egui::TextWrapMode::Wrap));
                if r.clicked() {
                    clicked = Some(ex.id().to_string());
                }
                if running {
                    ui.spinner();
                }
            });
            self.progress_line(ui, ex.id());
        }
        if let Some(id) = clicked {
            self.saved.selected = id;
        }
        self.progress_controls(ui);
    }

    pub(super) fn lesson(&mut self, ui: &mut egui::Ui, ex_idx: usize) {
        let ex = &self.exercises[ex_idx];
        egui::ScrollArea::vertical().id_salt(("lesson", ex.id())).auto_shrink([false, false]).show(ui, |ui| {
            super::cards::show_lesson(ui, &mut self.lesson_cache, ex.lesson(), ex.id());
        });
    }

    pub(super) fn controls(&mut self, ui: &mut egui::Ui, ex_idx: usize) {
        let id = self.exercises[ex_idx].id().to_string();
        egui::ScrollArea::vertical().id_salt(("controls", &id)).auto_shrink([false, false]).show(ui, |ui| {
            let valid = self.validate(ex_idx);
            if let Err(e) = &valid {
                ui.add(egui::Label::new(RichText::new(e.to_string()).color(ui.visuals().error_fg_color)).wrap());
            }
            ui.horizontal(|ui| self.run_stop_buttons(ui, ex_idx));
            if let Some(v) = self.runs.get(&id) {
                ui.add_space(4.0);
                match &v.status {
                    Status::Failed(msg) => {
                        ui.add(egui::Label::new(RichText::new(format!("Failed: {msg}")).color(ui.visuals().error_fg_color)).wrap());
                    }
                    _ => {
                        let t = v.elapsed.unwrap_or_else(|| v.started.elapsed()).as_secs_f32();
                        ui.label(format!("{} · {t:.1} s", v.phase));
                    }
                }
                if v.is_active() {
                    match v.progress {
                        Some((done, total)) if total > 0 => {
                            ui.add(egui::ProgressBar::new(done as f32 / total as f32).text(format!("{done} / {total}")));
                        }
                        _ => {
                            ui.add(egui::ProgressBar::new(0.0).animate(true));
                        }
                    }
                }
                ui.add_space(6.0);
                egui::CollapsingHeader::new(format!("Log ({} lines)", v.logs.len())).id_salt(("log", &id)).default_open(true).show(
                    ui,
                    |ui| {
                        egui::ScrollArea::vertical().id_salt(("log-scroll", &id)).max_height(110.0).stick_to_bottom(true).show(ui, |ui| {
                            for l in &v.logs {
                                ui.add(egui::Label::new(RichText::new(l).monospace().small()).wrap());
                            }
                        });
                    },
                );
            }
            ui.add_space(8.0);
            ui.separator();
            ui.horizontal(|ui| {
                ui.heading("Settings");
                if ui.add_enabled(self.job.is_none(), egui::Button::new("Reset to defaults").small()).clicked() {
                    let defaults = self.exercises[ex_idx].settings();
                    self.saved.settings.insert(id.clone(), defaults);
                    self.edits.retain(|k, _| k.0 != id);
                    self.errors.retain(|k, _| k.0 != id);
                }
                self.presets_ui(ui, &id);
            });
            self.settings_ui(ui, &id);
            ui.add_space(6.0);
        });
    }

    /// Whether exercise `ex_idx`'s current settings can run (what enables Run and F5).
    pub(super) fn validate(&self, ex_idx: usize) -> gpulab_core::Result<()> {
        let ex = &self.exercises[ex_idx];
        self.saved.settings.get(ex.id()).map(|s| ex.validate(s)).unwrap_or(Ok(()))
    }

    /// Run and Stop (with their shortcuts on hover), and which other exercise is running.
    pub(super) fn run_stop_buttons(&mut self, ui: &mut egui::Ui, ex_idx: usize) {
        let id = self.exercises[ex_idx].id().to_string();
        let valid = self.validate(ex_idx);
        let this_running = self.job.as_ref().is_some_and(|j| j.exercise == id);
        let ctx = ui.ctx().clone();
        let can_run = self.job.is_none() && valid.is_ok();
        let run = ui
            .add_enabled(can_run, egui::Button::new(RichText::new("Run").strong()).min_size(egui::vec2(80.0, 26.0)))
            .on_hover_text(tip(&ctx, "Run the exercise with these settings", &shortcuts::RUN));
        if run.clicked() {
            self.start_run();
        }
        if ui
            .add_enabled(this_running, egui::Button::new("Stop").min_size(egui::vec2(80.0, 26.0)))
            .on_hover_text(tip(&ctx, "Stop the run; what ran so far is reported", &shortcuts::STOP))
            .clicked()
        {
            self.stop_run();
        }
        if let Some(other) = self.job.as_ref().filter(|j| j.exercise != id) {
            ui.small(format!("{} is running", other.exercise));
        }
    }

    pub(super) fn results_panel(&mut self, ui: &mut egui::Ui) {
        let id = self.saved.selected.clone();
        let wide = ui.available_width();
        if let Some(job) = &self.job
            && job.exercise == id
            && self.exercises.iter().any(|e| e.id() == id && e.controllable())
        {
            diagram::run_controls(ui, &job.control, &mut self.run_speed);
        }
        egui::ScrollArea::vertical().id_salt(("results", &id)).auto_shrink([false, false]).show(ui, |ui| {
            let Some(v) = self.runs.get(&id) else {
                ui.heading("Results");
                ui.label("Press Run to start. Live charts appear here while the exercise runs; the verdict, tables and final charts when it finishes.");
                if self.compare.is_some() {
                    self.compare_ui(ui, None);
                }
                return;
            };
            if let Some(r) = &v.report {
                ui.heading(format!("Results · {}", r.title));
                ui.small(results::provenance_line(r));
                ui.add_space(4.0);
            } else {
                ui.heading("Live");
            }
            if let Status::Failed(msg) = &v.status {
                ui.add(egui::Label::new(RichText::new(format!("The run failed: {msg}")).color(ui.visuals().error_fg_color)).wrap());
            }
            let chart_h = if self.saved.presenter.stage { (ui.available_height() * 0.42).clamp(220.0, 520.0) } else if wide > 700.0 { 220.0 } else { 180.0 };
            if let Some(d) = &v.diagram {
                diagram::show(ui, d, &id);
                ui.add_space(8.0);
            }
            if let Some(r) = v.report.clone() {
                // An Arc: a pointer copy per frame, not the report's tables and series.
                if let Some(sg) = &r.suggestion {
                    let hover = sg.settings.iter().map(|(k, v)| format!("{k} = {v}")).collect::<Vec<_>>().join(", ");
                    if ui.add_enabled(self.job.is_none(), egui::Button::new(RichText::new(&sg.label).strong())).on_hover_text(format!("Sets {hover}, runs again, and shows this run beside the new one")).clicked() {
                        self.apply_suggestion();
                    }
                    ui.add_space(4.0);
                }
                self.file_bar(ui);
                if self.compare.is_some() {
                    self.compare_ui(ui, Some(&r));
                } else {
                    results::report(ui, &r, "current");
                }
                ui.add_space(8.0);
                ui.separator();
                ui.label(RichText::new("Charts").strong());
                for c in &r.charts {
                    charts::show(ui, &ChartView::from_report(c), "report", chart_h);
                    ui.add_space(8.0);
                }
            } else {
                for t in &v.tables {
                    results::table(ui, t, "live");
                    ui.add_space(6.0);
                }
                if !v.timelines.is_empty() {
                    ui.label(RichText::new("Timelines so far").strong());
                    for t in &v.timelines {
                        ui.label(RichText::new(&t.title).small().strong());
                        timeline::show(ui, t, "live");
                        ui.add_space(6.0);
                    }
                }
                if v.live.is_empty() {
                    ui.label("Waiting for the first measurements…");
                }
                for c in &v.live {
                    charts::show(ui, &ChartView::from_live(c, &v.chart_spec(&c.id)), "live", chart_h);
                    ui.add_space(8.0);
                }
            }
        });
    }

    pub(super) fn status_bar(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            match self.frame_stats.median_ms() {
                Some(ms) => ui.small(format!("frame {ms:.1} ms (median of last 120, measured)")),
                None => ui.small("frame — ms"),
            };
            ui.separator();
            match &self.hardware.adapters {
                None => {
                    ui.small("GPU adapters: detecting…");
                }
                Some(a) if a.is_empty() => {
                    ui.small(RichText::new("no GPU adapter found — CPU only").color(ui.visuals().warn_fg_color));
                }
                Some(a) => {
                    let names: Vec<String> = a
                        .iter()
                        .map(|a| if a.software { format!("{} (software GPU: runs on your CPU)", a.name) } else { a.name.clone() })
                        .collect();
                    ui.small(format!("GPU: {}", names.join(", ")));
                }
            }
        });
    }
}
