//! The lab's keyboard: F5 run, Esc stop, Ctrl+PageUp / Ctrl+PageDown previous / next exercise,
//! Ctrl+E export (into the reports folder, as "Write to ./gpulab-reports"), Ctrl+Shift+S the
//! stage layout, Ctrl +/−/0 the UI scale (egui's keys; the value is the lab's, shared with the
//! toolbar). Read at the start of a frame, before any widget, so a shortcut is consumed before a
//! scroll area sees PageUp/PageDown; none fires while a text field has the keyboard, except Esc.

use eframe::egui;
use egui::{Key, KeyboardShortcut, Modifiers};

use super::lab::GpulabApp;

pub const RUN: KeyboardShortcut = KeyboardShortcut::new(Modifiers::NONE, Key::F5);
pub const STOP: KeyboardShortcut = KeyboardShortcut::new(Modifiers::NONE, Key::Escape);
pub const PREVIOUS: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::PageUp);
pub const NEXT: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::PageDown);
pub const EXPORT: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::E);
pub const STAGE: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND.plus(Modifiers::SHIFT), Key::S);

/// A button's tooltip with its shortcut, as this platform writes it (Ctrl or ⌘).
pub fn tip(ctx: &egui::Context, text: &str, shortcut: &KeyboardShortcut) -> String {
    format!("{text} ({})", ctx.format_shortcut(shortcut))
}

impl GpulabApp {
    /// Acts on this frame's shortcuts.
    pub(super) fn shortcuts(&mut self, ctx: &egui::Context) {
        // Esc first and always: it also takes the focus out of a text field, so a run can be
        // stopped from anywhere.
        // Read, not consumed: the text field still hears it and lets the focus go.
        if self.job.is_some() && ctx.input(|i| i.key_pressed(STOP.logical_key) && i.modifiers.is_none()) {
            self.stop_run();
        }
        // UI scale, as browsers do it (also while typing): egui's keys, the lab's value.
        use egui::gui_zoom::kb_shortcuts::{ZOOM_IN, ZOOM_IN_SECONDARY, ZOOM_OUT, ZOOM_RESET};
        if ctx.input_mut(|i| i.consume_shortcut(&ZOOM_RESET)) {
            self.step_scale(0);
        }
        if ctx.input_mut(|i| i.consume_shortcut(&ZOOM_IN) || i.consume_shortcut(&ZOOM_IN_SECONDARY)) {
            self.step_scale(1);
        }
        if ctx.input_mut(|i| i.consume_shortcut(&ZOOM_OUT)) {
            self.step_scale(-1);
        }
        if ctx.egui_wants_keyboard_input() {
            return;
        }
        let pressed = |s: &KeyboardShortcut| ctx.input_mut(|i| i.consume_shortcut(s));
        if pressed(&RUN) {
            self.start_run_if_valid();
        }
        if pressed(&PREVIOUS) {
            self.select_relative(-1);
        }
        if pressed(&NEXT) {
            self.select_relative(1);
        }
        if pressed(&EXPORT) && self.report().is_some() && self.file_busy.is_none() {
            self.export_default();
        }
        if pressed(&STAGE) {
            self.saved.presenter.stage = !self.saved.presenter.stage;
        }
    }

    /// F5: what the Run button does, and only when it is enabled (no run going, valid settings).
    fn start_run_if_valid(&mut self) {
        let at = self.exercises.iter().position(|x| x.id() == self.saved.selected);
        if self.job.is_none() && at.is_some_and(|i| self.validate(i).is_ok()) {
            self.start_run();
        }
    }

    /// The exercise `step` places away in the list, wrapping around at either end.
    fn select_relative(&mut self, step: isize) {
        let n = self.exercises.len() as isize;
        if n == 0 {
            return;
        }
        let at = self.exercises.iter().position(|x| x.id() == self.saved.selected).unwrap_or(0) as isize;
        let next = (at + step).rem_euclid(n) as usize;
        self.saved.selected = self.exercises[next].id().to_string();
    }
}
