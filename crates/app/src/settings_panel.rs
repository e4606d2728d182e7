//! The settings editor: one widget per setting, by its value type, with the setting's help on
//! hover and its error under it. Backend lists come from the device layer (CPU, the detected
//! wgpu adapters, CUDA with the reason it is unavailable in this build).

use eframe::egui;

use egui::RichText;

use super::lab::GpulabApp;
use gpulab_core::device::gpu::adapters::AdapterSummary;
use gpulab_core::device::{Device, GpuSelector, cuda};
use gpulab_exercises::{Preset, Value, presets};

impl GpulabApp {
    /// The exercise's presets as a dropdown (beside "Reset to defaults"); it names the active
    /// preset — the one whose values the settings hold — until a setting is edited away from it.
    pub(super) fn presets_ui(&mut self, ui: &mut egui::Ui, id: &str) {
        let Some(ex) = self.exercises.iter().find(|e| e.id() == id) else { return };
        let all = ex.presets();
        if all.is_empty() {
            return;
        }
        let active = self.saved.settings.get(id).and_then(|s| presets::active(ex.as_ref(), s));
        let mut chosen: Option<Preset> = None;
        ui.add_enabled_ui(self.job.is_none(), |ui| {
            let lab_id = ui.label("Preset").id;
            let shown = active.unwrap_or("custom settings");
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
            && let Err(e) = self.apply_preset(p.name)
        {
            self.file_status = Some(Err(e.to_string()));
        }
    }

    /// Sets the selected exercise's settings to its preset `name` (its defaults with the
    /// preset's values), as choosing it in the dropdown does.
    pub fn apply_preset(&mut self, name: &str) -> gpulab_core::Result<()> {
        let id = self.saved.selected.clone();
        let ex =
            self.exercises.iter().find(|e| e.id() == id).ok_or_else(|| gpulab_core::Error::InvalidConfig(format!("no exercise {id}")))?;
        let settings = presets::find(ex.as_ref(), name)?.settings(ex.as_ref())?;
        self.saved.settings.insert(id.clone(), settings);
        self.edits.retain(|k, _| k.0 != id);
        self.errors.retain(|k, _| k.0 != id);
        Ok(())
    }

    /// The preset the selected exercise's settings match, if any (what the dropdown shows).
    pub fn active_preset(&self) -> Option<&'static str> {
        let id = self.saved.selected.as_str();
        let ex = self.exercises.iter().find(|e| e.id() == id)?;
        presets::active(ex.as_ref(), self.saved.settings.get(id)?)
    }

    pub(super) fn settings_ui(&mut self, ui: &mut egui::Ui, id: &str) {
        let adapters = self.hardware.adapters.clone();
        let Some(settings) = self.saved.settings.get_mut(id) else { return };
        let edits = &mut self.edits;
        let errors = &mut self.errors;
        let running = self.job.is_some();
        let keys: Vec<String> = settings.0.iter().map(|s| s.key.clone()).collect();
        ui.add_enabled_ui(!running, |ui| {
            egui::Grid::new(("settings", id)).num_columns(2).spacing([10.0, 6.0]).show(ui, |ui| {
                for key in &keys {
                    let Some(s) = settings.get(key).cloned() else { continue };
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
                                new_text = devices(ui, list, adapters.as_deref());
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
                    });
                    ui.end_row();
                }
            });
        });
    }
}

/// The backend checkboxes; returns the new list (comma-separated) when it changed.
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
    let cpu = Device::Cpu.to_string();
    let gpu = Device::Gpu(GpuSelector::Auto).to_string();
    toggle(ui, &cpu, "CPU".into(), "The CPU backend (GEMM + rayon)", true);
    toggle(ui, &gpu, "Best GPU (auto)".into(), "The best adapter gpulab finds", true);
    let mut listed = vec![cpu, gpu];
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
    let (cuda_dev, why) = cuda_entry();
    toggle(ui, &cuda_dev, "CUDA".into(), &format!("{cuda_dev}: {why}"), cuda::BUILT);
    ui.add(egui::Label::new(RichText::new(format!("CUDA: {why}")).small().weak()).wrap());
    listed.push(cuda_dev);
    // Backends typed elsewhere (gpu:NAME, cuda:N) stay visible and removable.
    for d in list.iter().filter(|d| !listed.contains(d)) {
        toggle(ui, d, d.clone(), "set from a saved or typed configuration", true);
    }
    (chosen != list).then(|| chosen.join(","))
}

/// The CUDA entry, written once from the device layer: its setting value and why this build
/// cannot use it (`device::cuda::unavailable`), or, in a CUDA build, that a run checks for the
/// device (probing the driver here would block the UI thread).
fn cuda_entry() -> (String, String) {
    let why = if cuda::BUILT {
        "NVIDIA GPU through CUDA; a run that cannot open it says why".to_string()
    } else {
        cuda::unavailable().to_string()
    };
    (Device::Cuda(0).to_string(), why)
}
