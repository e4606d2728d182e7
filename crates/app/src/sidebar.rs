//! The sidebar: the registry's exercises in order (a spinner beside the one running), each with
//! its progress mark, and "Clear progress" under them. It owns the learner's `Progress`; a click
//! asks the lab to select the exercise.

use eframe::egui;
use egui::RichText;

use super::context::{Command, LabView};
use super::progress::Progress;
use super::shortcuts;

#[derive(Default)]
pub(crate) struct Sidebar {
    /// Which exercises the learner has run (kept in `Saved`).
    pub progress: Progress,
}

impl Sidebar {
    pub fn new(progress: Progress) -> Self {
        Sidebar { progress }
    }

    pub fn ui(&mut self, ui: &mut egui::Ui, view: &LabView, commands: &mut Vec<Command>) {
        ui.add_space(4.0);
        ui.heading("Exercises").on_hover_text(format!(
            "{} / {}: previous / next exercise",
            ui.ctx().format_shortcut(&shortcuts::PREVIOUS),
            ui.ctx().format_shortcut(&shortcuts::NEXT)
        ));
        ui.add_space(4.0);
        for ex in view.exercises {
            let selected = view.selected == ex.id();
            let text = RichText::new(format!("{}. {}", ex.number(), ex.title()));
            let running = view.running.as_deref() == Some(ex.id());
            ui.horizontal(|ui| {
                if ui.add(egui::Button::selectable(selected, text).wrap_mode(egui::TextWrapMode::Wrap)).clicked() {
                    commands.push(Command::Select(ex.id().to_string()));
                }
                if running {
                    ui.spinner();
                }
            });
            self.progress.line_ui(ui, ex.id());
        }
        self.progress.controls_ui(ui, view.exercises.len());
    }
}
