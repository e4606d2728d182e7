//! The cut-up training step: batched read-back against the one-tensor reads, the forward-only
//! path against the training forward, and the phases against a reference run.

use gpulab::device::CpuBackend;
use gpulab::nn::{AmpConfig, Mlp, MlpConfig, Optimizer, OptimizerKind, Precision};
use gpulab::tensor::prelude::*;
use gpulab::tensor::{DType, HostData, MemCategory};
use gpulab::train::{Amp, F32Phases, Phases, Step, StepBuffers};

use crate::common::{random, runs_16bit, with_gpu};

/// Tensors of every dtype and odd sizes (a lone 16-bit element shares its word with padding).
fn mixed<B: Backend>(b: &mut B) -> Vec<B::Tensor> {
    let mut ts = Vec::new();
    for (i, (shape, dt)) in [
        ([3, 5], DType::F32),
        ([1, 7], DType::U32),
        ([1, 1], DType::F16),
        ([5, 3], DType::BF16),
        ([0, 4], DType::F32),
        ([1, 1], DType::U32),
        ([33, 9], DType::F16),
        ([65, 17], DType::F32),
    ]
    .into_iter()
    .enumerate()
    {
        let n = shape[0] * shape[1];
        let mut t = b.zeros(shape, dt, MemCategory::Other).unwrap();
        if dt == DType::U32 {
            b.write_u32(&mut t, &(0..n as u32).map(|v| v * 2654435761 + i as u32).collect::<Vec<_>>()).unwrap();
        } else {
            b.write_f32(&mut t, &random(n, i as u64, -3.0, 3.0)).unwrap();
        }
        ts.push(t);
    }
    ts
}

fn staging(b: &impl Backend) -> (u64, u64) {
    b.memory().categories.iter().find(|c| c.0 == MemCategory::Staging).map_or((0, 0), |c| (c.1, c.2))
}

/// `one_staging`: the backend reads through staging memory, which must then be one buffer
/// holding every tensor at a 256-byte aligned offset, released afterwards.
fn read_many_matches_single_reads<B: Backend>(b: &mut B, one_staging: bool) {
    let ts = mixed(b);
    let refs: Vec<&B::Tensor> = ts.iter().collect();
    b.reset_memory_peaks();
    let before = staging(b).0;
    let got = b.read_many(&refs).unwrap();
    let (now, peak) = staging(b);
    assert_eq!(now, before, "the staging buffer is given back");
    if one_staging {
        use gpulab::tensor::TensorMeta;
        let bytes = |t: &B::Tensor| if t.dtype().is_16bit() { t.numel().div_ceil(2) as u64 * 4 } else { t.numel() as u64 * 4 };
        let want: u64 = ts.iter().map(|t| bytes(t).div_ceil(256) * 256).sum();
        // Behind them, room for the timestamp queries (1024 × 8 bytes): one copy, one wait.
        let timestamps = if b.info().timestamps { 8192 } else { 0 };
        assert_eq!(peak - before, want + timestamps, "one staging buffer holds every tensor and the timestamps");
    }
    assert_eq!(got.len(), ts.len());
    for (i, (t, g)) in ts.iter().zip(&got).enumerate() {
        let want = if gpulab::tensor::TensorMeta::dtype(t) == DType::U32 {
            HostData::U32(b.read_u32(t).unwrap())
        } else {
            HostData::F32(b.read_f32(t).unwrap())
        };
        assert_eq!(g, &want, "tensor {i}");
    }
    assert!(b.read_many(&[]).unwrap().is_empty());
    assert!(got[0].u32().is_err() && got[1].f32().is_err(), "reading data as the wrong type is refused");
}

#[test]
fn read_many_matches_single_reads_on_cpu() {
    read_many_matches_single_reads(&mut CpuBackend::new(), false);
}

#[test]
fn read_many_matches_single_reads_on_gpu() {
    with_gpu("read_many_matches_single_reads_on_gpu", |gpu| read_many_matches_single_reads(gpu, true));
}

/// The training forward phase's logits equal the forward-only path's, bit for bit, and the
/// phases called one by one leave the same parameters as `train`.
fn forward_only_equals_training_forward<B: Backend, P: Phases<B>>(b: &mut B, make: impl Fn(&mut B, &Mlp<B>) -> P) {
    let cfg = MlpConfig { input: 19, hidden: vec![24, 12], classes: 5, conv: None };
    let rows = 11;
    let x = random(rows * cfg.input, 3, -1.0, 1.0);
    let y: Vec<u32> = (0..rows as u32).map(|i| i % 5).collect();
    let opt = Optimizer::new(OptimizerKind::Sgd, 0.1, 0.9, 0.0);
    let mut model = Mlp::new(b, cfg.clone(), opt, 4).unwrap();
    let phases = make(b, &model);
    let mut step = Step::new(b, &model, phases, rows).unwrap();

    let mut ws = step.predict_buffers(b, &model, rows).unwrap();
    b.write_f32(ws.inputs().0, &x).unwrap();
    let predicted = step.predict(b, &model, &mut ws).unwrap();
    let predicted = b.read_f32(predicted).unwrap();

    let (xt, yt) = step.inputs(b, &model, rows).unwrap();
    b.write_f32(xt, &x).unwrap();
    b.write_u32(yt, &y).unwrap();
    step.forward(b, &model).unwrap();
    let trained = b.read_f32(step.logits()).unwrap();
    assert_eq!(predicted.len(), rows * cfg.classes);
    assert_eq!(predicted.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), trained.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    assert!(predicted.iter().any(|&v| v != 0.0), "the logits were computed");

    step.backward(b, &mut model).unwrap();
    step.apply_update(b, &mut model, 1).unwrap();
    let phased = model.read_parameters(b).unwrap();
    let totals = step.take_totals(b).unwrap();
    assert!(totals.correct as usize <= rows);
    assert!(totals.loss > 0.0);

    let mut reference = Mlp::new(b, cfg, opt, 4).unwrap();
    let phases = make(b, &reference);
    let mut once = Step::new(b, &reference, phases, rows).unwrap();
    let (xt, yt) = once.inputs(b, &reference, rows).unwrap();
    b.write_f32(xt, &x).unwrap();
    b.write_u32(yt, &y).unwrap();
    once.train(b, &mut reference, 1).unwrap();
    assert_eq!(once.take_totals(b).unwrap(), totals, "same totals");
    assert_eq!(reference.read_parameters(b).unwrap(), phased, "same parameters");
}

fn amp_phases<B: Backend>(b: &mut B, model: &Mlp<B>) -> Amp<B> {
    Amp::new(b, model, AmpConfig::new(Precision::F16)).unwrap().expect("fp16 is mixed precision")
}

#[test]
fn forward_only_equals_training_forward_on_cpu() {
    forward_only_equals_training_forward(&mut CpuBackend::new(), |_, _| F32Phases);
    forward_only_equals_training_forward(&mut CpuBackend::new(), amp_phases);
}

#[test]
fn forward_only_equals_training_forward_on_gpu() {
    with_gpu("forward_only_equals_training_forward_on_gpu", |gpu| {
        forward_only_equals_training_forward(gpu, |_, _| F32Phases);
        // Where the adapter refuses fp16 (by name, checked), the mixed-precision phases run in bf16.
        let p = if runs_16bit(gpu, DType::F16, "forward_only_equals_training_forward_on_gpu") { Precision::F16 } else { Precision::BF16 };
        forward_only_equals_training_forward(gpu, |b, m| Amp::new(b, m, AmpConfig::new(p)).unwrap().expect("mixed precision"));
    });
}

/// The data-parallel seam sits between backward and the optimizer step: a strategy that zeroes
/// every gradient there (plain SGD, no weight decay) leaves the weights as they were initialised,
/// in f32 and in fp16 (where the scaler still sees finite gradients).
#[test]
fn a_strategy_runs_between_backward_and_update() {
    use gpulab::data::{self, DatasetSpec};
    use gpulab::error::Result;
    use gpulab::train::{
        Inline, LoaderPosition, NullSink, Phases, Step, StepAt, Strategy, TrainConfig, TrainHooks, TrainSink, train_strategy,
    };

    #[derive(Default)]
    struct ZeroGrads {
        initial: Vec<Vec<f32>>,
        last: Vec<Vec<f32>>,
        calls: u64,
    }
    impl TrainHooks<CpuBackend> for ZeroGrads {
        fn restore(&mut self, b: &mut CpuBackend, model: &mut Mlp<CpuBackend>) -> Result<Option<LoaderPosition>> {
            self.initial = model.read_parameters(b)?;
            Ok(None)
        }
    }
    impl Strategy<CpuBackend> for ZeroGrads {
        fn step<P: Phases<CpuBackend>>(
            &mut self,
            b: &mut CpuBackend,
            model: &mut Mlp<CpuBackend>,
            step: &mut Step<CpuBackend, P>,
            at: StepAt,
            _sink: &mut dyn TrainSink,
        ) -> Result<bool> {
            step.forward(b, model)?;
            step.backward(b, model)?;
            self.calls += 1;
            for p in model.weights.iter_mut().chain(model.biases.iter_mut()) {
                b.fill(&mut p.grad, 0.0)?;
            }
            step.apply_update(b, model, at.number)?;
            Ok(false)
        }
        fn finish(&mut self, b: &mut CpuBackend, model: &Mlp<CpuBackend>, _sink: &mut dyn TrainSink) -> Result<()> {
            self.last = model.read_parameters(b)?;
            Ok(())
        }
    }

    let data = data::load(&DatasetSpec::Digits, 5).unwrap();
    for precision in [Precision::F32, Precision::F16] {
        let cfg = TrainConfig {
            hidden: vec![16],
            batch: 100,
            epochs: 1,
            lr: 0.5,
            momentum: 0.0,
            log_every: 5,
            amp: AmpConfig::new(precision),
            ..TrainConfig::default()
        };
        let (mut hooks, mut strategy) = (ZeroGrads::default(), ZeroGrads::default());
        let report = train_strategy(&mut CpuBackend::new(), &data, &cfg, &mut NullSink, &mut hooks, &mut Inline, &mut strategy).unwrap();
        assert_eq!(strategy.calls, report.steps, "{precision:?}: called once per step");
        assert!(!hooks.initial.is_empty());
        assert_eq!(strategy.last, hooks.initial, "{precision:?}: zeroed gradients, unchanged weights");
    }
}
