//! Exercises 4 and 7 headless (library and binary): tiny configs run to computed verdicts, with
//! timelines in the report and trace files beside it.

use std::process::Command;

use gpulab::exercises::{self, CollectSink, Settings};
use gpulab::report::Report;

use crate::common::require_gpu;

fn backend() -> &'static str {
    use gpulab::device::gpu::adapters;
    if require_gpu() || !adapters::enumerate(&adapters::instance()).is_empty() { "gpu" } else { "cpu" }
}

/// Small enough for a few seconds on llvmpipe.
fn tiny(id: &str, extra: &[&str]) -> Settings {
    let mut s = exercises::find(id).unwrap().settings();
    let mut pairs: Vec<String> = ["dataset=shapes:res=8,n=300", "hidden=32", "batch=32", "storage_latency_ms=0.5", "decode_passes=1"]
        .iter()
        .map(|p| p.to_string())
        .collect();
    pairs.push(format!("backend={}", backend()));
    pairs.extend(extra.iter().map(|p| p.to_string()));
    s.apply(&pairs).unwrap();
    s
}

fn run(id: &str, s: &Settings) -> Report {
    exercises::find(id).unwrap().run(s, &mut CollectSink::default()).unwrap()
}

#[test]
fn input_pipeline_sweeps_one_change_at_a_time() {
    let r = run("input-pipeline", &tiny("input-pipeline", &["epochs=2", "workers=2"]));
    let t = r.table("Pipeline steps").unwrap();
    assert_eq!(t.rows.len(), 4, "slow, + prefetch, + workers, + cache");
    assert_eq!(r.timelines.len(), 4);
    assert!(r.timelines[2].lanes.iter().filter(|l| l.starts_with("loader worker")).count() == 2);
    assert!(r.verdict.summary.contains("waiting for data"), "{}", r.verdict.summary);
    assert!(r.verdict.evidence.iter().any(|e| e.contains("served from memory")));
    // The fixes must show in the numbers, not only in the words: 0.5 ms of storage per sample
    // (16 ms a batch) on one worker is input-bound; four workers and the cache cut the wait,
    // and the cached run's second epoch reads from memory.
    let col = |name: &str| t.columns.iter().position(|c| c.name == name).unwrap_or_else(|| panic!("no column {name}"));
    let num = |row: usize, name: &str| match &t.rows[row][col(name)] {
        gpulab::report::Cell::Num(v) => *v,
        other => panic!("{name} of row {row} is {other:?}"),
    };
    let text = |row: usize, name: &str| format!("{:?}", t.rows[row][col(name)]);
    assert!(text(0, "bottleneck (computed)").contains("input"), "the slow run is {}", text(0, "bottleneck (computed)"));
    assert!(
        num(3, "data wait per step") < num(0, "data wait per step") / 2.0,
        "data wait {} -> {}",
        num(0, "data wait per step"),
        num(3, "data wait per step")
    );
    assert!(num(3, "cache hits") > 0.0, "the cached run read nothing from its cache");
    for id in ["samples_per_s", "data_wait"] {
        assert!(r.chart(id).is_some_and(|c| c.series.len() == 4), "chart {id}");
    }
    assert!(r.notes.iter().any(|n| n.contains("simulated")), "the latency is labelled simulated");
}

#[test]
fn profiling_measures_applies_the_fix_and_measures_again() {
    // A slow single-worker pipeline: input-bound, so the fix is more workers + prefetch + cache.
    let r = run("profiling", &tiny("profiling", &["storage_latency_ms=1.5", "epochs=1"]));
    let runs = r.table("Runs").unwrap();
    assert_eq!(runs.rows.len(), 2, "measured, fixed, measured again: {:?}", r.verdict);
    assert!(r.verdict.summary.contains("input-bound"), "{}", r.verdict.summary);
    assert!(r.verdict.summary.contains("measured again"), "{}", r.verdict.summary);
    assert_eq!(r.timelines.len(), 2);
    if backend() == "gpu" {
        assert!(r.tables.iter().any(|t| t.title.starts_with("Kernels")), "a kernel table");
        assert!(r.chart("roofline").is_some_and(|c| c.series.len() > 1));
        assert!(r.figures.iter().any(|f| f.unit == "GFLOP/s"));
        // Each profiled run's device work per step, beside its timeline.
        let counts = r.tables.iter().find(|t| t.title.starts_with("Device work per training step")).expect("a device-work table");
        assert_eq!(counts.rows.len(), 2, "one row per profiled run: {counts:?}");
    }
}

#[test]
fn cli_run_profiling_writes_the_trace_beside_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut args: Vec<String> = ["run", "profiling", "--out"].iter().map(|s| s.to_string()).collect();
    args.push(out.display().to_string());
    for p in [
        "dataset=shapes:res=8,n=200",
        "hidden=16",
        "batch=32",
        "epochs=1",
        "measure_again=false",
        "storage_latency_ms=0",
        "decode_passes=0",
    ] {
        args.extend(["--set".to_string(), p.to_string()]);
    }
    args.extend(["--set".to_string(), format!("backend={}", backend())]);
    let o = Command::new(env!("CARGO_BIN_EXE_gpulab")).args(&args).env("XDG_RUNTIME_DIR", std::env::temp_dir()).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let trace = out.join("trace-1-as-set.json");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace).unwrap_or_else(|e| panic!("{}: {e}", trace.display()))).unwrap();
    assert!(v["traceEvents"].as_array().unwrap().iter().any(|e| e["ph"] == "X"));
    assert!(String::from_utf8_lossy(&o.stdout).contains("trace-1-as-set.json"));
    assert!(out.join("report.json").exists());
}
