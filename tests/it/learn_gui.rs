//! The learner's side of the lab (egui_kittest): the lesson's check-yourself questions as cards
//! whose answers open on click, and the progress marks in the sidebar, which survive a restart
//! through eframe's storage.

use std::time::Duration;

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gpulab::app::{GpulabApp, Saved};

use crate::gui::{MemStorage, run_to_end};

fn harness_with(saved: Saved) -> Harness<'static, GpulabApp> {
    Harness::builder()
        .allow_missing_glyphs()
        .with_size(eframe::egui::vec2(1920.0, 1400.0))
        .build_eframe(move |cc| GpulabApp::with_state(&cc.egui_ctx, saved, None, None))
}

/// The plain text an answer starts with (before any markdown styling), which the viewer draws
/// as one label.
fn leading_text(answer: &str) -> String {
    let end = answer.find(['*', '`', '_', '[', '"', '\'']).unwrap_or(answer.len());
    answer[..end].chars().take(40).collect::<String>().trim().to_string()
}

/// Frames enough for a scroll animation to finish.
fn settle(h: &mut Harness<'static, GpulabApp>) {
    for _ in 0..30 {
        h.step();
    }
}

#[test]
fn show_answer_opens_the_answer_and_hide_answer_closes_it() {
    let mut h = harness_with(Saved::default());
    for e in gpulab::exercises::registry() {
        h.get_by_label(&format!("{}. {}", e.number(), e.title())).click();
        h.step();
        h.step();
        let cards = gpulab::exercises::check_yourself(e.lesson());
        // Every question is a card, each closed.
        assert_eq!(h.query_all_by_label("Show answer").count(), cards.len(), "lesson {}: one Show answer per question", e.number());
        assert_eq!(h.query_all_by_label("Hide answer").count(), 0, "lesson {}: a card starts open", e.number());
        let (i, fragment) = cards
            .iter()
            .enumerate()
            .find_map(|(i, c)| c.answer.as_deref().map(leading_text).filter(|t| t.len() >= 12).map(|t| (i, t)))
            .unwrap_or_else(|| panic!("lesson {} has no answer starting with plain text", e.number()));
        assert_eq!(h.query_all_by_label_contains(&fragment).count(), 0, "lesson {}: the answer shows before the click", e.number());

        // Scroll the card into view (the scroll is animated) and click its button.
        h.query_all_by_label("Show answer").nth(i).expect("the card's button").scroll_to_me();
        settle(&mut h);
        h.query_all_by_label("Show answer").nth(i).expect("the card's button").click();
        settle(&mut h);
        assert_eq!(h.query_all_by_label("Hide answer").count(), 1, "lesson {}: the button did not toggle", e.number());
        assert!(h.query_all_by_label_contains(&fragment).count() > 0, "lesson {}: the answer {fragment:?} did not open", e.number());

        h.get_by_label("Hide answer").click();
        settle(&mut h);
        assert_eq!(h.query_all_by_label_contains(&fragment).count(), 0, "lesson {}: the answer did not close", e.number());
    }
}

#[test]
fn a_finished_run_is_marked_in_the_sidebar_and_survives_a_restart() {
    let mut h = harness_with(Saved::default());
    assert!(h.query_by_label("Clear progress").is_none(), "nothing run yet, nothing to clear");
    // The simulator: the fastest exercise with headline figures, run flat out.
    h.get_by_label("10. A production GPU platform (simulation)").click();
    h.step();
    for (k, v) in [("scenario", "bad-release"), ("duration_h", "10"), ("sweep_points", "4"), ("sweep_runs", "3")] {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    h.state_mut().set_run_speed(0.0);
    h.step();
    h.get_by_label("Run").click();
    run_to_end(&mut h, Duration::from_secs(120));

    let report = h.state().report().expect("a report").clone();
    let ex = gpulab::exercises::find("platform").expect("exercise 10");
    let key = ex.key_figure(&report).expect("the platform report has a headline figure").clone();
    let mark = h.state().progress().runs.get("platform").expect("the lab recorded the run").clone();
    let fig = mark.figure.as_ref().expect("the mark keeps the headline figure");
    assert_eq!((fig.label.as_str(), fig.value, fig.unit.as_str()), (key.label.as_str(), key.value, key.unit.as_str()));
    assert!(!mark.stopped_early);
    // Today's date (UTC), as the sidebar shows it.
    let today = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    assert_eq!(mark.finished_at.get(..10), today.get(..10), "the mark's date is not today's");

    let shown = |h: &Harness<'static, GpulabApp>| {
        let line = mark.mark();
        assert!(line.starts_with("Ran · "), "{line}");
        let figure = mark.figure_text().expect("figure text");
        h.query_all_by_label_contains(&line).count() > 0 && h.query_all_by_label_contains(&figure).count() > 0
    };
    assert!(shown(&h), "the sidebar does not show the run mark, date and figure");
    assert_eq!(h.state().progress().runs.len(), 1, "only the exercise that ran is marked");

    // Save as eframe does on exit, and start a new lab from that storage.
    let mut storage = MemStorage::default();
    eframe::App::save(h.state_mut(), &mut storage);
    let saved: Saved = eframe::get_value(&storage, eframe::APP_KEY).expect("the lab saved its state");
    let mut h2 = harness_with(saved);
    h2.step();
    h2.step();
    assert_eq!(h2.state().progress().runs.get("platform"), Some(&mark), "progress did not survive the restart");
    assert!(shown(&h2), "the restored sidebar does not show the mark");

    h2.get_by_label("Clear progress").click();
    h2.step();
    h2.step();
    assert!(h2.state().progress().runs.is_empty(), "Clear progress left marks");
    assert_eq!(h2.query_all_by_label_contains(&mark.mark()).count(), 0, "the mark is still drawn after clearing");
}
