//! Exercise 9 headless: FP32 / FP16 / INT8 side by side on the CPU (and the GPU where there is
//! one), accuracy kept within a point on digits and shapes, calibration deterministic per seed,
//! the exported int8 safetensors loadable by `quant::load` and by Python, bad input refused by
//! name.

use std::process::Command;

use gpulab::device::CpuBackend;
use gpulab::exercises::{self, CollectSink, Settings};
use gpulab::nn::DenseStack;
use gpulab::quant::{self, ActScales, export, metrics};
use gpulab::report::{Cell, Report};
use gpulab::tensor::{MemCategory, QuantGranularity, prelude::*};

use crate::checkpoint::{small_spec, train};
use crate::checkpoint_interop::{SCRIPT, python_or_skip};
use crate::common::with_gpu;

fn settings(pairs: &[String]) -> Settings {
    let mut s = exercises::find("quantization").unwrap().settings();
    s.apply(pairs).unwrap();
    s
}

fn quick(extra: &[&str]) -> Settings {
    let mut pairs: Vec<String> = ["backends=cpu", "latency_runs=2", "epochs=3"].iter().map(|s| s.to_string()).collect();
    pairs.extend(extra.iter().map(|s| s.to_string()));
    settings(&pairs)
}

fn run(s: &Settings) -> gpulab::Result<Report> {
    exercises::find("quantization").unwrap().run(s, &mut CollectSink::default())
}

fn num(c: &Cell) -> f64 {
    match c {
        Cell::Num(v) => *v,
        other => panic!("not a number: {other:?}"),
    }
}

fn text(c: &Cell) -> String {
    match c {
        Cell::Text(t) => t.clone(),
        other => panic!("not text: {other:?}"),
    }
}

/// (FP32, INT8 static per-channel) validation accuracy in % of the first backend's rows.
fn accuracies(r: &Report) -> (f64, f64) {
    let t = r.table("FP32 vs FP16 vs INT8").expect("the comparison table");
    let col = t.columns.iter().position(|c| c.name == "validation accuracy").unwrap();
    let row = |model: &str| t.rows.iter().find(|row| text(&row[1]) == model).map(|row| num(&row[col])).unwrap();
    (row("FP32"), row("INT8 static activations, per-channel weights"))
}

#[test]
fn quantization_compares_fp32_fp16_int8_on_every_backend_to_a_computed_verdict() {
    let (mut gpu, mut refusal) = (false, None);
    with_gpu("quantization_compares_fp32_fp16_int8_on_every_backend_to_a_computed_verdict", |g| {
        gpu = true;
        // An adapter without SHADER_F16 refuses the FP16 row by name (checked), and only that row.
        if !crate::common::runs_16bit(g, gpulab::tensor::DType::F16, "quantization lab") {
            refusal = g.amp_unavailable(gpulab::tensor::DType::F16);
        }
    });
    let backends = if gpu { "backends=cpu,gpu" } else { "backends=cpu" };
    let r = run(&quick(&[backends])).unwrap();
    let t = r.table("FP32 vs FP16 vs INT8").unwrap();
    assert_eq!(t.rows.len(), if gpu { 12 } else { 6 }, "FP32, FP16 and four INT8 rows per backend");
    let latency = t.columns.iter().position(|c| c.name == "latency, batch 64 (median)").expect("the latency column");
    for (i, row) in t.rows.iter().enumerate() {
        if let Some(why) = refusal.as_deref().filter(|_| i == 7) {
            assert!(text(&row[3]).contains(why), "the GPU's FP16 row gives the refusal: {row:?}");
            continue;
        }
        assert_eq!(text(&row[3]), "ok", "{row:?}");
        let lat = num(&row[latency]);
        assert!(lat > 0.0 && lat.is_finite(), "{row:?}");
    }
    let bytes = t.columns.iter().position(|c| c.name == "weight bytes").unwrap();
    let (f32_kib, int8_kib) = (num(&t.rows[0][bytes]), num(&t.rows[2][bytes]));
    assert!(int8_kib < f32_kib * 0.3 && int8_kib > f32_kib * 0.25, "int8 weights (+ scales) at about a quarter: {int8_kib} vs {f32_kib}");
    assert!(text(&t.rows[2][2]).len() > 3, "the int8 kernel path is named");
    let layers = r.table("Per layer (INT8 static, per-channel)").unwrap();
    let half = layers.columns.iter().position(|c| c.name == "max error / half step").unwrap();
    for row in &layers.rows {
        assert!(num(&row[half]) <= 1.0 + 1e-3, "every weight within half a step: {row:?}");
    }
    for id in ["layer_sqnr", "layer_sensitivity"] {
        let c = r.chart(id).unwrap_or_else(|| panic!("chart {id}"));
        assert!(c.series.iter().all(|s| s.points.len() == 3), "{id}: a point per layer");
    }
    let (fp32, int8) = accuracies(&r);
    assert!(r.verdict.summary.contains("INT8") && r.verdict.summary.contains(&format!("{:.1}%", int8)), "{}", r.verdict.summary);
    assert!(r.verdict.summary.contains("faster") || r.verdict.summary.contains("slower"), "{}", r.verdict.summary);
    assert!(fp32 > 80.0, "the model trained: {fp32}");
    // The attachment is the headline model, loadable, and gives the table's CPU accuracy.
    let a = r.attachments.iter().find(|a| a.file_name == "model.int8.safetensors").expect("the exported model");
    let m = export::from_bytes(&a.bytes, "attachment".as_ref()).unwrap();
    assert_eq!((m.weights, m.activations, m.widths()), (QuantGranularity::PerChannel, ActScales::Static, vec![64, 128, 64, 10]));
    let data = gpulab::data::load(&gpulab::data::DatasetSpec::Digits, 42).unwrap();
    let mut cpu = CpuBackend::new();
    let q = DenseStack::quantized(&mut cpu, &m).unwrap();
    let x = cpu.upload_f32(&data.val_x, [data.val_len(), 64], MemCategory::Inputs).unwrap();
    let y = q.forward(&mut cpu, &x).unwrap();
    let logits = cpu.read_f32(&y).unwrap();
    assert!((metrics::accuracy(&logits, &data.val_y) * 100.0 - int8).abs() < 1e-9, "the exported model is the measured one");
}

#[test]
fn int8_keeps_accuracy_within_a_point_on_digits_and_shapes_with_the_default_calibration() {
    for dataset in ["digits", "shapes"] {
        let r = run(&quick(&[&format!("dataset={dataset}"), "epochs=5"])).unwrap();
        let (fp32, int8) = accuracies(&r);
        eprintln!("{dataset}: FP32 {fp32:.2}%, INT8 {int8:.2}%");
        assert!(fp32 - int8 < 1.0, "{dataset}: INT8 {int8:.2}% vs FP32 {fp32:.2}%");
    }
}

#[test]
fn calibration_is_deterministic_per_seed() {
    let ranges = |seed: &str| {
        let r = run(&quick(&[&format!("seed={seed}"), "epochs=1", "calibration_samples=100"])).unwrap();
        r.table("Calibration observers (100 samples, static scales, per-channel weights)")
            .unwrap()
            .rows
            .iter()
            .map(|row| text(&row[2]))
            .collect::<Vec<_>>()
    };
    let a = ranges("7");
    assert_eq!(a.len(), 3, "min/max, 99.9 and 99.99");
    assert_eq!(a, ranges("7"), "same seed, same ranges");
    assert_ne!(a, ranges("8"), "another seed trains and samples differently");
}

#[test]
fn quantization_from_an_exercise_5_checkpoint_and_bad_input_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    train(&small_spec(tmp.path(), gpulab::nn::OptimizerKind::Sgd, 0));
    let ck = gpulab::checkpoint::store::list(tmp.path()).unwrap().remove(0);
    let export_path = tmp.path().join("out.int8.safetensors");
    let r = run(&quick(&[&format!("checkpoint={}", ck.display()), &format!("export={}", export_path.display())])).unwrap();
    let m = quant::load(&export_path).unwrap();
    assert_eq!(m.widths(), vec![64, 24, 16, 10], "the checkpoint's architecture, not the hidden setting");
    assert!(r.notes.iter().any(|n| n.contains("checkpoint")), "{:?}", r.notes);

    let err = |pairs: &[&str]| run(&quick(pairs)).unwrap_err().to_string();
    let e = err(&[&format!("checkpoint={}", ck.display()), "dataset=shapes:res=8,n=240", "calibration_samples=100"]);
    assert!(e.contains("checkpoint") && e.contains("10 classes") && e.contains("4 classes"), "{e}");
    let e = err(&[&format!("checkpoint={}", export_path.display())]);
    assert!(e.contains("gpulab-checkpoint"), "an int8 model is not a checkpoint: {e}");
    let e = err(&["calibration_samples=0"]);
    assert!(e.contains("calibration_samples") && e.contains("at least one sample"), "{e}");
    let e = err(&["calibration_samples=100000"]);
    assert!(e.contains("calibration_samples") && e.contains("training samples"), "{e}");
    let e = err(&["percentile=0"]);
    assert!(e.contains("percentile") && e.contains("(0, 100]"), "{e}");
    let mut s = exercises::find("quantization").unwrap().settings();
    let e = s.set("percentile", "100.5").unwrap_err().to_string();
    assert!(e.contains("percentile") && e.contains("100"), "{e}");

    // A CNN's checkpoint: the int8 model has no convolutions, so it is refused naming the CNN.
    let cnn_dir = tmp.path().join("cnn");
    let mut spec = small_spec(&cnn_dir, gpulab::nn::OptimizerKind::Sgd, 0);
    spec.cfg.model = gpulab::nn::ModelKind::Cnn;
    train(&spec);
    let cnn = gpulab::checkpoint::store::list(&cnn_dir).unwrap().remove(0);
    let e = err(&[&format!("checkpoint={}", cnn.display())]);
    assert!(e.contains("CNN 1x8x8") && e.contains("MLP's checkpoint"), "{e}");
    let e = gpulab::serve::load_model(&gpulab::serve::ModelSource::Checkpoint(cnn.clone()))
        .expect_err("a CNN checkpoint is not served")
        .to_string();
    assert!(e.contains("CNN 1x8x8") && e.contains("inference server"), "{e}");

    // A damaged or foreign file is refused by quant::load with its name and the reason.
    let bytes = std::fs::read(&export_path).unwrap();
    let bad = |b: &[u8]| export::from_bytes(b, "m.safetensors".as_ref()).unwrap_err().to_string();
    assert!(bad(&bytes[..bytes.len() / 2]).contains("m.safetensors"));
    assert!(bad(&std::fs::read(&ck).unwrap()).contains("gpulab-int8/1"));
    assert!(quant::load(&tmp.path().join("missing.safetensors")).unwrap_err().to_string().contains("missing.safetensors"));
}

#[test]
fn python_safetensors_reads_the_int8_model() {
    let Some(py) = python_or_skip("python_safetensors_reads_the_int8_model") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("m.safetensors");
    run(&quick(&["epochs=1", &format!("export={}", path.display())])).unwrap();
    let ours = quant::load(&path).unwrap();
    let out = Command::new(py).args(["-c", SCRIPT]).arg(&path).output().unwrap();
    assert!(out.status.success(), "python failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tensors = v["tensors"].as_object().unwrap();
    assert_eq!(tensors.len(), 4 * ours.layers.len(), "{:?}", tensors.keys().collect::<Vec<_>>());
    for (i, l) in ours.layers.iter().enumerate() {
        let t = &tensors[&format!("layers.{i}.weight")];
        assert_eq!((t["dtype"].as_str(), t["shape"].clone()), (Some("int8"), serde_json::json!(l.shape)));
        assert_eq!(t["sum"].as_f64().unwrap(), l.weight.iter().map(|&q| q as f64).sum::<f64>(), "layer {i} int8 values");
        let s = &tensors[&format!("layers.{i}.weight_scale")];
        assert_eq!((s["dtype"].as_str(), s["shape"].clone()), (Some("float32"), serde_json::json!([l.shape[1]])));
        assert_eq!(tensors[&format!("layers.{i}.input_scale")]["shape"], serde_json::json!([1]));
        assert_eq!(tensors[&format!("layers.{i}.bias")]["dtype"], "float32");
    }
    let meta = &v["metadata"];
    assert_eq!(
        (meta["format"].as_str(), meta["weights"].as_str(), meta["activations"].as_str()),
        (Some("gpulab-int8/1"), Some("per-channel"), Some("static"))
    );
    assert_eq!(meta["widths"], "[64,128,64,10]");
}
