//! Exercise 5 in the lab (egui_kittest): configure, Run, and the learner sees the three loss
//! curves, the fallback after the corrupted checkpoint, and a verdict computed from the run.

use std::time::Duration;

use egui_kittest::kittest::Queryable;

use crate::gui::{harness, run_to_end, wait_for_adapters};

#[test]
fn exercise_5_crashes_resumes_and_shows_the_verdict() {
    let mut h = harness();
    wait_for_adapters(&mut h);
    h.get_by_label("5. Checkpointing through a real crash").click();
    h.step();
    assert_eq!(h.state().selected(), "checkpoint");
    for (k, v) in
        [("backend", "cpu"), ("epochs", "1"), ("hidden", "16"), ("checkpoint_every", "6"), ("crash_at", "20"), ("corrupt", "truncate")]
    {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    h.step();
    h.get_by_label("Run").click();
    run_to_end(&mut h, Duration::from_secs(120));

    let report = h.state().report().expect("a report").clone();
    assert!(report.verdict.summary.contains("bit for bit"), "{}", report.verdict.summary);
    h.get_by_label(&report.verdict.summary);
    for title in ["Steps lost vs checkpoint interval", "Checkpoints written", "Resume"] {
        assert!(h.query_all_by_label(title).count() > 0, "table {title} is not shown");
    }
    assert!(h.query_all_by_label_contains("skipped: truncated").count() > 0, "the fallback is not shown");
    crate::gui::assert_provenance_shown(&h, &report);
}
