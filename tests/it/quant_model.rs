//! Post-training quantization of a trained MLP: calibrated static activation scales, int8
//! weights per channel, and accuracy within a point of FP32 on the digits set, on the CPU and
//! the GPU. Bad calibration settings are refused by name.

use gpulab::data::{self, DatasetSpec};
use gpulab::device::CpuBackend;
use gpulab::nn::{DenseStack, Mlp, MlpConfig, Optimizer, OptimizerKind};
use gpulab::quant::{HostLayer, ObserverKind, calibrate};
use gpulab::tensor::{MemCategory as M, prelude::*};
use gpulab::train::{F32Phases, Step};

use crate::common::with_gpu;

/// A 64-128-64-10 MLP trained on digits (CPU, fixed order), its layers and the data.
fn trained() -> (Vec<HostLayer>, data::Dataset) {
    let data = data::load(&DatasetSpec::Digits, 42).unwrap();
    let mut cpu = CpuBackend::new();
    let cfg = MlpConfig { input: data.features, hidden: vec![128, 64], classes: data.classes, conv: None };
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
    let q = DenseStack::quantize(b, layers, &ranges).unwrap();
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
    assert!(
        DenseStack::quantize(&mut cpu, &layers, &a[..2])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
            .contains("2 activation ranges for 3 layers")
    );
}

/// The int8 forward pass on the host, from the quantized model alone: per layer, the input's
/// scale (static, or its own absmax when dynamic), the one rounding rule, exact i32 sums, then
/// acc · (s_x · s_W[j]) + b and ReLU.
fn host_int8_logits(m: &gpulab::quant::QuantizedModel, x: &[f32], rows: usize) -> Vec<f32> {
    let mut h = x.to_vec();
    for (li, l) in m.layers.iter().enumerate() {
        let [k, n] = l.shape;
        let sx = l.input_scale.unwrap_or_else(|| gpulab::tensor::scale_for_absmax(h.iter().fold(0.0f32, |a, v| a.max(v.abs()))));
        let xq: Vec<i32> = h.iter().map(|&v| gpulab::tensor::quantize_value(v, sx) as i32).collect();
        let mut y = vec![0.0f32; rows * n];
        for r in 0..rows {
            for j in 0..n {
                let acc: i32 = (0..k).map(|kk| xq[r * k + kk] * l.weight[kk * n + j] as i32).sum();
                let v = acc as f32 * (sx * l.weight_scales[j]) + l.bias[j];
                y[r * n + j] = if li + 1 < m.layers.len() { v.max(0.0) } else { v };
            }
        }
        h = y;
    }
    h
}

fn check_against_host<B: Backend>(b: &mut B, layers: &[HostLayer], calib: &[f32], x: &[f32], rows: usize, who: &str) {
    use gpulab::quant::{export, quantize_model};
    use gpulab::tensor::QuantGranularity as G;
    let ranges = calibrate(b, layers, calib, 64, ObserverKind::Percentile(99.9)).unwrap();
    for weights in [G::PerChannel, G::PerTensor] {
        for act in [Some(&ranges[..]), None] {
            let m = quantize_model(b, layers, act, weights).unwrap();
            if weights == G::PerTensor {
                assert!(m.layers.iter().all(|l| l.weight_scales.iter().all(|&s| s == l.weight_scales[0])), "one scale per tensor");
            }
            // The file round-trips exactly.
            assert_eq!(export::from_bytes(&export::to_bytes(&m, &[]).unwrap(), "t".as_ref()).unwrap(), m);
            let want = host_int8_logits(&m, x, rows);
            let q = DenseStack::quantized(b, &m).unwrap();
            let xt = b.upload_f32(x, [rows, layers[0].shape[0]], M::Inputs).unwrap();
            let y = q.forward(b, &xt).unwrap();
            let got = b.read_f32(&y).unwrap();
            let top = want.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let worst = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0.0f32, f32::max);
            assert!(worst <= 1e-5 * top.max(1.0), "{who} {weights:?} dynamic={}: worst |diff| {worst} (max |logit| {top})", act.is_none());
        }
    }
}

#[test]
fn static_dynamic_per_channel_and_per_tensor_int8_match_a_host_reference_on_every_backend() {
    let (layers, data) = trained();
    // 37 rows: not a multiple of any tile.
    let rows = 37;
    let x = &data.val_x[..rows * data.features];
    let calib = &data.train_x[..128 * data.features];
    check_against_host(&mut CpuBackend::new(), &layers, calib, x, rows, "cpu");
    with_gpu("static_dynamic_per_channel_and_per_tensor_int8_match_a_host_reference_on_every_backend", |g| {
        check_against_host(g, &layers, calib, x, rows, "gpu")
    });
}

#[test]
fn one_layer_int8_and_fp16_inference_stay_close_to_fp32() {
    use gpulab::quant::{metrics, quantize_model};
    let (layers, data) = trained();
    let rows = data.val_len();
    let fp32 = f32_logits(&layers, &data.val_x, rows);
    let mut cpu = CpuBackend::new();
    let xt = cpu.upload_f32(&data.val_x, [rows, data.features], M::Inputs).unwrap();
    let f = DenseStack::float(&mut cpu, &layers, gpulab::tensor::DType::F32).unwrap();
    let y = f.forward(&mut cpu, &xt).unwrap();
    let ours = cpu.read_f32(&y).unwrap();
    assert!(metrics::sqnr_db(&fp32, &ours).is_none_or(|db| db > 100.0), "the f32 stack is the f32 model");
    let h = DenseStack::float(&mut cpu, &layers, gpulab::tensor::DType::F16).unwrap();
    let y = h.forward(&mut cpu, &xt).unwrap();
    let half = cpu.read_f32(&y).unwrap();
    assert!(metrics::agreement(&fp32, &half, data.classes) > 0.99);
    let ranges = calibrate(&mut cpu, &layers, &data.train_x[..256 * data.features], 64, ObserverKind::MinMax).unwrap();
    let m = quantize_model(&mut cpu, &layers, Some(&ranges), gpulab::tensor::QuantGranularity::PerChannel).unwrap();
    for only in 0..layers.len() {
        let q = DenseStack::mixed(&mut cpu, &m, &layers, only).unwrap();
        let outs = q.forward_all(&mut cpu, &xt).unwrap();
        assert_eq!(outs.len(), layers.len());
        let got = cpu.read_f32(outs.last().unwrap()).unwrap();
        let db = metrics::sqnr_db(&fp32, &got).unwrap();
        assert!(db > 20.0 && db < 100.0, "only layer {only} int8: SQNR {db} dB (noisy, but close)");
    }
    assert!(DenseStack::mixed(&mut cpu, &m, &layers, 3).err().unwrap().to_string().contains("layer 3"));
}
