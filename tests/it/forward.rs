//! The one dense forward pass (`nn::dense`, issue 32): the training step's forward — f32, and
//! autocast over the 16-bit weight copies — and the weights-only stack built from the same
//! parameters (`DenseStack::float`: the server's f32 model, exercise 9's FP32 and FP16 ones) give
//! the same logits bit for bit on every backend, and a stack of mixed precisions runs layer by
//! layer as its layers do alone.

use gpulab::nn::{AmpConfig, Dense, DenseStack, HostLayer, LayerKind, Mlp, MlpConfig, Optimizer, OptimizerKind, Precision};
use gpulab::quant::quantize_model;
use gpulab::tensor::{DType, MemCategory as M, QuantGranularity, prelude::*};
use gpulab::train::{Amp, F32Phases, Phases, Step, StepBuffers};

use crate::common::{backend_tests, random};

const ROWS: usize = 11;

fn config() -> MlpConfig {
    MlpConfig { input: 19, hidden: vec![24, 12], classes: 5, conv: None }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The training step's forward-only path (`Step::predict`) in `phases`' precision.
fn predicted<B: Backend, P: Phases<B>>(b: &mut B, model: &Mlp<B>, phases: P, x: &[f32]) -> Vec<f32> {
    let mut step = Step::new(b, model, phases, ROWS).unwrap();
    let mut ws = step.predict_buffers(b, model, ROWS).unwrap();
    b.write_f32(ws.inputs().0, x).unwrap();
    let logits = step.predict(b, model, &mut ws).unwrap();
    b.read_f32(logits).unwrap()
}

fn training_and_inference_forwards_agree_bit_for_bit<B: Backend>(b: &mut B) {
    let cfg = config();
    let x = random(ROWS * cfg.input, 3, -1.0, 1.0);
    let model = Mlp::new(b, cfg.clone(), Optimizer::new(OptimizerKind::Sgd, 0.1, 0.9, 0.0), 4).unwrap();
    let layers = HostLayer::from_parameters(&model.read_parameters(b).unwrap(), &cfg.widths()).unwrap();
    let xt = b.upload_f32(&x, [ROWS, cfg.input], M::Inputs).unwrap();
    for precision in Precision::ALL {
        let dtype = precision.dtype16().unwrap_or(DType::F32);
        if let Some(why) = precision.dtype16().and_then(|dt| b.amp_unavailable(dt)) {
            eprintln!("{} on {}: skipped, {why}", precision.name(), b.info().label());
            continue;
        }
        let trained = match precision {
            Precision::F32 => predicted(b, &model, F32Phases, &x),
            p => {
                let amp = Amp::new(b, &model, AmpConfig::new(p)).unwrap().expect("a 16-bit precision");
                predicted(b, &model, amp, &x)
            }
        };
        let stack = DenseStack::float(b, &layers, dtype).unwrap();
        let logits = stack.forward(b, &xt).unwrap();
        let inferred = b.read_f32(&logits).unwrap();
        assert_eq!(inferred.len(), ROWS * cfg.classes);
        assert!(inferred.iter().any(|&v| v != 0.0), "the logits were computed");
        assert_eq!(bits(&trained), bits(&inferred), "{} on {}: training and inference forwards differ", precision.name(), b.info().label());
    }
}

/// An int8 layer then f32 layers (exercise 9's one-layer sensitivity model): `DenseStack`'s
/// outputs equal each layer's `Dense::forward` applied by hand to the previous output.
fn a_mixed_stack_runs_its_layers_in_order<B: Backend>(b: &mut B) {
    if let Some(why) = b.quant_unavailable() {
        eprintln!("int8 on {}: skipped, {why}", b.info().label());
        return;
    }
    let cfg = config();
    let x = random(ROWS * cfg.input, 5, -1.0, 1.0);
    let widths = cfg.widths();
    let params: Vec<Vec<f32>> = widths
        .windows(2)
        .enumerate()
        .flat_map(|(i, w)| [random(w[0] * w[1], 10 + i as u64, -0.5, 0.5), random(w[1], 20 + i as u64, -0.1, 0.1)])
        .collect();
    let layers = HostLayer::from_parameters(&params, &widths).unwrap();
    let q = quantize_model(b, &layers, None, QuantGranularity::PerChannel).unwrap();
    let stack = DenseStack::mixed(b, &q, &layers, 0).unwrap();
    assert!(
        matches!(stack.layers()[0].kind, LayerKind::Int8 { input_scale: None, .. }) && matches!(stack.layers()[1].kind, LayerKind::F32(_))
    );
    let xt = b.upload_f32(&x, [ROWS, cfg.input], M::Inputs).unwrap();
    let outs = stack.forward_all(b, &xt).unwrap();
    assert_eq!(outs.len(), 3);
    let mut input = xt;
    for (i, (layer, out)) in stack.layers().iter().zip(&outs).enumerate() {
        let mut y = b.zeros([ROWS, widths[i + 1]], DType::F32, M::Activations).unwrap();
        Dense::as_ref(layer).forward(b, &input, &mut y, i < 2).unwrap();
        assert_eq!(bits(&b.read_f32(&y).unwrap()), bits(&b.read_f32(out).unwrap()), "layer {i} on {}", b.info().label());
        input = y;
    }
}

backend_tests!([cpu, gpu, cuda] training_and_inference_forwards_agree_bit_for_bit, a_mixed_stack_runs_its_layers_in_order);
