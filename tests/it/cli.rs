//! The binary: bad input gets a one-line error and a non-zero exit, never a panic; the JSON
//! outputs have the fields scripts rely on.

use std::process::{Command, Output};

fn gpulab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpulab")).args(args).env("XDG_RUNTIME_DIR", std::env::temp_dir()).output().expect("the binary runs")
}

#[track_caller]
fn fails_with(args: &[&str], words: &[&str]) {
    let out = gpulab(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    for w in words {
        assert!(err.to_lowercase().contains(&w.to_lowercase()), "{args:?}: expected {w:?} in {err}");
    }
}

#[test]
fn invalid_settings_fail_cleanly() {
    fails_with(&["train", "--backend", "cpu", "--batch", "0"], &["batch size must be at least 1"]);
    fails_with(&["train", "--backend", "cpu", "--lr", "NaN"], &["learning rate"]);
    fails_with(&["train", "--backend", "cpu", "--lr", "-1"], &["learning rate"]);
    fails_with(&["train", "--backend", "tpu"], &["unknown backend"]);
    fails_with(&["train", "--backend", "cpu", "--optimizer", "lion"], &["unknown optimizer"]);
    fails_with(&["train", "--backend", "cpu", "--dataset", "nope"], &["nope"]);
    fails_with(&["train", "--backend", "cpu", "--dataset", "idx:/definitely/not/here"], &["/definitely/not/here"]);
    fails_with(&["train", "--backend", "cuda"], &["built without CUDA support", "--features cuda"]);
    fails_with(&["bench", "matmul", "--backend", "cpu", "--sizes", "0"], &["sizes"]);
}

#[test]
fn adapter_index_out_of_range_fails_cleanly() {
    // With adapters: "out of range"; without any: "no GPU adapter". Either way no panic.
    let out = gpulab(&["train", "--backend", "gpu:99", "--epochs", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && !err.contains("panicked"), "{err}");
    assert!(err.contains("out of range") || err.contains("no GPU adapter"), "{err}");
}

#[test]
fn info_json_lists_cpu_and_adapters() {
    let out = gpulab(&["info", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["cpu"]["threads"].as_u64().unwrap() >= 1);
    let adapters = v["adapters"].as_array().unwrap();
    if crate::common::require_gpu() {
        assert!(!adapters.is_empty(), "GPULAB_REQUIRE_GPU=1 but info lists no adapter");
    }
    for a in adapters {
        assert!(a["name"].is_string() && a["features"].is_array() && a["limits"]["max_buffer_size"].is_u64());
        if a["device_type"] == "Cpu" {
            assert_eq!(a["software"], true, "a CPU-type adapter is flagged as a software GPU");
        }
    }
}

#[test]
fn bench_matmul_json_rows_have_n_and_gflops() {
    let out = gpulab(&["bench", "matmul", "--backend", "cpu", "--sizes", "32,65", "--runs", "2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.iter().map(|r| r["n"].as_u64().unwrap()).collect::<Vec<_>>(), [32, 65]);
    assert!(rows.iter().all(|r| r["gflops"].as_f64().unwrap() > 0.0));
}

#[test]
fn bench_matmul_int8_rows_sit_beside_f32_and_are_exact() {
    let out = gpulab(&["bench", "matmul", "--backend", "cpu", "--sizes", "33", "--runs", "1", "--dtype", "f32,int8", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.iter().map(|r| r["dtype"].as_str().unwrap()).collect::<Vec<_>>(), ["f32", "int8"]);
    let int8 = &rows[1];
    assert_eq!(int8["max_rel_err"].as_f64(), Some(0.0), "the int8 product is checked exactly: {int8}");
    assert!(int8["gflops"].as_f64().unwrap() > 0.0 && !int8["variant"].as_str().unwrap().is_empty());
    fails_with(&["bench", "matmul", "--backend", "cpu", "--dtype", "int4"], &["int4", "f32, f16, bf16 or int8"]);
}

#[test]
fn bench_matmul_f16_rows_sit_beside_f32() {
    let out = gpulab(&["bench", "matmul", "--backend", "cpu", "--sizes", "17,40", "--runs", "1", "--dtype", "f32,f16,bf16", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        rows.iter().map(|r| (r["n"].as_u64().unwrap(), r["dtype"].as_str().unwrap())).collect::<Vec<_>>(),
        [(17, "f32"), (17, "f16"), (17, "bf16"), (40, "f32"), (40, "f16"), (40, "bf16")]
    );
    assert!(rows.iter().all(|r| r["gflops"].as_f64().unwrap() > 0.0));
}

#[test]
fn bench_train_json_has_samples_per_second() {
    let out = gpulab(&[
        "bench",
        "train",
        "--backend",
        "cpu",
        "--input",
        "20",
        "--hidden",
        "16",
        "--classes",
        "3",
        "--batch",
        "8,16",
        "--precision",
        "fp32,bf16",
        "--seconds",
        "0.05",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let precisions: Vec<&str> = rows.iter().map(|r| r["precision"].as_str().unwrap()).collect();
    assert_eq!(precisions, ["fp32", "bf16", "fp32", "bf16"], "each batch times every precision, interleaved");
    assert!(rows.iter().all(|r| r["samples_per_s"].as_f64().unwrap() > 0.0));
    // The distribution of the windows and the wall time per step, like the reference script's.
    for r in &rows {
        let ms = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {r}"));
        assert!(0.0 < ms("step_ms_median") && ms("step_ms_median") <= ms("step_ms_p90") && ms("step_ms_p90") <= ms("step_ms_worst"), "{r}");
        assert!(ms("step_ms_wall") > 0.0, "{r}");
        assert!(r["slow_windows"]["count"].is_u64(), "{r}");
    }
}

/// `bench train --model cnn` times the CNN (convolutions in front of the dense layers), with
/// its FLOPs in the derived GFLOP/s; an image that does not match --input is named.
#[test]
fn bench_train_times_the_cnn_and_names_a_mismatched_image() {
    let args = ["bench", "train", "--backend", "cpu", "--hidden", "16", "--classes", "4", "--batch", "8", "--seconds", "0.05", "--json"];
    let row = |extra: &[&str]| -> serde_json::Value {
        let out = gpulab(&[&args[..], extra].concat());
        assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().expect("a row")).unwrap()
    };
    let mlp = row(&["--input", "256"]);
    let cnn = row(&["--model", "cnn", "--input", "256"]);
    assert!(cnn["model"].as_str().unwrap().starts_with("CNN 1x16x16"), "{cnn}");
    assert!(!mlp["model"].as_str().unwrap().starts_with("CNN"), "{mlp}");
    // Same samples/s would be the same model: the CNN's convolutions add FLOPs per sample.
    let flops_per_sample = |r: &serde_json::Value| r["gflops"].as_f64().unwrap() / r["samples_per_s"].as_f64().unwrap();
    assert!(flops_per_sample(&cnn) > 10.0 * flops_per_sample(&mlp), "{cnn} vs {mlp}");
    // The fp32 MLP row times its GEMMs alone; the CNN's does not (its convolutions are not GEMMs
    // everywhere).
    assert!(mlp["gemm_ms_median"].as_f64().is_some_and(|g| g > 0.0), "{mlp}");
    assert!(cnn["gemm_ms_median"].is_null(), "{cnn}");
    let rgb = row(&["--model", "cnn", "--input", "768", "--image", "3x16x16"]);
    assert!(rgb["model"].as_str().unwrap().starts_with("CNN 3x16x16"), "{rgb}");
    fails_with(
        &["bench", "train", "--model", "cnn", "--input", "784", "--image", "3x28x28", "--seconds", "0.05"],
        &["--image 3x28x28", "--input 2352"],
    );
    fails_with(&["bench", "train", "--model", "cnn", "--image", "28x28", "--seconds", "0.05"], &["CHANNELSxHEIGHTxWIDTH"]);
    fails_with(&["bench", "train", "--model", "rnn", "--seconds", "0.05"], &["rnn"]);
}

#[test]
fn train_cpu_prints_a_labelled_summary() {
    let out = gpulab(&["train", "--backend", "cpu", "--epochs", "2", "--hidden", "32"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("validation acc") && text.contains("(measured)"), "{text}");
    assert!(text.contains("GPU busy:       unavailable (CPU backend)"), "{text}");
}

#[test]
fn train_fp16_reports_its_loss_scale_and_a_bad_precision_is_named() {
    let out = gpulab(&["train", "--backend", "cpu", "--epochs", "1", "--hidden", "32", "--precision", "fp16"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("fp16 + GradScaler") && text.contains("loss scale:     65536"), "{text}");
    assert!(text.contains("grad underflow:"), "{text}");
    fails_with(&["train", "--backend", "cpu", "--precision", "fp8"], &["unknown precision"]);
}

/// `gpulab list | head -0`: the reader is gone before gpulab prints (its pipe closed right
/// after the start); gpulab stops without a panic (on Unix the default SIGPIPE ends it, as it
/// ends `cat`).
#[test]
fn printing_into_a_closed_pipe_ends_quietly() {
    use std::process::Stdio;
    for args in [&["lesson", "1"][..], &["list"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpulab"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        // Closed long before the process has loaded and parsed its arguments.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("gpulab ends");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            const SIGPIPE: i32 = 13; // Linux and macOS
            assert!(out.status.success() || out.status.signal() == Some(SIGPIPE), "{args:?}: {:?}", out.status);
        }
    }
}

#[test]
fn list_prints_one_line_per_exercise_starting_with_its_id() {
    let out = gpulab(&["list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let ids: Vec<&str> = text.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(ids, gpulab::exercises::ids());
}

#[test]
fn run_writes_the_four_report_files() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("r");
    let out = gpulab(&[
        "run",
        "batch-sweep",
        "--set",
        "backend=cpu",
        "--set",
        "dataset=digits",
        "--set",
        "epochs=1",
        "--set",
        "batch_sizes=32,64",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["report.json", "report.csv", "report.md", "report.html"] {
        assert!(out_dir.join(f).is_file(), "{f} missing");
    }
    assert!(String::from_utf8_lossy(&out.stdout).contains("gave the highest throughput"));
}

#[test]
fn run_refuses_unknown_ids_and_bad_settings() {
    fails_with(&["run", "warp-drive"], &["unknown exercise", "cpu-vs-gpu"]);
    fails_with(&["run", "cpu-vs-gpu", "--set", "batch=0"], &["batch", "outside"]);
    fails_with(&["run", "cpu-vs-gpu", "--set", "epochs"], &["key=value"]);
    fails_with(
        &["run", "distributed", "--set", "replicas=1,3", "--set", "batch=100", "--set", "kind=gpu", "--set", "pipeline_stages=0"],
        &["batch 100", "replicas 3"],
    );
    fails_with(&["run", "distributed", "--set", "batch=100", "--set", "kind=cpu"], &["batch 100", "micro_batches 8"]);
    fails_with(&["run", "platform", "--set", "scenario_file=/no/such.json"], &["scenario_file", "cannot read"]);
    fails_with(&["run", "precision", "--set", "precisions=fp8"], &["unknown precision"]);
}

#[test]
fn run_precision_headless_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("p");
    let out = gpulab(&[
        "run",
        "precision",
        "--set",
        "backend=cpu",
        "--set",
        "epochs=1",
        "--set",
        "hidden=32",
        "--set",
        "size=as-set",
        "--set",
        "demo_epochs=1",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(!md.lines().any(|l| l.ends_with("||")), "a table row with a stray empty cell:\n{md}");
    for want in ["Precisions", "fp16 + GradScaler", "bf16", "Bytes saved vs FP32", "Underflow demonstration"] {
        assert!(md.contains(want), "{want:?} missing from report.md");
    }
}

#[test]
fn run_platform_writes_a_scenario_that_replays_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let small = ["--set", "duration_h=2", "--set", "sweep_points=4", "--set", "sweep_runs=3"];
    let out = gpulab(&[&["run", "platform", "--set", "scenario=spot-storm", "--out", a.to_str().unwrap()][..], &small].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let scenario = a.join("scenario.json");
    assert!(String::from_utf8_lossy(&out.stdout).contains("scenario.json"));
    let file = format!("scenario_file={}", scenario.display());
    let out =
        gpulab(&["run", "platform", "--set", &file, "--set", "sweep_points=4", "--set", "sweep_runs=3", "--out", b.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read = |d: &std::path::Path| gpulab::report::read_json(&d.join("report.json")).unwrap();
    let (ra, rb) = (read(&a), read(&b));
    assert_eq!((ra.figures, ra.charts, ra.tables, ra.verdict), (rb.figures, rb.charts, rb.tables, rb.verdict));
    assert_eq!(std::fs::read_to_string(&scenario).unwrap(), std::fs::read_to_string(b.join("scenario.json")).unwrap());
    std::fs::write(&scenario, "{\"name\": 1}").unwrap();
    fails_with(&["run", "platform", "--set", &file], &["scenario_file", "invalid type"]);
}

#[test]
fn run_distributed_headless_on_cpu_replicas_writes_the_report_and_traces() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("dp");
    let out = gpulab(&[
        "run",
        "distributed",
        "--set",
        "replicas=1,2",
        "--set",
        "kind=cpu",
        "--set",
        "hidden=32",
        "--set",
        "size=as-set",
        "--set",
        "dataset=digits",
        "--set",
        "epochs=1",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    for want in ["Scaling", "2 CPU replicas × 1 thread", "Beyond this machine (simulated)", "speed-up", "Pipeline parallel"] {
        assert!(md.contains(want), "{want:?} missing from report.md");
    }
    let traces =
        std::fs::read_dir(&out_dir).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("trace-")).count();
    assert_eq!(traces, 6, "one Perfetto trace per run: 2 data-parallel, 4 pipelined (M = 1, 2, 4, 8)");
}

#[test]
fn run_platform_scenario_flag_replays_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let small = ["--set", "sweep_points=4", "--set", "sweep_runs=3"];
    let a = dir.path().join("a");
    let out = gpulab(
        &[&["run", "platform", "--set", "scenario=black-friday", "--set", "duration_h=3", "--out", a.to_str().unwrap()][..], &small]
            .concat(),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let scenario = a.join("scenario.json");
    let replay = |name: &str| {
        let d = dir.path().join(name);
        let out =
            gpulab(&[&["run", "platform", "--scenario", scenario.to_str().unwrap(), "--out", d.to_str().unwrap()][..], &small].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        d
    };
    let (b, c) = (replay("b"), replay("c"));
    let file = |d: &std::path::Path, f: &str| std::fs::read_to_string(d.join(f)).unwrap();
    // Two replays: every file byte-identical but for the run's start time.
    let clockless =
        |t: String| t.lines().filter(|l| !l.contains("started_at") && !l.contains(" · started ")).collect::<Vec<_>>().join("\n");
    for f in ["report.json", "report.md", "report.csv"] {
        assert_eq!(clockless(file(&b, f)), clockless(file(&c, f)), "{f} differs between replays");
    }
    // Against the original run: the scenario and the diagram byte for byte, every number the same.
    for f in ["scenario.json", "architecture.svg"] {
        assert_eq!(file(&a, f), file(&b, f), "{f}");
    }
    let read = |d: &std::path::Path| gpulab::report::read_json(&d.join("report.json")).unwrap();
    let (ra, rb) = (read(&a), read(&b));
    assert_eq!((ra.figures, ra.charts, ra.tables, ra.verdict), (rb.figures, rb.charts, rb.tables, rb.verdict));
    // The flag is refused where it means nothing, and with a second scenario.
    fails_with(&["run", "cpu-vs-gpu", "--scenario", scenario.to_str().unwrap()], &["--scenario", "no scenario file"]);
    fails_with(&["run", "platform", "--scenario", "x.json", "--set", "scenario_file=y.json"], &["give one"]);
    fails_with(&["run", "platform", "--scenario", "/no/such.json"], &["scenario_file", "cannot read"]);
}

#[test]
fn export_torch_refuses_other_exercises_and_bad_settings() {
    fails_with(&["export", "torch", "--exercise", "inference", "--out", "/nonexistent-gpulab-export"], &["--exercise", "distributed"]);
    fails_with(&["export", "torch", "--exercise", "nope", "--out", "/nonexistent-gpulab-export"], &["unknown exercise"]);
    fails_with(&["export", "torch", "--exercise", "distributed", "--out", "/nonexistent-gpulab-export", "--set", "batch=0"], &["batch"]);
}

#[test]
fn run_preset_applies_before_set_and_unknown_presets_list_the_valid() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("oom");
    // The preset's values, then --set on top (the backend).
    let out = gpulab(&["run", "2", "--preset", "force an out-of-memory", "--set", "backend=cpu", "--out", out_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out_dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["config"]["vram_budget_mib"], "8.5");
    assert_eq!(report["config"]["batch_sizes"], "16,256,1024");
    assert_eq!(report["config"]["backend"], "cpu");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Batch 1024 did not fit"), "{stdout}");
    // The ladder retries it: accumulation keeps batch 1024's update within the budget.
    assert!(stdout.contains("Ladder, accumulate 8 micro-batches of 128: fits"), "{stdout}");
    // --set overrides the preset's own value too.
    let out = gpulab(&["run", "2", "--preset", "force an out-of-memory", "--set", "vram_budget_mib=0", "--show-settings"]);
    assert!(String::from_utf8_lossy(&out.stdout).lines().any(|l| l.starts_with("vram_budget_mib") && l.contains("= 0 ")));
    fails_with(
        &["run", "cpu-vs-gpu", "--preset", "warp speed"],
        &["no preset \"warp speed\"", "as in the lesson", "big enough for a GPU", "scaled to this adapter"],
    );
}

#[test]
fn show_settings_lists_the_presets_with_their_values() {
    let out = gpulab(&["run", "input-pipeline", "--show-settings"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["presets", "\"starve the GPU\"", "decode_passes=12", "\"feed the GPU\""] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
}

#[test]
fn size_auto_uses_the_cached_peak_on_the_second_run() {
    let dir = tempfile::tempdir().unwrap();
    let args = |out: &str| {
        vec![
            "run",
            "batch-sweep",
            "--preset",
            "scaled to this adapter",
            "--set",
            "backend=cpu",
            "--set",
            "dataset=digits",
            "--set",
            "batch_sizes=128",
            "--set",
            "target_s=1",
            "--set",
            "epochs=1",
            "--out",
            out,
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>()
    };
    let mut peaks = Vec::new();
    for name in ["a", "b"] {
        let out_dir = dir.path().join(name);
        let out = Command::new(env!("CARGO_BIN_EXE_gpulab"))
            .args(args(out_dir.to_str().unwrap()))
            .env("GPULAB_CACHE_DIR", dir.path().join("cache"))
            .env("XDG_RUNTIME_DIR", std::env::temp_dir())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out_dir.join("report.json")).unwrap()).unwrap();
        let peak = report["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["label"].as_str().unwrap().contains("matmul peak"))
            .cloned()
            .expect("a peak figure");
        peaks.push(peak);
    }
    assert_eq!(peaks[0]["provenance"]["kind"], "measured", "{}", peaks[0]);
    assert_eq!(peaks[1]["provenance"]["kind"], "derived", "{}", peaks[1]);
    assert!(peaks[1]["provenance"]["from"].as_str().unwrap().contains("cached"));
    // The same peak, read back from the cache.
    assert_eq!(peaks[0]["value"], peaks[1]["value"]);
}

/// A model whose parameters, gradients, optimizer state and activations would not fit is refused
/// before anything is allocated, naming the estimate: 8 hidden layers of 16384 need about 26 GB
/// with SGD's momentum. The child runs under an 8 GB address-space limit, so that without the
/// check it aborts at its first large allocation instead of taking the machine's memory.
#[cfg(target_os = "linux")]
#[test]
fn a_model_too_large_for_memory_is_refused_naming_the_estimate() {
    let hidden = ["16384"; 8].join(",");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -v 8000000; exec \"$0\" train --backend cpu --dataset digits --epochs 1 --hidden {hidden}"))
        .arg(env!("CARGO_BIN_EXE_gpulab"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("GiB") && err.contains("estimate") && err.contains("parameters"), "{err}");
}

/// Lists are bounded in length with the reason: 60,000 hidden layers or a sweep of 20,000 batch
/// sizes are refused when set, not run for ever.
#[test]
fn long_lists_of_layers_or_sweep_points_are_refused_with_the_reason() {
    let mut s = gpulab::exercises::find("batch-sweep").unwrap().settings();
    let sizes: Vec<String> = (1..=20_000).map(|b| b.to_string()).collect();
    let e = s.set("batch_sizes", &sizes.join(",")).unwrap_err().to_string();
    assert!(e.contains("20000 values") && e.contains("at most"), "{e}");
    let e = s.set("hidden", &vec!["8"; 60_000].join(",")).unwrap_err().to_string();
    assert!(e.contains("60000 values") && e.contains("at most"), "{e}");
    s.set("batch_sizes", "16,32,64").unwrap();
    let cfg = gpulab::train::TrainConfig { hidden: vec![8; 60_000], ..Default::default() };
    let e = cfg.validate().unwrap_err().to_string();
    assert!(e.contains("60000 hidden layers") && e.contains("at most"), "{e}");
}
