//! A learner's saved state survives an upgrade: the lab's `Saved`, written by the version before
//! the panels owned their state (fixtures/saved-before-panels.json: that version's fields, which
//! eframe keeps as RON), loads into today's lab, shows what it held, and is saved back whole.

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gpulab::app::{GpulabApp, Saved, Theme};

use crate::gui::MemStorage;

const BEFORE: &str = include_str!("fixtures/saved-before-panels.json");

/// The fixture as eframe would hand it to the lab at start: RON under `eframe::APP_KEY`.
fn restored() -> Saved {
    let saved: Saved = serde_json::from_str(BEFORE).expect("the old state parses");
    let mut storage = MemStorage::default();
    eframe::set_value(&mut storage, eframe::APP_KEY, &saved);
    eframe::get_value(&storage, eframe::APP_KEY).expect("and round-trips through eframe's RON")
}

#[test]
fn a_state_saved_before_the_panels_loads_and_is_saved_back() {
    let saved = restored();
    let mut h = Harness::builder()
        .allow_missing_glyphs()
        .with_size(eframe::egui::vec2(1920.0, 1400.0))
        .build_eframe(move |cc| GpulabApp::with_state(&cc.egui_ctx, saved, None, None));
    h.run_steps(3);

    // The selection and the settings, merged into today's defaults key by key: a value whose
    // setting changed type (epochs was a float) or is gone is dropped.
    assert_eq!(h.state().selected(), "batch-sweep");
    let s = h.state().settings("batch-sweep").expect("batch-sweep settings").clone();
    let defaults = gpulab::exercises::find("batch-sweep").unwrap().settings();
    let (values, defaults) = (s.to_map(), defaults.to_map());
    assert_eq!(values["batch_sizes"], "16,256");
    assert_eq!(values["optimizer"], "adamw");
    assert_eq!(values["backend"], "cpu");
    assert_eq!(values["epochs"], defaults["epochs"]);
    assert!(s.get("a_knob_that_is_gone").is_none());
    let p = h.state().settings("platform").unwrap();
    let p = p.to_map();
    assert_eq!((p["scenario"].as_str(), p["duration_h"].as_str()), ("bad-release", "10"));
    assert!(h.state().settings("an-exercise-that-is-gone").is_none());

    // The progress marks in the sidebar, the presenter's scale and theme, the hardware window.
    let marks = &h.state().progress().runs;
    assert_eq!(marks.len(), 2);
    assert_eq!(marks["platform"].figure.as_ref().map(|f| f.value), Some(99.8));
    assert!(h.query_all_by_label_contains("Stopped early · 2026-11-30 21:05 UTC").count() > 0, "the cpu-vs-gpu mark is not shown");
    assert!(h.query_all_by_label_contains("Ran · 2026-12-01 06:20 UTC").count() > 0, "the platform mark is not shown");
    assert!((h.state().ui_scale() - 1.3).abs() < 1e-6 && (h.ctx.zoom_factor() - 1.3).abs() < 1e-6);
    assert!(!h.ctx.global_style().visuals.dark_mode, "the projector theme was saved");
    assert!(!h.state().stage());
    assert!(h.query_by_label("GPU adapters").is_some(), "the hardware window was open");

    // Saved back: the same fields, the settings as merged.
    let mut storage = MemStorage::default();
    eframe::App::save(h.state_mut(), &mut storage);
    let again: Saved = eframe::get_value(&storage, eframe::APP_KEY).expect("the lab saved its state");
    let before = restored();
    assert_eq!(again.selected, before.selected);
    assert_eq!(again.progress, before.progress);
    assert_eq!(again.presenter, before.presenter);
    assert_eq!(again.presenter.theme, Theme::Projector);
    assert!(again.show_hardware);
    assert_eq!(again.settings.get("batch-sweep"), Some(&s));
    assert_eq!(again.settings.len(), gpulab::exercises::registry().len(), "a saved setting per exercise");
}
