//! Post-training quantization of a trained MLP: calibrated static activation scales, int8
//! weights per channel, and accuracy within a point of FP32 on the digits set, on the CPU and
//! the GPU. Bad calibration settings are refused by name.

use gpulab::data::{self, DatasetSpec};
use gpulab::device::CpuBackend;
use gpulab::nn::{Mlp, MlpConfig, Optimizer, OptimizerKind};
use gpulab::quant::{HostLayer, ObserverKind, QuantMlp, calibrate};
use gpulab::tensor::{prelude::*, MemCategory as M};
use gpulab::train::{F32Phases, Step};

use crate::common::with_gpu;

/// A 64-128-64-10 MLP trained on digits (CPU, fixed order), its layers and the data.
fn trained() -> (Vec<HostLayer>, data::Dataset) {
    let data = data::load(&DatasetSpec::Digits, 42).unwrap();
    let mut cpu = CpuBackend::new();
    let cfg = MlpConfig { input: data.features, hidden: vec![128, 64], classes: data.classes };
    let mut model = Mlp::new(&mut cpu, cfg.clone(), Optimizer::new(OptimizerKind::Sgd, 0.05, 0.9, 0.0), 3).unwrap();
    let batch = 32;
    let mut step = Step::new(&mut cpu, &model, F32Phases, batch).unwrap();
    let n = data.train_y.len() / batch * batch;
    let mut s = 0;
    for _ in 0..12 {
        for r0 in (0..n).step_by(batch) {
            let (xt, yt) = step.inputs(&mut cpu, &model, batch).unwrap();
            cpu.write_f32(xt, &data.train_x[r0 * data.features..(r0 + batch) * data.features]).unwrap();
            cpu.write_u32(yt, &data.train_y[r0..r0 + batch]).unwrap();
            s += 1;
            step.train(&mut cpu, &mut model, s).unwrap();
        }
    }
    let layers = HostLayer::from_parameters(&model.read_parameters(&mut cpu).unwrap(), &cfg.widths()).unwrap();
    (layers, data)
}

fn argmax(row: &[f32]) -> usize {
    row.iter().enumerate().fold(0, |best, (i, &v)| if v > row[best] { i } else { best })
}

/// FP32 logits on the host: the reference the int8 model is compared with.
fn f32_logits(layers: &[HostLayer], x: &[f32], rows: usize) -> Vec<f32> {
    let mut h = x.to_vec();
    for (li, l) in layers.iter().enumerate() {
        let [k, n] = l.shape;
        let mut y = vec![0.0f32; rows * n];
        for r in 0..rows {
            for j in 0..n {
                let v = (0..k).map(|kk| h[r * k + kk] * l.weight[kk * n + j]).sum::<f32>() + l.bias[j];
                y[r * n + j] = if li + 1 < layers.len() { v.max(0.0) } else { v };
            }
        }
        h = y;
    }
    h
}

fn accuracy(logits: &[f32], labels: &[u32]) -> f64 {
    let classes = logits.len() / labels.len();
    logits.chunks_exact(classes).zip(labels).filter(|(row, l)| argmax(row) == **l as usize).count() as f64 / labels.len() as f64
}

fn int8_logits<B: Backend>(b: &mut B, layers: &[HostLayer], calib: &[f32], kind: ObserverKind, x: &[f32], rows: usize) -> Vec<f32> {
    let ranges = calibrate(b, layers, calib, 64, kind).unwrap();
    let q = QuantMlp::new(b, layers, &ranges).unwrap();
    let xt = b.upload_f32(x, [rows, layers[0].shape[0]], M::Inputs).unwrap();
    let logits = q.forward(b, &xt).unwrap();
    b.read_f32(&logits).unwrap()
}

#[test]
fn int8_inference_keeps_digits_accuracy_within_a_point_on_every_backend() {
    let (layers, data) = trained();
    let rows = data.val_y.len();
    let fp32 = accuracy(&f32_logits(&layers, &data.val_x, rows), &data.val_y);
    assert!(fp32 >= 0.9, "the FP32 model trained: {fp32:.3}");
    // Calibration on 256 held-out training samples, never the validation split.
    let calib = &data.train_x[..256 * data.features];
    for kind in [ObserverKind::MinMax, ObserverKind::Percentile(99.99)] {
        let cpu = accuracy(&int8_logits(&mut CpuBackend::new(), &layers, calib, kind, &data.val_x, rows), &data.val_y);
        eprintln!("digits val accuracy: fp32 {fp32:.4}, int8 ({}) on the CPU {cpu:.4}", kind.name());
        assert!(cpu >= fp32 - 0.01, "{kind:?}: int8 {cpu:.4} vs fp32 {fp32:.4}");
        with_gpu("int8_inference_keeps_digits_accuracy_within_a_point_on_every_backend", |gpu| {
            let g = accuracy(&int8_logits(gpu, &layers, calib, kind, &data.val_x, rows), &data.val_y);
            eprintln!("digits val accuracy: int8 ({}) on the GPU {g:.4}", kind.name());
            assert!(g >= fp32 - 0.01, "{kind:?} on the GPU: int8 {g:.4} vs fp32 {fp32:.4}");
        });
    }
}

#[test]
fn calibration_is_deterministic_and_refuses_bad_settings() {
    let (layers, data) = trained();
    let calib = &data.train_x[..100 * data.features];
    let mut cpu = CpuBackend::new();
    let run = |cpu: &mut CpuBackend| calibrate(cpu, &layers, calib, 32, ObserverKind::Percentile(99.9)).unwrap();
    let a = run(&mut cpu);
    assert_eq!(a.len(), 3);
    assert!(a.iter().all(|&r| r > 0.0 && r.is_finite()), "{a:?}");
    assert_eq!(a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), run(&mut cpu).iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    let err = |r: gpulab::Result<Vec<f32>>| r.unwrap_err().to_string();
    assert!(err(calibrate(&mut cpu, &layers, &[], 32, ObserverKind::MinMax)).contains("at least one sample"));
    assert!(err(calibrate(&mut cpu, &layers, calib, 32, ObserverKind::Percentile(0.0))).contains("(0, 100]"));
    assert!(err(calibrate(&mut cpu, &layers, &calib[..10], 32, ObserverKind::MinMax)).contains("at least one sample"));
    let other_model = HostLayer::from_parameters(&[vec![0.0; 6], vec![0.0; 3]], &[2, 4]).unwrap_err().to_string();
    assert!(other_model.contains("2→4"), "{other_model}");
    assert!(QuantMlp::new(&mut cpu, &layers, &a[..2]).err().map(|e| e.to_string()).unwrap_or_default().contains("2 activation ranges for 3 layers"));
}
