//! The whole app without a window (egui_kittest): pick an exercise, configure it, press Run,
//! step frames until the report arrives, and check what the learner sees.

use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gpulab::app::GpulabApp;

pub(crate) fn harness() -> Harness<'static, GpulabApp> {
    // egui_commonmark draws its code-block copy button with an icon (U+1F5D0) that the bundled
    // fonts lack, so the harness tolerates missing glyphs; the lessons' own characters are
    // checked against the bundled fonts in `lesson_text_uses_only_bundled_glyphs`.
    Harness::builder()
        .allow_missing_glyphs()
        .with_size(eframe::egui::vec2(1920.0, 1400.0))
        .build_eframe(|cc| GpulabApp::with_state(&cc.egui_ctx, Default::default(), None, None))
}

/// Steps frames until adapter detection is done; returns whether a GPU adapter exists.
pub(crate) fn wait_for_adapters(h: &mut Harness<'static, GpulabApp>) -> bool {
    let t0 = Instant::now();
    while h.state().adapters().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(60), "adapter detection did not finish in 60 s");
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    let n = h.state().adapters().map_or(0, |a| a.len());
    if n == 0 {
        assert!(!crate::common::require_gpu(), "GPULAB_REQUIRE_GPU=1 but the app found no GPU adapter");
        eprintln!("gui: no GPU adapter; testing the CPU backend only");
    }
    n > 0
}

/// Steps frames until the run ends; panics after `timeout`.
pub(crate) fn run_to_end(h: &mut Harness<'static, GpulabApp>, timeout: Duration) {
    let t0 = Instant::now();
    // The click lands on the next frame.
    h.step();
    assert!(h.state().is_running() || h.state().run_view().is_some(), "pressing Run started nothing");
    while h.state().is_running() {
        assert!(t0.elapsed() < timeout, "the run did not finish within {timeout:?}");
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    h.step();
    h.step();
    let v = h.state().run_view().expect("a run view");
    if let gpulab::app::Status::Failed(msg) = &v.status {
        panic!("the run failed: {msg}");
    }
    // The lab draws live charts as the exercise declares them; an undeclared id would show
    // with a generic title.
    let undeclared = v.undeclared_charts();
    assert!(undeclared.is_empty(), "{} emitted live chart ids it does not declare in Exercise::live_charts: {undeclared:?}", v.exercise);
    for c in &v.live {
        let spec = v.chart_spec(&c.id);
        for s in &c.series {
            assert_eq!(
                s.provenance, spec.provenance,
                "{}: chart {} series {} has another provenance than declared",
                v.exercise, c.id, s.name
            );
        }
    }
}

/// Every registered exercise runs in the lab with its quick run (`Exercise::quick_run`) to a
/// verdict on screen, its live charts as declared (`run_to_end`) and every column's provenance
/// shown: a new exercise is covered here without a new test.
#[test]
fn every_exercise_runs_in_the_lab_to_a_verdict() {
    let mut h = harness();
    // The simulations run flat out (their default speed is for watching).
    h.state_mut().set_run_speed(0.0);
    for e in gpulab::exercises::registry() {
        h.get_by_label(&format!("{}. {}", e.number(), e.title())).click();
        h.step();
        assert_eq!(h.state().selected(), e.id());
        for (k, v) in e.quick_run() {
            h.state_mut().set_setting(k, v).unwrap_or_else(|err| panic!("{}: {k}={v}: {err}", e.id()));
        }
        h.step();
        h.get_by_label("Run").click();
        run_to_end(&mut h, Duration::from_secs(180));
        let report = h.state().report().expect("a report").clone();
        assert_eq!(report.exercise, e.id());
        assert!(!report.verdict.summary.is_empty(), "{}: no verdict", e.id());
        assert!(h.query_all_by_label(&report.verdict.summary).count() > 0, "{}: the verdict is not shown", e.id());
        provenance_shown(&h, &report);
    }
}

#[test]
fn exercise_1_runs_end_to_end_and_shows_results() {
    let mut h = harness();
    let gpu = wait_for_adapters(&mut h);
    h.get_by_label("1. CPU vs GPU").click();
    h.step();
    assert_eq!(h.state().selected(), "cpu-vs-gpu");
    let backends = if gpu { "cpu,gpu" } else { "cpu" };
    for (k, v) in [("backends", backends), ("epochs", "1"), ("sweep_sizes", "16,32"), ("sweep_runs", "1"), ("size", "as-set")] {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    // A bad value is refused and the old one stays.
    assert!(h.state_mut().set_setting("epochs", "zero").is_err());
    assert_eq!(h.state().settings("cpu-vs-gpu").unwrap().to_map()["epochs"], "1");
    h.step();
    h.get_by_label("Run").click();
    run_to_end(&mut h, Duration::from_secs(120));

    let report = h.state().report().expect("a report").clone();
    assert!(!report.stopped_early);
    assert!(report.table("Training").is_some(), "the report has no Training table");
    // What the learner sees: the table, the verdict, and provenance on the numbers.
    h.get_by_label("Training");
    h.get_by_label("Matmul sweep");
    h.get_by_label(&report.verdict.summary);
    assert_provenance_shown(&h, &report);
    assert!(h.query_by_label("Export report…").is_some(), "no export button after the run");
    if gpu {
        // The software-GPU (or other) notes are shown: each one's line (its details fold), the
        // notes other than warnings one click away.
        let folded = h.query_all_by_label_contains("Notes (").next().map(|header| header.click()).is_some();
        if folded {
            h.step();
            h.step();
        }
        for n in &report.notes {
            let line = gpulab::report::note_parts(n).0;
            assert!(h.query_all_by_label_contains(line).count() > 0, "note not shown: {line}");
        }
    }
}

#[test]
fn exercise_2_shows_out_of_memory_rows() {
    let mut h = harness();
    wait_for_adapters(&mut h);
    h.get_by_label("2. Batch-size sweep").click();
    h.step();
    assert_eq!(h.state().selected(), "batch-sweep");
    for (k, v) in [("backend", "cpu"), ("dataset", "digits"), ("epochs", "1"), ("batch_sizes", "16,4096"), ("vram_budget_mib", "2")] {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    h.step();
    h.get_by_label("Run").click();
    run_to_end(&mut h, Duration::from_secs(120));

    let report = h.state().report().expect("a report").clone();
    let t = report.table("Batch sizes").expect("a Batch sizes table");
    assert_eq!(t.rows.len(), 2);
    // The table is shown (its title is also a setting's label, so check a column header too).
    assert!(h.query_all_by_label("Batch sizes").count() >= 2, "the Batch sizes table title is not shown");
    h.get_by_label("total peak");
    h.get_by_label(&report.verdict.summary);
    let oom = h.query_all_by_label_contains("OUT OF MEMORY").count();
    assert_eq!(oom, 1, "expected one OUT OF MEMORY row (batch 4096), saw {oom}");
    // Batch 16 fitted: its row says ok.
    assert!(h.query_by_label("ok").is_some(), "the batch-16 row is not shown as ok");
}

/// Every exercise in the list opens its lesson beside a Run button.
#[test]
fn every_exercise_shows_its_lesson_and_a_run_button() {
    let mut h = harness();
    for e in gpulab::exercises::registry() {
        h.get_by_label(&format!("{}. {}", e.number(), e.title())).click();
        h.step();
        h.step();
        assert_eq!(h.state().selected(), e.id());
        let heading = e.lesson().lines().next().unwrap_or_default().trim_start_matches("# ").to_string();
        assert!(h.query_all_by_label_contains(&heading).count() > 0, "the lesson of {} is not shown", e.id());
        assert!(h.query_by_label("Run").is_some(), "{} offers no Run button", e.id());
    }
}

#[test]
fn every_lesson_is_shown_when_its_exercise_is_selected() {
    let mut h = harness();
    for e in gpulab::exercises::registry() {
        h.get_by_label(&format!("{}. {}", e.number(), e.title())).click();
        h.step();
        h.step();
        assert_eq!(h.state().selected(), e.id());
        // The lesson's first heading is on screen.
        let heading = e.lesson().lines().next().unwrap().trim_start_matches("# ").to_string();
        assert!(h.query_all_by_label_contains(&heading).count() > 0, "lesson {} not shown", e.number());
    }
}

/// A character the bundled fonts lack shows as a box on machines without system fonts.
#[test]
fn lesson_text_uses_only_bundled_glyphs() {
    let ctx = eframe::egui::Context::default();
    let _ = ctx.run_ui(Default::default(), |_| {});
    let font = eframe::egui::FontId::proportional(14.0);
    for e in gpulab::exercises::registry() {
        let missing: Vec<char> = ctx.fonts_mut(|f| e.lesson().chars().filter(|c| !c.is_whitespace() && !f.has_glyph(&font, *c)).collect());
        assert!(missing.is_empty(), "lesson {} uses characters the bundled fonts lack: {missing:?}", e.number());
    }
    // egui_commonmark draws a copy button on every code block with these.
    let missing: Vec<char> = ctx.fonts_mut(|f| ['🗐', '✔'].into_iter().filter(|c| !f.has_glyph(&font, *c)).collect());
    assert!(missing.is_empty(), "a code block's copy button would show a box for {missing:?}");
}

#[test]
fn an_exported_report_can_be_opened_beside_the_current_one() {
    let mut h = harness();
    wait_for_adapters(&mut h);
    h.get_by_label("2. Batch-size sweep").click();
    h.step();
    for (k, v) in [("backend", "cpu"), ("dataset", "digits"), ("epochs", "1"), ("batch_sizes", "32")] {
        h.state_mut().set_setting(k, v).unwrap();
    }
    h.step();
    h.get_by_label("Run").click();
    run_to_end(&mut h, Duration::from_secs(120));
    let report = h.state().report().expect("a report").clone();
    let dir = tempfile::tempdir().unwrap();
    gpulab::report::write_all(&report, dir.path()).unwrap();

    h.state_mut().compare_with(dir.path().join("report.json").to_str().unwrap());
    let t0 = Instant::now();
    while h.state().compared().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the report to compare never loaded");
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    h.step();
    assert_eq!(h.state().compared(), Some(&report));
    assert!(h.query_all_by_label_contains("Compared:").count() > 0, "the comparison is not shown");
    // Both verdicts are on screen: the current one and the loaded one.
    assert!(h.query_all_by_label(&report.verdict.summary).count() >= 2, "the compared verdict is not shown");
    // Another exercise selected: the comparison of exercise 2's runs is closed, not shown
    // beside exercise 3's results.
    h.state_mut().select("3");
    h.step();
    assert!(h.state().compared().is_none(), "a comparison loaded for exercise 2 is still open on exercise 3");
    h.state_mut().select("2");
    h.step();

    // A file that is not a report gives a message, not a crash.
    let bad = dir.path().join("report.md");
    h.state_mut().compare_with(bad.to_str().unwrap());
    for _ in 0..50 {
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(h.query_all_by_label_contains("not a gpulab report").count() > 0, "no error shown for a bad file");
}

#[test]
fn exercise_3_runs_all_precisions_to_a_verdict() {
    let mut h = harness();
    let gpu = wait_for_adapters(&mut h);
    h.get_by_label("3. FP32 vs FP16/BF16 mixed precision").click();
    h.step();
    assert_eq!(h.state().selected(), "precision");
    let backend = if gpu { "gpu" } else { "cpu" };
    for (k, v) in [("backend", backend), ("epochs", "1"), ("hidden", "32"), ("demo_epochs", "1"), ("size", "as-set")] {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    h.step();
    h.get_by_label("Run").click();
    run_to_end(&mut h, Duration::from_secs(180));

    let report = h.state().report().expect("a report").clone();
    let t = report.table("Precisions").expect("a Precisions table");
    assert_eq!(t.rows.len(), 3);
    // The table's title is also a setting's label.
    assert!(h.query_all_by_label("Precisions").count() >= 2, "the Precisions table is not shown");
    h.get_by_label("Underflow demonstration");
    assert!(h.query_all_by_label("gradients flushed to zero").count() >= 2, "the flushed column is not shown");
    h.get_by_label(&report.verdict.summary);
    assert!(report.verdict.summary.contains("Underflow"), "{}", report.verdict.summary);
}

#[test]
fn exercise_9_compares_fp32_fp16_int8_to_a_verdict() {
    let mut h = harness();
    let gpu = wait_for_adapters(&mut h);
    h.get_by_label("9. FP32 vs INT8 inference").click();
    h.step();
    assert_eq!(h.state().selected(), "quantization");
    let backends = if gpu { "cpu,gpu" } else { "cpu" };
    for (k, v) in [("backends", backends), ("epochs", "1"), ("hidden", "32"), ("latency_runs", "2")] {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    h.step();
    h.get_by_label("Run").click();
    run_to_end(&mut h, Duration::from_secs(180));

    let report = h.state().report().expect("a report").clone();
    let t = report.table("FP32 vs FP16 vs INT8").expect("the comparison table");
    assert_eq!(t.rows.len(), if gpu { 12 } else { 6 });
    h.get_by_label("FP32 vs FP16 vs INT8");
    assert!(h.query_all_by_label("same argmax as FP32").count() >= 1, "the agreement column is not shown");
    h.get_by_label(&report.verdict.summary);
    assert!(report.verdict.summary.contains("INT8"), "{}", report.verdict.summary);
    assert_provenance_shown(&h, &report);
}

/// Exercises 4 and 7: runs to the verdict, with the timelines and (on a GPU) the kernel table.
#[test]
fn exercises_4_and_7_run_to_their_verdicts_with_timelines() {
    let mut h = harness();
    let gpu = wait_for_adapters(&mut h);
    let backend = if gpu { "gpu" } else { "cpu" };
    for (label, id) in [("4. Input pipeline: workers, prefetch, cache", "input-pipeline"), ("7. GPU profiling", "profiling")] {
        h.get_by_label(label).click();
        h.step();
        assert_eq!(h.state().selected(), id);
        for (k, v) in [
            ("backend", backend),
            ("dataset", "shapes:res=8,n=240"),
            ("hidden", "16"),
            ("batch", "32"),
            ("epochs", "1"),
            ("storage_latency_ms", "1"),
            ("decode_passes", "1"),
        ] {
            h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{id}: {k}={v}: {e}"));
        }
        h.step();
        h.get_by_label("Run").click();
        run_to_end(&mut h, Duration::from_secs(180));
        let report = h.state().report().expect("a report").clone();
        h.get_by_label(&report.verdict.summary);
        h.get_by_label("Timelines");
        assert!(!report.timelines.is_empty());
        // The first timeline is open: its lanes are on screen.
        assert!(h.query_all_by_label_contains("Lanes, top to bottom: ").count() > 0, "{id}: the timeline is not shown");
        if gpu && id == "profiling" {
            assert!(h.query_all_by_label_contains("Kernels · run").count() > 0, "no kernel table");
        }
    }
}

/// Exercise 7's one click: an input-bound profile offers its fix; the click changes the
/// settings, profiles again (here in bf16) and shows the earlier run beside the new one.
#[test]
fn exercise_7_applies_the_suggested_fix_with_one_click_and_compares() {
    let mut h = harness();
    let gpu = wait_for_adapters(&mut h);
    h.get_by_label("7. GPU profiling").click();
    h.step();
    let backend = if gpu { "gpu" } else { "cpu" };
    // 5 ms of simulated storage per sample on one worker without prefetch: input-bound.
    for (k, v) in [
        ("backend", backend),
        ("dataset", "shapes:res=8,n=240"),
        ("hidden", "16"),
        ("batch", "32"),
        ("epochs", "1"),
        ("storage_latency_ms", "5"),
        ("decode_passes", "0"),
        ("measure_again", "false"),
        ("precision", "bf16"),
    ] {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    h.step();
    h.get_by_label("Run").click();
    run_to_end(&mut h, Duration::from_secs(180));
    let first = h.state().report().expect("a report").clone();
    assert_eq!(first.tables[0].rows.len(), 1, "measure_again=false profiles once");
    let sg = first.suggestion.clone().expect("an input-bound run suggests a fix");
    assert!(sg.settings["num_workers"].parse::<u32>().unwrap() >= 4, "{sg:?}");

    h.get_by_label(&sg.label).click();
    h.step();
    assert!(h.state().is_running(), "the click starts a run");
    run_to_end(&mut h, Duration::from_secs(180));
    let second = h.state().report().expect("a second report").clone();
    assert_eq!(second.config["num_workers"], sg.settings["num_workers"]);
    assert_eq!(second.config["precision"], "bf16");
    assert_eq!(h.state().compared().map(|r| r.config.clone()), Some(first.config.clone()), "the earlier run is kept for comparison");
    h.get_by_label(&second.verdict.summary);
    h.get_by_label(&first.verdict.summary);
}

/// Every table column with a provenance shows it under its name ("(unit) · measured"), as the
/// results view writes it; the status bar's "measured" does not count. The report must have such
/// a column.
pub(crate) fn assert_provenance_shown(h: &Harness<'static, GpulabApp>, report: &gpulab::report::Report) {
    assert!(provenance_shown(h, report) > 0, "the report has no column with a provenance");
}

/// Checks every column with a provenance shows it; returns how many it checked.
fn provenance_shown(h: &Harness<'static, GpulabApp>, report: &gpulab::report::Report) -> usize {
    let mut checked = 0;
    for t in &report.tables {
        for c in &t.columns {
            let Some(p) = &c.provenance else { continue };
            let unit = if c.unit.is_empty() { String::new() } else { format!("({})", c.unit) };
            let sub = [unit.as_str(), p.short()].iter().filter(|s| !s.is_empty()).copied().collect::<Vec<_>>().join(" · ");
            assert!(h.query_all_by_label(&sub).count() > 0, "{}: column {} shows no {sub:?}", t.title, c.name);
            checked += 1;
        }
    }
    checked
}

#[test]
fn exercise_10_simulates_the_platform_to_a_verdict() {
    let mut h = harness();
    h.get_by_label("10. A production GPU platform (simulation)").click();
    h.step();
    assert_eq!(h.state().selected(), "platform");
    for (k, v) in [("scenario", "bad-release"), ("duration_h", "10"), ("sweep_points", "4"), ("sweep_runs", "3")] {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    h.step();
    h.get_by_label("Run").click();
    run_to_end(&mut h, Duration::from_secs(60));
    let report = h.state().report().expect("a report").clone();
    assert!(report.verdict.evidence.iter().any(|e| e.contains("rolled back")), "{:?}", report.verdict.evidence);
    h.get_by_label(&report.verdict.summary);
    // The summary answers; the evidence is folded under it, one click away.
    let first = &report.verdict.evidence[0];
    assert_eq!(h.query_all_by_label(first).count(), 0, "the evidence is folded: {first}");
    h.get_by_label_contains("Why: the evidence").click();
    h.step();
    h.step();
    assert!(h.query_all_by_label(first).count() > 0, "the evidence opens: {first}");
    assert!(h.query_all_by_label("Canary timeline").count() > 0, "the canary table is shown");
    assert_provenance_shown(&h, &report);
    let live = &h.state().run_view().expect("a run view").live;
    assert!(live.iter().any(|c| c.id == "workers" && !c.series.is_empty()), "the live workers chart has points");
}

/// Exercise 6: CPU replicas to the verdict, with the live per-replica split, the scaling table
/// and one timeline per run (compute / communication / idle lanes per replica).
#[test]
fn exercise_6_trains_replicas_to_a_verdict_with_per_replica_timelines() {
    let mut h = harness();
    h.get_by_label("6. 1 vs N devices: data parallelism").click();
    h.step();
    assert_eq!(h.state().selected(), "distributed");
    for (k, v) in [
        ("replicas", "1,2"),
        ("kind", "cpu"),
        ("hidden", "32"),
        ("size", "as-set"),
        ("dataset", "digits"),
        ("epochs", "1"),
        ("batch", "64"),
        ("bucket_cap_mb", "0.01"),
    ] {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    h.step();
    h.get_by_label("Run").click();
    run_to_end(&mut h, Duration::from_secs(120));
    let report = h.state().report().expect("a report").clone();
    h.get_by_label(&report.verdict.summary);
    assert!(h.query_all_by_label("Scaling").count() > 0, "the scaling table is not shown");
    // "Timelines" is also a word of the lesson beside the results: count, not get.
    assert!(h.query_all_by_label("Timelines").count() > 0, "no Timelines heading");
    // One timeline per replica run (N = 1, 2), one per pipelined run (2 stages × M = 1, 2, 4, 8).
    let pipelined = report.timelines.iter().filter(|t| t.title.starts_with("pipeline:")).count();
    assert_eq!((report.timelines.len() - pipelined, pipelined), (2, 4));
    assert!(h.query_all_by_label_contains("Lanes, top to bottom: ").count() > 0, "the timeline is not shown");
    assert_provenance_shown(&h, &report);
    let v = h.state().run_view().expect("a run view");
    assert!(
        v.live.iter().any(|c| c.id == "replica_split" && c.series.iter().any(|s| s.name.contains("replica 1"))),
        "the live per-replica chart has no replica 1"
    );
    // The lab got every timeline while the run went on (drawn under "Timelines so far" until
    // the report replaced them), under the report's titles.
    let mut live: Vec<&str> = v.timelines.iter().map(|t| t.title.as_str()).collect();
    let mut reported: Vec<&str> = report.timelines.iter().map(|t| t.title.as_str()).collect();
    live.sort();
    reported.sort();
    assert_eq!(live, reported, "the live timelines are not the report's");
}

#[test]
fn exercise_8_serves_batches_to_a_verdict() {
    let mut h = harness();
    h.get_by_label("8. Inference batching and dynamic batching").click();
    h.step();
    assert_eq!(h.state().selected(), "inference-batching");
    for (k, v) in [
        ("backend", "cpu"),
        ("train_epochs", "1"),
        ("static_batches", "1,4"),
        ("max_batch", "4"),
        ("preferred_batch", "4"),
        ("load_levels", "30"),
        ("run_seconds", "0.5"),
    ] {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    h.step();
    h.get_by_label("Run").click();
    run_to_end(&mut h, Duration::from_secs(120));
    let report = h.state().report().expect("a report").clone();
    assert!(!report.verdict.summary.is_empty());
    h.get_by_label(&report.verdict.summary);
    assert!(h.query_all_by_label("Dynamic batching sweep").count() > 0, "the sweep table is shown");
    assert_provenance_shown(&h, &report);
    let live = &h.state().run_view().expect("a run view").live;
    assert!(live.iter().any(|c| c.id == "latency" && !c.series.is_empty()), "the live latency chart has points");
}

/// Exercise 10's architecture diagram: live while the run goes, with pause / step / speed, and a
/// click on a box shows the settings it was built from.
#[test]
fn the_platform_diagram_pauses_steps_and_shows_a_box_settings_on_click() {
    use eframe::egui::Role;
    let mut h = harness();
    h.get_by_label("10. A production GPU platform (simulation)").click();
    h.step();
    for (k, v) in [("scenario", "steady-day"), ("duration_h", "6"), ("sweep_points", "3"), ("sweep_runs", "2")] {
        h.state_mut().set_setting(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    h.state_mut().set_run_speed(60.0); // one simulated minute per second: the run is still going below
    h.step();
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.step();
    h.step();
    assert!(h.state().is_running());
    // Pause from the lab's bar; the first live point brings the diagram.
    h.get_by_role_and_label(Role::Button, "Pause").click();
    let t0 = Instant::now();
    while h.state().run_view().is_none_or(|v| v.diagram.is_none()) {
        assert!(t0.elapsed() < Duration::from_secs(60), "no diagram arrived");
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    h.step();
    h.step();
    assert!(h.state().run_control().is_some_and(|c| c.is_paused()), "Pause reached the run");
    assert!(h.state().is_running());
    h.get_by_role_and_label(Role::Button, "Resume");
    h.get_by_role_and_label(Role::Button, "Step");
    for stage in [
        "Object storage",
        "Training data",
        "GPU training cluster",
        "Checkpoint storage",
        "Model registry",
        "GPU inference cluster",
        "API gateway",
        "Monitoring",
    ] {
        assert!(h.query_all_by_label(stage).count() > 0, "no box {stage}");
    }
    h.get_by_role_and_label(Role::Button, "GPU inference cluster").click();
    h.step();
    h.step();
    h.get_by_label("Settings of GPU inference cluster");
    h.get_by_label("autoscaler.max_workers");
    // Flat out from here, then the final diagram stays with the report.
    h.state_mut().set_run_speed(0.0);
    h.get_by_role_and_label(Role::Button, "Resume").click();
    run_to_end(&mut h, Duration::from_secs(120));
    assert!(h.state().report().is_some_and(|r| r.attachments.iter().any(|a| a.file_name == "architecture.svg")));
    h.get_by_label("Settings of GPU inference cluster");
}

/// An exercise whose settings are still its defaults says so ("as in the lesson"), never
/// "custom settings" (exercises 4–10 once did: none of their presets is the defaults).
#[test]
fn untouched_defaults_read_as_in_the_lesson() {
    let mut h = harness();
    for ex in gpulab::exercises::registry() {
        if ex.presets().is_empty() {
            continue;
        }
        h.state_mut().select(ex.id());
        h.step();
        let shown = h.get_by_label("Preset").value();
        assert_ne!(shown.as_deref(), Some("custom settings"), "exercise {} with its defaults", ex.number());
    }
}

/// Exercise 1 defaults to size=auto, which replaces the hidden widths and epochs at run time:
/// the form says so beside them (and no longer once the model is as set).
#[test]
fn size_auto_marks_the_settings_it_replaces() {
    let mut h = harness();
    h.state_mut().select("cpu-vs-gpu");
    h.step();
    assert_eq!(h.state().settings("cpu-vs-gpu").unwrap().to_map()["size"], "auto");
    assert_eq!(h.query_all_by_label_contains("overridden by size=auto").count(), 2, "hidden layers and epochs are marked");
    h.state_mut().set_setting("size", "as-set").unwrap();
    h.step();
    assert_eq!(h.query_all_by_label_contains("overridden by size=auto").count(), 0, "a model as set is not marked");
}

#[test]
fn a_preset_chosen_in_the_dropdown_sets_the_settings_the_run_uses() {
    let mut h = harness();
    wait_for_adapters(&mut h);
    h.get_by_label("2. Batch-size sweep").click();
    h.step();
    assert_eq!(h.state().selected(), "batch-sweep");
    // The defaults are the lesson's preset; the dropdown says so.
    assert_eq!(h.state().active_preset(), Some("as in the lesson"));
    let shown = |h: &Harness<'static, GpulabApp>| h.get_by_label("Preset").value();
    assert_eq!(shown(&h).as_deref(), Some("as in the lesson"));
    h.get_by_label("Preset").click();
    // The popup opens on the click's frame and is laid out on the next.
    h.step();
    h.step();
    h.get_by_label("force an out-of-memory").click();
    h.step();
    h.step();
    let s = h.state().settings("batch-sweep").unwrap();
    let s = s.to_map();
    assert_eq!(s["batch_sizes"], "16,256,1024");
    assert_eq!(s["vram_budget_mib"], "8.5");
    assert_eq!(h.state().active_preset(), Some("force an out-of-memory"));
    assert_eq!(shown(&h).as_deref(), Some("force an out-of-memory"), "the dropdown does not name the active preset");
    // Editing a setting ends the preset (the CPU keeps the test fast on any machine).
    h.state_mut().set_setting("backend", "cpu").unwrap();
    h.step();
    assert_eq!(h.state().active_preset(), None);
    assert_eq!(shown(&h).as_deref(), Some("custom settings"), "an edited preset is still named");
    h.get_by_label("Run").click();
    run_to_end(&mut h, Duration::from_secs(120));
    let report = h.state().report().expect("a report").clone();
    assert_eq!(report.config["batch_sizes"], "16,256,1024");
    assert_eq!(report.config["vram_budget_mib"], "8.5");
    // The sweep's batch 1024, and no rung of the ladder that follows it (on the CPU).
    assert_eq!(h.query_all_by_label_contains("OUT OF MEMORY").count(), 1, "the preset's batch 1024 should not fit");
    assert_eq!(report.tables.len(), 2, "the out-of-memory ladder follows the sweep");
}

/// eframe's storage, in memory: RON strings by key (the save/restore tests).
#[derive(Default)]
pub(crate) struct MemStorage(std::collections::HashMap<String, String>);

impl eframe::Storage for MemStorage {
    fn get_string(&self, key: &str) -> Option<String> {
        self.0.get(key).cloned()
    }
    fn set_string(&mut self, key: &str, value: String) {
        self.0.insert(key.to_string(), value);
    }
    fn remove_string(&mut self, key: &str) {
        self.0.remove(key);
    }
    fn flush(&mut self) {}
}
