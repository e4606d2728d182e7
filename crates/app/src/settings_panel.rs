//! The settings editor: one widget per setting, by its value type, with the setting's help on
//! hover and its error under it. Backend lists come from the device layer's registry (each
//! backend, the detected wgpu adapters, a backend this build lacks with the reason).

use eframe::egui;

use egui::RichText;

use std::collections::{BTreeMap, HashMap};

use super::context::{Command, LabView};
use gpulab_core::device::gpu::adapters::AdapterSummary;
use gpulab_core::device::{Device, GpuSelector, registry};
use gpulab_core::tensor::BackendKind;
use gpulab_exercises::{Exercise, Preset, Settings, Value, presets};

/// The settings of every exercise (kept in `Saved`), what is being typed into them, and each
/// exercise's last validation.
#[derive(Default)]
pub(crate) struct SettingsPanel {
    settings: BTreeMap<String, Settings>,
    /// Text being typed into list/text settings, per (exercise, key), while it differs from the value.
    edits: HashMap<(String, String), String>,
    errors: HashMap<(String, String), String>,
    /// Each exercise's settings when last validated, and the outcome: validation runs once per
    /// change, not per frame (exercise 10's reads its scenario and traffic files).
    checked: HashMap<String, (Settings, Result<(), String>)>,
}

impl SettingsPanel {
    /// Today's defaults of every exercise with the saved values merged in key by key (a value
    /// whose setting is gone or changed type is dropped), so a changed exercise never loads a
    /// stale or invalid configuration.
    pub fn new(exercises: &[Box<dyn Exercise>], saved: &BTreeMap<String, Settings>) -> Self {
        let mut settings = BTreeMap::new();
        for ex in exercises {
            let mut s = ex.settings();
            if let Some(old) = saved.get(ex.id()) {
                for o in &old.0 {
                    if s.get(&o.key).is_some_and(|d| std::mem::discriminant(&d.value) == std::mem::discriminant(&o.value)) {
                        let _ = s.set(&o.key, &o.value.to_text());
                    }
                }
            }
            settings.insert(ex.id().to_string(), s);
        }
        SettingsPanel { settings, ..Default::default() }
    }

    /// What `Saved` keeps.
    pub fn saved(&self) -> BTreeMap<String, Settings> {
        self.settings.clone()
    }

    pub fn get(&self, id: &str) -> Option<&Settings> {
        self.settings.get(id)
    }

    /// Sets one setting of exercise `id` as its widget would.
    pub fn set(&mut self, id: &str, key: &str, text: &str) -> gpulab_core::Result<()> {
        let s = self.settings.get_mut(id).ok_or_else(|| gpulab_core::Error::InvalidConfig(format!("no exercise {id}")))?;
        s.set(key, text)?;
        let k = (id.to_string(), key.to_string());
        self.edits.remove(&k);
        self.errors.remove(&k);
        Ok(())
    }

    /// Replaces exercise `id`'s settings (defaults, a preset), dropping what was being typed.
    fn replace(&mut self, id: &str, settings: Settings) {
        self.settings.insert(id.to_string(), settings);
        self.edits.retain(|k, _| k.0 != id);
        self.errors.retain(|k, _| k.0 != id);
    }

    /// Sets `ex`'s settings to its preset `name` (its defaults with the preset's values).
    pub fn apply_preset(&mut self, ex: &dyn Exercise, name: &str) -> gpulab_core::Result<()> {
        let settings = presets::find(ex, name)?.settings(ex)?;
        self.replace(ex.id(), settings);
        Ok(())
    }

    /// The preset `ex`'s settings match, if any (what the dropdown shows).
    pub fn active_preset(&self, ex: &dyn Exercise) -> Option<&'static str> {
        presets::active(ex, self.settings.get(ex.id())?)
    }

    /// Whether `ex`'s settings can run (what enables Run and F5), validated once per change.
    pub fn validate(&mut self, ex: &dyn Exercise) -> Result<(), String> {
        let Some(s) = self.settings.get(ex.id()) else { return Ok(()) };
        if let Some((seen, outcome)) = self.checked.get(ex.id())
            && seen == s
        {
            return outcome.clone();
        }
        let outcome = ex.validate(s).map_err(|e| e.to_string());
        self.checked.insert(ex.id().to_string(), (s.clone(), outcome.clone()));
        outcome
    }

    /// "Settings", "Reset to defaults", the presets, and a widget per setting of `ex` (all
    /// disabled while a run is in flight).
    pub fn ui(&mut self, ui: &mut egui::Ui, view: &LabView, ex: &dyn Exercise, commands: &mut Vec<Command>) {
        ui.horizontal(|ui| {
            ui.heading("Settings");
            if ui.add_enabled(!view.is_running(), egui::Button::new("Reset to defaults").small()).clicked() {
                self.replace(ex.id(), ex.settings());
            }
            self.presets_ui(ui, view, ex, commands);
        });
        self.settings_ui(ui, view, ex.id());
    }

    /// The exercise's presets as a dropdown (beside "Reset to defaults"); it names the active
    /// preset — the one whose values the settings hold — until a setting is edited away from it.
    fn presets_ui(&mut self, ui: &mut egui::Ui, view: &LabView, ex: &dyn Exercise, commands: &mut Vec<Command>) {
        let id = ex.id();
        let all = ex.presets();
        if all.is_empty() {
            return;
        }
        let active = self.active_preset(ex);
        let mut chosen: Option<Preset> = None;
        ui.add_enabled_ui(!view.is_running(), |ui| {
            let lab_id = ui.label("Preset").id;
            // Untouched defaults are the lesson's settings, not "custom" ones.
            let untouched = self.settings.get(id).is_some_and(|s| *s == ex.settings());
            let shown = active.unwrap_or(if untouched { "as in the lesson" } else { "custom settings" });
            egui::ComboBox::from_id_salt(("preset", id))
                .selected_text(shown)
                .width(220.0)
                .show_ui(ui, |ui| {
                    for p in &all {
                        let hover = format!("{}\n\nSets: {}", p.description, p.summary());
                        if ui.selectable_label(active == Some(p.name), p.name).on_hover_text(hover).clicked() {
                            chosen = Some(p.clone());
                        }
                    }
                })
                .response
                .labelled_by(lab_id)
                .on_hover_text(
                    active
                        .and_then(|n| all.iter().find(|p| p.name == n))
                        .map_or("Named settings that show one thing; choosing one starts from the defaults", |p| p.description),
                );
        });
        if let Some(p) = chosen
            && let Err(e) = self.apply_preset(ex, p.name)
        {
            commands.push(Command::Status(Err(e.to_string())));
        }
    }

    fn settings_ui(&mut self, ui: &mut egui::Ui, view: &LabView, id: &str) {
        let adapters = view.adapters;
        let trained = view.trained.clone();
        let Some(settings) = self.settings.get_mut(id) else { return };
        let edits = &mut self.edits;
        let errors = &mut self.errors;
        let running = view.is_running();
        let keys: Vec<String> = settings.0.iter().map(|s| s.key.clone()).collect();
        ui.add_enabled_ui(!running, |ui| {
            egui::Grid::new(("settings", id)).num_columns(2).spacing([10.0, 6.0]).show(ui, |ui| {
                for key in &keys {
                    let Some(s) = settings.get(key).cloned() else { continue };
                    // size=auto replaces the hidden widths and epochs at run time: say so here,
                    // with what the last run trained, so the form never shows a model that did not run.
                    let overridden = gpulab_exercises::sizing::overridden(settings, key);
                    let ek = (id.to_string(), key.clone());
                    let lab_id = ui.label(&s.label).on_hover_text(&s.help).id;
                    let mut new_text: Option<String> = None;
                    ui.vertical(|ui| {
                        match &s.value {
                            Value::Int { value, min, max } => {
                                let mut v = *value;
                                if ui
                                    .add(egui::DragValue::new(&mut v).range(*min..=*max))
                                    .labelled_by(lab_id)
                                    .on_hover_text(&s.help)
                                    .changed()
                                {
                                    new_text = Some(v.to_string());
                                }
                            }
                            Value::Float { value, min, max } => {
                                let mut v = *value;
                                let speed = ((max - min).abs() / 1000.0).clamp(1e-4, 1.0);
                                if ui
                                    .add(egui::DragValue::new(&mut v).range(*min..=*max).speed(speed).max_decimals(6))
                                    .labelled_by(lab_id)
                                    .on_hover_text(&s.help)
                                    .changed()
                                {
                                    new_text = Some(v.to_string());
                                }
                            }
                            Value::Bool(b) => {
                                let mut v = *b;
                                if ui.checkbox(&mut v, "").labelled_by(lab_id).on_hover_text(&s.help).changed() {
                                    new_text = Some(v.to_string());
                                }
                            }
                            Value::Choice { value, options } => {
                                let mut v = value.clone();
                                egui::ComboBox::from_id_salt(("choice", id, key))
                                    .selected_text(&v)
                                    .show_ui(ui, |ui| {
                                        for o in options {
                                            ui.selectable_value(&mut v, o.clone(), o);
                                        }
                                    })
                                    .response
                                    .labelled_by(lab_id)
                                    .on_hover_text(&s.help);
                                if v != *value {
                                    new_text = Some(v);
                                }
                            }
                            Value::Devices(list) => {
                                new_text = devices(ui, list, adapters);
                            }
                            Value::List { .. } | Value::Text(_) => {
                                let mut text = edits.get(&ek).cloned().unwrap_or_else(|| s.value.to_text());
                                let r = ui
                                    .add(egui::TextEdit::singleline(&mut text).desired_width(180.0))
                                    .labelled_by(lab_id)
                                    .on_hover_text(&s.help);
                                if r.changed() {
                                    edits.insert(ek.clone(), text.clone());
                                    new_text = Some(text);
                                }
                                if r.lost_focus() && !errors.contains_key(&ek) {
                                    edits.remove(&ek);
                                }
                            }
                        }
                        if let Some(t) = &new_text {
                            match settings.set(key, t) {
                                Ok(()) => {
                                    errors.remove(&ek);
                                }
                                Err(e) => {
                                    errors.insert(ek.clone(), e.to_string());
                                }
                            }
                        }
                        if let Some(e) = errors.get(&ek) {
                            ui.add(egui::Label::new(RichText::new(e).color(ui.visuals().error_fg_color).small()).wrap());
                        }
                        if overridden {
                            let last = trained.as_ref().map(|(h, e)| if key == "hidden" { h.as_str() } else { e.as_str() });
                            let text = match last.filter(|t| !t.is_empty()) {
                                Some(t) => format!("overridden by size=auto: the last run trained {t}"),
                                None => "overridden by size=auto: the run chooses this from the measured peak".to_string(),
                            };
                            ui.add(egui::Label::new(RichText::new(text).small().color(super::theme::info(ui.visuals()))).wrap());
                        }
                    });
                    ui.end_row();
                }
            });
        });
    }
}

/// The backend checkboxes, one per registered backend (`device::registry`), the wgpu adapters
/// under the best-GPU one once detected; returns the new list (comma-separated) when it changed.
fn devices(ui: &mut egui::Ui, list: &[String], adapters: Option<&[AdapterSummary]>) -> Option<String> {
    let mut chosen = list.to_vec();
    let mut toggle = |ui: &mut egui::Ui, dev: &str, label: String, hover: &str, enabled: bool| {
        let mut on = chosen.iter().any(|d| d == dev);
        // A backend that cannot run stays removable if a saved configuration chose it.
        if ui.add_enabled(enabled || on, egui::Checkbox::new(&mut on, label)).on_hover_text(hover).on_disabled_hover_text(hover).changed() {
            if on {
                chosen.push(dev.to_string());
            } else {
                chosen.retain(|d| d != dev);
            }
        }
    };
    let mut listed = Vec::new();
    for b in &registry::BACKENDS {
        let dev = b.default_device().to_string();
        if b.feature.is_none() {
            toggle(ui, &dev, b.label.into(), b.about, b.built);
        } else {
            // A backend not every build has says what it is, or why this build cannot use it (a
            // CUDA build does not probe for the device here: that would block the UI thread).
            let status = b.status();
            toggle(ui, &dev, b.label.into(), &format!("{dev}: {status}"), b.built);
            ui.add(egui::Label::new(RichText::new(format!("{}: {status}", b.label)).small().weak()).wrap());
        }
        listed.push(dev);
        if b.kind == BackendKind::Gpu {
            match adapters {
                None => {
                    ui.horizontal(|ui| {
                        ui.spinner();
                        ui.small("detecting adapters…");
                    });
                }
                Some(found) => {
                    for a in found {
                        let dev = Device::Gpu(GpuSelector::Index(a.index)).to_string();
                        toggle(ui, &dev, a.label(), &format!("{dev}: {} {}", a.driver, a.driver_info), true);
                        listed.push(dev);
                    }
                }
            }
        }
    }
    // Backends typed elsewhere (gpu:NAME, cuda:N) stay visible and removable.
    for d in list.iter().filter(|d| !listed.contains(d)) {
        toggle(ui, d, d.clone(), "set from a saved or typed configuration", true);
    }
    (chosen != list).then(|| chosen.join(","))
}
