//! The lab's keyboard: F5 run, Esc stop, Ctrl+PageUp / Ctrl+PageDown previous / next exercise,
//! Ctrl+E export (into the reports folder, as "Write to ./gpulab-reports"), Ctrl+Shift+S the
//! stage layout, Ctrl +/−/0 the UI scale (egui's keys; the value is the lab's, shared with the
//! toolbar). Read at the start of a frame, before any widget, so a shortcut is consumed before a
//! scroll area sees PageUp/PageDown; none fires while a text field has the keyboard, except Esc.

use eframe::egui;
use egui::{Key, KeyboardShortcut, Modifiers};

use super::context::Command;

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

/// This frame's shortcuts as commands, read before any widget. `running`: a run is in flight;
/// `can_run`: Run is enabled (no run, valid settings) — F5 does only what the button would.
pub(crate) fn read(ctx: &egui::Context, running: bool, can_run: bool) -> Vec<Command> {
    let mut commands = Vec::new();
    // Esc first and always: it also takes the focus out of a text field, so a run can be
    // stopped from anywhere.
    // Read, not consumed: the text field still hears it and lets the focus go.
    if running && ctx.input(|i| i.key_pressed(STOP.logical_key) && i.modifiers.is_none()) {
        commands.push(Command::StopRun);
    }
    // UI scale, as browsers do it (also while typing): egui's keys, the lab's value.
    use egui::gui_zoom::kb_shortcuts::{ZOOM_IN, ZOOM_IN_SECONDARY, ZOOM_OUT, ZOOM_RESET};
    if ctx.input_mut(|i| i.consume_shortcut(&ZOOM_RESET)) {
        commands.push(Command::StepScale(0));
    }
    if ctx.input_mut(|i| i.consume_shortcut(&ZOOM_IN) || i.consume_shortcut(&ZOOM_IN_SECONDARY)) {
        commands.push(Command::StepScale(1));
    }
    if ctx.input_mut(|i| i.consume_shortcut(&ZOOM_OUT)) {
        commands.push(Command::StepScale(-1));
    }
    if ctx.egui_wants_keyboard_input() {
        return commands;
    }
    let pressed = |s: &KeyboardShortcut| ctx.input_mut(|i| i.consume_shortcut(s));
    if pressed(&RUN) && can_run {
        commands.push(Command::StartRun);
    }
    if pressed(&PREVIOUS) {
        commands.push(Command::SelectRelative(-1));
    }
    if pressed(&NEXT) {
        commands.push(Command::SelectRelative(1));
    }
    if pressed(&EXPORT) {
        commands.push(Command::ExportReport);
    }
    if pressed(&STAGE) {
        commands.push(Command::ToggleStage);
    }
    commands
}
