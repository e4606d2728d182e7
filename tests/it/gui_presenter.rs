//! Presenter mode without a window (egui_kittest): the UI scale from the toolbar and the
//! keyboard, kept across a save and restore; the projector theme; the stage layout; the
//! shortcuts (F5, Esc, Ctrl+PageUp/PageDown, Ctrl+E); and every toolbar control found by the
//! label a screen reader reads.

use std::path::Path;
use std::time::{Duration, Instant};

use eframe::egui::{Key, Modifiers, Role};
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use gpulab::app::{GpulabApp, Saved, Theme};

use crate::gui::{MemStorage, harness, run_to_end};

fn harness_with(saved: Saved) -> Harness<'static, GpulabApp> {
    Harness::builder()
        .allow_missing_glyphs()
        .with_size(eframe::egui::vec2(1920.0, 1400.0))
        .build_eframe(move |cc| GpulabApp::with_state(&cc.egui_ctx, saved.clone(), None, None))
}

/// Saves the app as eframe does on exit and reads the state back as a restart would.
fn save_and_restore(h: &mut Harness<'static, GpulabApp>) -> Saved {
    let mut storage = MemStorage::default();
    eframe::App::save(h.state_mut(), &mut storage);
    eframe::get_value(&storage, eframe::APP_KEY).expect("the lab saved its state")
}

fn scale_label(h: &Harness<'static, GpulabApp>) -> String {
    h.get_by_label_contains("UI scale ").accesskit_node().label().unwrap_or_default()
}

#[test]
fn ui_scale_from_toolbar_and_keyboard_agrees_and_survives_a_restart() {
    let mut h = harness();
    h.run_steps(2);
    assert_eq!(h.state().ui_scale(), 1.0);
    assert!(scale_label(&h).contains("100%"), "{}", scale_label(&h));
    h.get_by_label("Zoom in").click();
    h.run_steps(3);
    h.get_by_label("Zoom in").click();
    h.run_steps(3);
    assert!((h.ctx.zoom_factor() - 1.2).abs() < 1e-4, "two clicks on + give 120%, got {}", h.ctx.zoom_factor());
    assert!(scale_label(&h).contains("120%"), "the toolbar shows the new scale: {}", scale_label(&h));
    // The keyboard changes the same value, and the toolbar follows.
    h.key_press_modifiers(Modifiers::COMMAND, Key::Minus);
    h.run_steps(3);
    assert!((h.ctx.zoom_factor() - 1.1).abs() < 1e-4, "Ctrl+Minus after 120% gives 110%, got {}", h.ctx.zoom_factor());
    assert!(scale_label(&h).contains("110%"), "{}", scale_label(&h));
    assert!((h.state().ui_scale() - 1.1).abs() < 1e-4);

    let saved = save_and_restore(&mut h);
    assert!((saved.presenter.ui_scale - 1.1).abs() < 1e-4, "saved scale {}", saved.presenter.ui_scale);
    let mut h2 = harness_with(saved);
    h2.run_steps(3);
    assert!((h2.ctx.zoom_factor() - 1.1).abs() < 1e-4, "a restart restores 110%, got {}", h2.ctx.zoom_factor());
    assert!(scale_label(&h2).contains("110%"), "{}", scale_label(&h2));
    // Reset from the toolbar, and Ctrl+0 from the keyboard.
    h2.get_by_label_contains("UI scale 110%").click();
    h2.run_steps(3);
    assert_eq!(h2.ctx.zoom_factor(), 1.0);
    h2.key_press_modifiers(Modifiers::COMMAND, Key::Equals);
    h2.run_steps(3);
    assert!((h2.ctx.zoom_factor() - 1.1).abs() < 1e-4);
    h2.key_press_modifiers(Modifiers::COMMAND, Key::Num0);
    h2.run_steps(3);
    assert_eq!(h2.state().ui_scale(), 1.0);
}

/// A second click where the first one landed zooms again (it once toggled "Projector theme":
/// the scale controls moved under the pointer as the window's contents grew).
#[test]
fn zoom_in_stays_under_the_pointer_as_the_scale_grows() {
    let mut h = harness();
    h.run_steps(2);
    for _ in 0..4 {
        let ppp = h.ctx.pixels_per_point();
        let before = h.get_by_label("Zoom in").rect();
        let pointer = before.center() * ppp;
        h.get_by_label("Zoom in").click();
        h.run_steps(3);
        let ppp = h.ctx.pixels_per_point();
        let after = h.get_by_label("Zoom in").rect();
        let after_px = eframe::egui::Rect::from_min_max(after.min * ppp, after.max * ppp);
        assert!(after_px.contains(pointer), "\"Zoom in\" moved from {before:?} to {after:?} (points) at {ppp} px/point");
    }
    assert!(h.state().ui_scale() > 1.35, "four clicks zoomed four times: {}", h.state().ui_scale());
}

#[test]
fn a_damaged_saved_scale_falls_back_into_range() {
    for (stored, want) in [(f32::NAN, 1.0), (40.0, gpulab::app::MAX_SCALE), (0.0, gpulab::app::MIN_SCALE)] {
        let mut saved = Saved::default();
        saved.presenter.ui_scale = stored;
        let mut h = harness_with(saved);
        h.run_steps(3);
        assert_eq!(h.ctx.zoom_factor(), want, "stored {stored}");
    }
}

#[test]
fn projector_theme_is_light_and_persisted() {
    let mut h = harness();
    h.run_steps(2);
    assert!(h.ctx.global_style().visuals.dark_mode, "the lab starts dark");
    h.get_by_label("Projector theme").click();
    h.run_steps(2);
    assert!(!h.ctx.global_style().visuals.dark_mode, "the projector theme is light");
    assert_eq!(h.ctx.global_style().visuals.text_color(), eframe::egui::Color32::BLACK);
    let saved = save_and_restore(&mut h);
    assert_eq!(saved.presenter.theme, Theme::Projector);
    let mut h2 = harness_with(saved);
    h2.run_steps(2);
    assert!(!h2.ctx.global_style().visuals.dark_mode, "a restart keeps the projector theme");
    h2.get_by_label("Projector theme").click();
    h2.run_steps(2);
    assert!(h2.ctx.global_style().visuals.dark_mode, "toggling again is dark");
}

#[test]
fn shortcuts_change_exercise_but_not_while_typing() {
    let mut h = harness();
    h.run_steps(2);
    assert_eq!(h.state().selected(), "cpu-vs-gpu");
    h.key_press_modifiers(Modifiers::COMMAND, Key::PageDown);
    h.run_steps(2);
    assert_eq!(h.state().selected(), "batch-sweep", "Ctrl+PageDown selects the next exercise");
    h.key_press_modifiers(Modifiers::COMMAND, Key::PageUp);
    h.run_steps(2);
    h.key_press_modifiers(Modifiers::COMMAND, Key::PageUp);
    h.run_steps(2);
    let last = gpulab::exercises::registry().last().map(|e| e.id()).unwrap_or_default();
    assert_eq!(h.state().selected(), last, "Ctrl+PageUp from the first wraps to the last");
    h.key_press_modifiers(Modifiers::COMMAND, Key::PageDown);
    h.run_steps(2);
    assert_eq!(h.state().selected(), "cpu-vs-gpu");

    // Typing in a text field: the keys are the field's.
    h.get_by_role_and_label(Role::TextInput, "Matmul sizes").focus();
    h.run_steps(2);
    assert!(h.ctx.egui_wants_keyboard_input(), "the text field has the keyboard");
    h.key_press_modifiers(Modifiers::COMMAND, Key::PageDown);
    h.key_press(Key::F5);
    h.run_steps(2);
    assert_eq!(h.state().selected(), "cpu-vs-gpu", "Ctrl+PageDown fired while typing");
    assert!(!h.state().is_running() && h.state().run_view().is_none(), "F5 fired while typing");
    // Esc leaves the field; then the shortcuts work again.
    h.key_press(Key::Escape);
    h.run_steps(2);
    assert!(!h.ctx.egui_wants_keyboard_input());
    h.key_press_modifiers(Modifiers::COMMAND, Key::PageDown);
    h.run_steps(2);
    assert_eq!(h.state().selected(), "batch-sweep");
}

/// Exercise 10 at one simulated minute per second: still going when Esc arrives.
#[test]
fn f5_runs_and_esc_stops() {
    let mut h = harness();
    h.state_mut().select("platform");
    for (k, v) in [("scenario", "steady-day"), ("duration_h", "6"), ("sweep_points", "3"), ("sweep_runs", "2")] {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    h.state_mut().set_run_speed(60.0);
    h.run_steps(2);
    h.key_press(Key::F5);
    h.run_steps(2);
    assert!(h.state().is_running(), "F5 started a run");
    h.key_press(Key::F5);
    h.run_steps(1);
    h.key_press(Key::Escape);
    let t0 = Instant::now();
    while h.state().is_running() {
        assert!(t0.elapsed() < Duration::from_secs(60), "Esc did not stop the run within 60 s");
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    h.run_steps(2);
    let v = h.state().run_view().expect("a run view");
    assert!(!matches!(v.status, gpulab::app::Status::Failed(_)), "the stopped run failed");
    // Six simulated hours at a minute per second would take six hours: it stopped early.
    assert!(h.state().report().is_none_or(|r| r.stopped_early), "the report does not say it stopped early");
}

fn reports_in(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    rd.flatten().map(|e| e.path().join("report.json")).filter(|p| p.is_file()).collect()
}

/// A finished run: Ctrl+E writes the report into the export folder; the stage layout hides the
/// lesson and the settings and keeps the verdict.
#[test]
fn ctrl_e_exports_and_stage_shows_only_the_results() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut h = harness();
    h.state_mut().set_export_root(dir.path());
    h.state_mut().select("platform");
    for (k, v) in [("scenario", "bad-release"), ("duration_h", "10"), ("sweep_points", "4"), ("sweep_runs", "3")] {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    h.state_mut().set_run_speed(0.0);
    h.run_steps(2);
    // Ctrl+E with no report yet writes nothing.
    h.key_press_modifiers(Modifiers::COMMAND, Key::E);
    h.run_steps(2);
    h.key_press(Key::F5);
    run_to_end(&mut h, Duration::from_secs(120));
    assert!(reports_in(dir.path()).is_empty(), "Ctrl+E before any report wrote one");
    let report = h.state().report().expect("a report").clone();

    h.key_press_modifiers(Modifiers::COMMAND, Key::E);
    let t0 = Instant::now();
    while reports_in(dir.path()).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(30), "Ctrl+E wrote no report.json into {}", dir.path().display());
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    let written = gpulab::report::read_json(&reports_in(dir.path())[0]).expect("the exported report reads back");
    assert_eq!(written.verdict.summary, report.verdict.summary);

    // Stage: the lesson, the exercise list and the settings go; the verdict and charts stay.
    let lesson_heading = "What to observe";
    assert!(h.query_all_by_label(lesson_heading).count() > 0, "the lesson is shown before the stage");
    h.get_by_label("Stage").click();
    h.run_steps(3);
    assert!(h.state().stage());
    assert_eq!(h.query_all_by_label(lesson_heading).count(), 0, "the stage still shows the lesson");
    assert!(h.query_by_label("Reset to defaults").is_none(), "the stage still shows the settings");
    assert!(h.query_by_label("10. A production GPU platform (simulation)").is_none(), "the stage still shows the exercise list");
    h.get_by_label(&report.verdict.summary);
    h.get_by_label("Charts");
    h.get_by_role_and_label(Role::Button, "Run");
    let (seen, unlabelled) = unlabelled_controls(&h);
    assert!(seen > 5 && unlabelled.is_empty(), "the stage's controls after a run ({seen}) without a label: {unlabelled:?}");
    // The key brings the lesson back, and the choice is saved.
    assert!(save_and_restore(&mut h).presenter.stage);
    h.key_press_modifiers(Modifiers::COMMAND | Modifiers::SHIFT, Key::S);
    h.run_steps(3);
    assert!(!h.state().stage());
    assert!(h.query_all_by_label(lesson_heading).count() > 0, "leaving the stage shows the lesson again");
}

/// Each shortcut is named in its button's tooltip.
#[test]
fn tooltips_name_the_shortcuts() {
    let mut h = harness();
    h.run_steps(2);
    for (button, key) in [("Run", "F5"), ("Stage", "Ctrl+Shift+S"), ("Zoom in", "Ctrl+Plus"), ("Zoom out", "Ctrl+Minus")] {
        h.get_by_role_and_label(Role::Button, button).hover();
        // Past egui's tooltip delay.
        h.run_steps(60);
        let shown = h.query_all_by_label_contains(&format!("({key})")).count();
        assert!(shown > 0, "hovering {button} shows no tooltip naming {key}");
    }
}

fn unlabelled_controls(h: &Harness<'static, GpulabApp>) -> (usize, Vec<String>) {
    let roles = [Role::Button, Role::CheckBox, Role::ComboBox, Role::TextInput, Role::SpinButton, Role::Slider];
    let mut unlabelled = Vec::new();
    let mut seen = 0;
    for node in h.root().children_recursive() {
        let n = node.accesskit_node();
        if roles.contains(&n.role()) {
            seen += 1;
            if n.label().is_none_or(|l| l.trim().is_empty()) {
                unlabelled.push(format!("{:?} {:?}", n.role(), n.value()));
            }
        }
    }
    (seen, unlabelled)
}

/// Every toolbar control has the label a screen reader speaks (icon-only buttons included), and
/// no button, check box, combo box, text field or number field in the lab is unlabelled.
#[test]
fn every_control_has_an_accessible_label() {
    let mut h = harness();
    h.run_steps(3);
    for label in ["Hardware", "Stage", "Projector theme", "Zoom in", "Zoom out"] {
        h.get_by_label(label);
    }
    assert!(scale_label(&h).starts_with("UI scale 100%"));
    for id in ["cpu-vs-gpu", "platform", "checkpoint"] {
        h.state_mut().select(id);
        h.run_steps(3);
        let (seen, unlabelled) = unlabelled_controls(&h);
        assert!(seen > 5, "{id}: only {seen} controls found");
        assert!(unlabelled.is_empty(), "{id}: controls without a label: {unlabelled:?}");
    }
}
