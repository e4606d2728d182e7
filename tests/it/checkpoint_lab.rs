//! Exercise 5 headless, from the library and from the command line: a real crash, a resume,
//! a bit-exact verdict on the CPU, and the fallback when the newest checkpoint is corrupted.

use std::process::Command;

use gpulab::exercises::{self, CollectSink, Event};
use gpulab::report::{Cell, Report};

fn run(pairs: &[&str]) -> (Report, Vec<Event>) {
    let ex = exercises::find("checkpoint").unwrap();
    let mut s = ex.settings();
    s.apply(&pairs.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap();
    let mut sink = CollectSink::default();
    let r = ex.run(&s, &mut sink).unwrap_or_else(|e| panic!("exercise failed: {e}"));
    (r, sink.events)
}

fn figure(r: &Report, label: &str) -> f64 {
    r.figures.iter().find(|f| f.label.starts_with(label)).unwrap_or_else(|| panic!("no figure {label}")).value
}

#[test]
fn crash_and_corrupted_latest_fall_back_and_stay_bit_exact() {
    let (r, events) =
        run(&["backend=cpu", "epochs=2", "hidden=16", "checkpoint_every=5", "keep_last=3", "crash_at=23", "corrupt=flip-data"]);
    assert!(r.verdict.summary.contains("bit for bit"), "{}", r.verdict.summary);
    assert_eq!(figure(&r, "max absolute loss difference"), 0.0);
    // Crash after 23 (perhaps a step or two later); newest checkpoint corrupted, so the one before.
    let crash = figure(&r, "crash");
    let resumed = figure(&r, "resumed from step");
    assert!(crash >= 23.0, "{crash}");
    assert!(resumed <= (crash / 5.0).floor() * 5.0 - 5.0 && resumed > 0.0, "crash {crash}, resumed {resumed}");
    let t = r.table("Resume").unwrap();
    assert!(t.rows.iter().any(|row| matches!(&row[0], Cell::Text(t) if t.contains("checksum mismatch"))), "{:?}", t.rows);
    let chart = r.chart("loss").unwrap();
    assert_eq!(chart.series.len(), 3);
    assert!(r.table("Steps lost vs checkpoint interval").is_some_and(|t| t.rows.len() >= 5));
    assert!(r.table("Checkpoints written").is_some_and(|t| !t.rows.is_empty()));
    assert!(events.iter().any(|e| matches!(e, Event::Point { series, .. } if series == "resumed run")));
}

#[test]
fn headless_cli_run_reports_the_comparison() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpulab"))
        .args([
            "run",
            "checkpoint",
            "--set",
            "backend=cpu",
            "--set",
            "epochs=1",
            "--set",
            "hidden=16",
            "--set",
            "checkpoint_every=7",
            "--out",
        ])
        .arg(out_dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("bit for bit") && stdout.contains("max difference 0"), "{stdout}");
    let r = gpulab::report::read_json(&out_dir.path().join("report.json")).unwrap();
    assert_eq!(r.exercise, "checkpoint");
}

#[test]
fn settings_that_cannot_crash_meaningfully_are_refused() {
    let ex = exercises::find("checkpoint").unwrap();
    let mut s = ex.settings();
    s.apply(&["checkpoint_every=0".into()]).unwrap();
    assert!(ex.validate(&s).unwrap_err().to_string().contains("nothing is saved"));
    let mut s = ex.settings();
    s.apply(&["backend=cpu".into(), "epochs=1".into(), "crash_at=100000".into()]).unwrap();
    let err = ex.run(&s, &mut CollectSink::default()).unwrap_err().to_string();
    assert!(err.contains("crash_at"), "{err}");
}

#[test]
fn the_cnn_crashes_and_resumes_bit_exact_in_the_lab() {
    let folder = tempfile::tempdir().unwrap();
    let dir = format!("folder={}", folder.path().display());
    let (r, _) = run(&["backend=cpu", "model=cnn", "epochs=1", "hidden=16", "checkpoint_every=5", "crash_at=12", &dir]);
    assert!(r.verdict.summary.contains("bit for bit"), "{}", r.verdict.summary);
    assert_eq!(r.config.get("model").map(String::as_str), Some("cnn"));
    // The child trained the CNN: its checkpoints hold the convolutions.
    let newest = gpulab::checkpoint::store::list(&folder.path().join("run")).unwrap().into_iter().next().expect("a checkpoint");
    let ck = gpulab::checkpoint::store::read(&newest).unwrap();
    assert!(ck.meta.architecture.conv.is_some() && ck.tensors.contains_key("conv0.weight"), "{:?}", ck.meta.architecture);
    // The verdict names the model the child trained, as the checkpoint's metadata does.
    let label = ck.meta.architecture.label();
    assert!(
        r.verdict.evidence.iter().any(|e| e.starts_with(&format!("The model: {label}, ")) && e.contains("SGD momentum")),
        "{label} not in {:?}",
        r.verdict.evidence
    );
}
