//! Exercise 3 headless: all three precisions and the underflow demo run to a computed verdict,
//! and the demo really shows FP16 flushing tiny gradients that the GradScaler keeps, and BF16
//! keeping them without a scaler.

use gpulab::exercises::{self, CollectSink};
use gpulab::report::{Cell, Report};

use crate::common::require_gpu;

fn run(backend: &str) -> Report {
    let ex = exercises::find("precision").unwrap();
    let mut s = ex.settings();
    // Batch 32: enough steps in one short demo epoch for the scaled run to visibly learn.
    let sets = [
        format!("backend={backend}"),
        "epochs=2".into(),
        "hidden=64".into(),
        "batch=32".into(),
        "demo_epochs=1".into(),
        "size=as-set".into(),
    ];
    s.apply(&sets).unwrap();
    ex.run(&s, &mut CollectSink::default()).unwrap()
}

fn num(c: &Cell) -> f64 {
    match c {
        Cell::Num(v) => *v,
        other => panic!("expected a number, got {other:?}"),
    }
}

fn col(r: &Report, table: &str, name: &str) -> usize {
    r.table(table).unwrap().columns.iter().position(|c| c.name == name).unwrap_or_else(|| panic!("{table} has no column {name}"))
}

/// `fp16_refused`: the sentence the adapter refuses fp16 with (no SHADER_F16), if it does; then
/// every fp16 row must give it, and the fp32 and bf16 parts of the lab are checked as usual.
fn check(r: &Report, fp16_refused: Option<&str>) {
    let t = r.table("Precisions").unwrap();
    let labels: Vec<String> = t.rows.iter().map(|row| format!("{:?}", row[0])).collect();
    assert_eq!(t.rows.len(), 3, "{labels:?}");
    let is_fp16 = |row: &[Cell]| matches!(&row[0], Cell::Text(l) if l.starts_with("fp16"));
    for row in &t.rows {
        match fp16_refused.filter(|_| is_fp16(row)) {
            Some(why) => assert!(matches!(&row[1], Cell::Text(s) if s.starts_with("unavailable") && s.contains(why)), "{row:?}"),
            None => assert_eq!(row[1], Cell::Text("ok".into()), "{row:?}"),
        }
    }
    if let Some(why) = fp16_refused {
        check_without_fp16(r, why);
        return;
    }
    let act = col(r, "Precisions", "activations");
    assert!(num(&t.rows[1][act]) < num(&t.rows[0][act]) && num(&t.rows[2][act]) < num(&t.rows[0][act]), "16-bit activations are smaller");
    assert!(r.table("Bytes saved vs FP32 (negative = more)").is_some());
    let d = r.table("Underflow demonstration").unwrap();
    assert_eq!(d.rows.len(), 4, "fp32, fp16 unscaled and scaled, bf16: {:?}", d.rows);
    let fl = col(r, "Underflow demonstration", "gradients flushed to zero");
    let (unscaled, scaled, bf16) = (num(&d.rows[1][fl]), num(&d.rows[2][fl]), num(&d.rows[3][fl]));
    assert!(unscaled > 90.0 && scaled < 10.0, "flushed: unscaled {unscaled}%, scaled {scaled}%");
    // BF16's range is FP32's: the same tiny gradients survive without a scaler.
    assert!(bf16 < 1.0, "bf16 without a scaler flushed {bf16}%");
    assert!(r.verdict.evidence.iter().any(|e| e.contains("BF16 without any scaler flushed")), "{:?}", r.verdict.evidence);
    let acc = col(r, "Underflow demonstration", "validation accuracy");
    assert!(num(&d.rows[2][acc]) > num(&d.rows[1][acc]) + 20.0, "scaling rescues training: {:?}", d.rows);
    assert!(r.chart("loss").unwrap().series.len() == 3 && r.chart("loss_scale").is_some() && r.chart("underflow_loss").is_some());
    assert!(r.verdict.summary.contains("Underflow") && r.verdict.summary.contains("fp16 + GradScaler"), "{}", r.verdict.summary);
    // The key figure (the class view's): FP16's throughput over FP32's.
    let key = exercises::find("precision").unwrap().key_figure(r).cloned().expect("a key figure");
    let tp = |label: &str| r.figures.iter().find(|f| f.label == label).unwrap_or_else(|| panic!("no figure {label}")).value;
    assert_eq!(key.label, "fp16 + GradScaler speed-up over FP32");
    assert!((key.value - tp("fp16 + GradScaler throughput") / tp("FP32 throughput")).abs() < 1e-9, "{key:?}");
}

/// The lab on an adapter that refuses fp16: bf16 still shows its smaller activations and keeps
/// the demo's tiny gradients without a scaler; each fp16 row of the demo gives the refusal.
fn check_without_fp16(r: &Report, why: &str) {
    let t = r.table("Precisions").unwrap();
    let act = col(r, "Precisions", "activations");
    assert!(num(&t.rows[2][act]) < num(&t.rows[0][act]), "16-bit activations are smaller: {:?}", t.rows);
    let d = r.table("Underflow demonstration").unwrap();
    assert_eq!(d.rows.len(), 4, "fp32, fp16 unscaled and scaled, bf16: {:?}", d.rows);
    for row in &d.rows[1..3] {
        assert!(matches!(&row[1], Cell::Text(s) if s.contains(why)), "the fp16 demo rows give the refusal: {row:?}");
    }
    let fl = col(r, "Underflow demonstration", "gradients flushed to zero");
    assert!(num(&d.rows[3][fl]) < 1.0, "bf16 without a scaler flushed {}%", num(&d.rows[3][fl]));
}

#[test]
fn precision_lab_runs_on_the_cpu() {
    check(&run("cpu"), None);
}

#[test]
fn precision_lab_runs_on_the_gpu() {
    use gpulab::device::gpu::adapters;
    if !require_gpu() && adapters::enumerate(&adapters::instance()).is_empty() {
        eprintln!("SKIPPED precision_lab_runs_on_the_gpu: no GPU adapter");
        return;
    }
    check(&run("gpu"), crate::common::gpu_fp16_refusal().as_deref());
}

/// `model=cnn` trains the CNN at every precision (its convolutions in 16 bits), and the report
/// names it.
#[test]
fn precision_lab_trains_the_cnn_at_every_precision() {
    let ex = exercises::find("precision").unwrap();
    let mut s = ex.settings();
    let sets = ["backend=cpu", "model=cnn", "dataset=shapes:res=8,n=300", "hidden=16", "epochs=1", "batch=32", "underflow_demo=false"];
    s.apply(&sets.map(String::from)).unwrap();
    let r = ex.run(&s, &mut CollectSink::default()).unwrap();
    let t = r.table("Precisions").unwrap();
    assert_eq!(t.rows.len(), 3);
    assert!(t.rows.iter().all(|row| row[1] == Cell::Text("ok".into())), "{:?}", t.rows);
    let arch = r.metadata.hyperparameters.get("architecture").unwrap();
    assert!(arch.starts_with("CNN 1x8x8 conv3x3 16-pool"), "{arch}");
    let act = col(&r, "Precisions", "activations");
    // Stages run by ops have 16-bit columns, less memory than f32's; fused stages (the CPU with
    // AVX-512) have no columns at either precision, only the dense head's input is added.
    use gpulab::tensor::{ConvOps, DType, ImageGeom};
    let (cpu, stage1) = (gpulab::device::CpuBackend::new(), ImageGeom { batch: 32, height: 8, width: 8, channels: 1 });
    let fused = cpu.fuses_conv_stage(stage1, 16, false, DType::F16)
        && cpu.fuses_conv_stage(stage1.with_channels(16).pooled(), 32, true, DType::F16);
    let most = if fused { 1.1 } else { 1.0 };
    assert!(num(&t.rows[1][act]) < most * num(&t.rows[0][act]), "16-bit activations vs f32's: {:?}", t.rows);
}

/// At exercise 3's defaults with the widths as set (the lesson's digits model) activations
/// dominate, so FP16's and BF16's peak memory by the ledger is at most 0.7× FP32's (one epoch;
/// the ledger's bytes do not depend on timing).
fn check_default_memory(backend: &str) {
    let ex = exercises::find("precision").unwrap();
    let mut s = ex.settings();
    s.apply(&[format!("backend={backend}"), "epochs=1".into(), "underflow_demo=false".into(), "size=as-set".into()]).unwrap();
    let r = ex.run(&s, &mut CollectSink::default()).unwrap();
    let t = r.table("Precisions").unwrap();
    let total = col(&r, "Precisions", "total peak");
    let fp32 = num(&t.rows[0][total]);
    let refused = if backend == "gpu" { crate::common::gpu_fp16_refusal() } else { None };
    for row in &t.rows[1..] {
        if let (Some(why), Cell::Text(status)) = (&refused, &row[1])
            && status != "ok"
        {
            assert!(status.contains(why.as_str()), "only fp16 may be refused, by name: {row:?}");
            continue;
        }
        let ratio = num(&row[total]) / fp32;
        assert!(ratio <= 0.7, "{backend} {:?}: peak {:.3} MiB is {ratio:.2}× FP32's {fp32:.3} MiB", row[0], num(&row[total]));
    }
}

#[test]
fn sixteen_bit_peak_memory_is_at_most_0_7_of_fp32_at_the_defaults() {
    check_default_memory("cpu");
    use gpulab::device::gpu::adapters;
    if !require_gpu() && adapters::enumerate(&adapters::instance()).is_empty() {
        eprintln!("SKIPPED sixteen_bit_peak_memory_is_at_most_0_7_of_fp32_at_the_defaults on the GPU: no GPU adapter");
        return;
    }
    check_default_memory("gpu");
}
