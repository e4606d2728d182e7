//! The chapter's memory ladder in training: gradient accumulation (N micro-batches of B/N
//! give the large batch's update, up to summation order) and activation recomputation
//! (gradients equal to the stored-activation path, a lower activation peak), on every backend,
//! in f32 and autocast.

use gpulab::data::{self, Dataset, DatasetSpec};
use gpulab::error::{Error, Result};
use gpulab::nn::{AmpConfig, ConvConfig, Mlp, MlpConfig, Optimizer, OptimizerKind, Precision};
use gpulab::tensor::{DType, MemCategory, prelude::*};
use gpulab::train::{Amp, F32Phases, Inline, NullSink, Phases, Step, StepDone, TrainConfig, TrainHooks, TrainReport, train_with};

use crate::common::{backend_tests, random};

/// The parameters at the end of a run.
#[derive(Default)]
struct FinalWeights(Vec<Vec<f32>>);

impl<B: Backend> TrainHooks<B> for FinalWeights {
    fn after_step(&mut self, b: &mut B, model: &Mlp<B>, done: StepDone) -> Result<()> {
        if done.run_end {
            self.0 = model.read_parameters(b)?;
        }
        Ok(())
    }
}

fn small_data() -> Dataset {
    data::load(&"shapes:res=8,channels=1,n=400,classes=4".parse::<DatasetSpec>().unwrap(), 5).unwrap()
}

fn cfg(precision: Precision, batch: usize, accumulate: usize) -> TrainConfig {
    TrainConfig {
        hidden: vec![48, 24],
        batch,
        epochs: 2,
        lr: 0.02,
        log_every: 5,
        amp: AmpConfig::new(precision),
        accumulate,
        ..TrainConfig::default()
    }
}

fn run<B: Backend>(b: &mut B, data: &Dataset, cfg: &TrainConfig) -> (Vec<Vec<f32>>, TrainReport) {
    let mut weights = FinalWeights::default();
    let report = train_with(b, data, cfg, &mut NullSink, &mut weights, &mut Inline).unwrap();
    (weights.0, report)
}

/// Largest |a − b| / (|b| + 1) over every parameter.
fn max_rel_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).flat_map(|(x, y)| x.iter().zip(y).map(|(x, y)| (x - y).abs() / (y.abs() + 1.0))).fold(0.0, f32::max)
}

/// Bounds on the final weights' difference after two epochs (28 optimizer steps). f32 differs
/// only in the order the micro-batches' partial sums are added (measured: ≤ 4e-8 on the CPU
/// and llvmpipe); autocast's 16-bit weight copies can round such a difference to the next
/// 16-bit value, which the following steps carry (measured: ≤ 5e-7).
fn tolerance(p: Precision) -> f32 {
    match p {
        Precision::F32 => 1e-6,
        Precision::F16 | Precision::BF16 => 1e-5,
    }
}

/// N micro-batches of B/N give the update of one batch of B. The epoch's short last batch
/// (here 8 rows of 4 + 4 + … ) is cut into micro-batches too, the last of them short. A run
/// of batch B/N without accumulation (N times the steps) lands far away: the comparison can
/// tell accumulation from "a smaller batch".
fn accumulation_gives_the_large_batch_update<B: Backend>(b: &mut B) {
    let data = small_data();
    assert_ne!(data.train_len() % 24 % 6, 0, "the test wants an epoch ending on a short batch that is not whole micro-batches");
    for precision in [Precision::F32, Precision::F16, Precision::BF16] {
        if precision != Precision::F32 && b.amp_unavailable(precision.dtype16().unwrap()).is_some() {
            continue; // a backend without 16-bit compute refuses autocast by name (tested elsewhere)
        }
        let (whole, whole_report) = run(b, &data, &cfg(precision, 24, 1));
        let (micro, micro_report) = run(b, &data, &cfg(precision, 24, 4));
        let (small, _) = run(b, &data, &cfg(precision, 6, 1));
        assert_eq!(whole_report.steps, micro_report.steps, "{precision:?}: one optimizer step per batch");
        let diff = max_rel_diff(&micro, &whole);
        assert!(diff <= tolerance(precision), "{precision:?}: accumulated vs large batch differ by {diff:.2e}");
        let apart = max_rel_diff(&small, &whole);
        assert!(apart > 100.0 * tolerance(precision), "{precision:?}: batch 6 without accumulation is only {apart:.2e} away");
        let loss = |r: &TrainReport| r.epochs.last().unwrap().train_loss;
        assert!((loss(&micro_report) - loss(&whole_report)).abs() < 1e-3, "{precision:?}: the training loss counts every micro-batch");
    }
}

/// Under fp16's loss scaling, the overflow check covers every micro-batch's gradients: a scale
/// that overflows skips the same steps whether the batch ran whole or in micro-batches.
fn accumulation_skips_the_steps_the_large_batch_skips<B: Backend>(b: &mut B) {
    if b.amp_unavailable(DType::F16).is_some() {
        return;
    }
    let data = small_data();
    let with_scale = |accumulate| {
        let mut c = cfg(Precision::F16, 24, accumulate);
        c.amp.scaler.init_scale = 2f32.powi(40);
        c
    };
    let (whole_w, whole) = run(b, &data, &with_scale(1));
    let (micro_w, micro) = run(b, &data, &with_scale(4));
    let skipped = |r: &TrainReport| r.amp.as_ref().unwrap().skipped_steps.clone();
    assert!(!skipped(&whole).is_empty(), "a loss scale of 2^40 overflows fp16");
    assert_eq!(skipped(&micro), skipped(&whole));
    let diff = max_rel_diff(&micro_w, &whole_w);
    assert!(diff <= tolerance(Precision::F16), "accumulated vs large batch differ by {diff:.2e}");
}

backend_tests!(every: accumulation_gives_the_large_batch_update, accumulation_skips_the_steps_the_large_batch_skips);

#[test]
fn accumulation_settings_that_cannot_split_the_batch_are_refused() {
    let refused = |batch, accumulate| match cfg(Precision::F32, batch, accumulate).validate() {
        Err(Error::InvalidConfig(m)) => m,
        other => panic!("batch {batch} accumulate {accumulate}: {other:?}"),
    };
    let m = refused(10, 3);
    assert!(m.contains("multiple of 3") && m.contains("9 or 12"), "{m}");
    assert!(refused(2, 4).contains("multiple of 4 (4)"), "a batch smaller than accumulate");
    assert!(refused(8, 0).contains("at least 1"));
    assert!(cfg(Precision::F32, 12, 3).validate().is_ok());
}

/// Loss total, logits and every parameter's gradient after one forward and backward pass of
/// `model_cfg` on fixed inputs, with the hidden activations stored or recomputed.
fn gradients<B: Backend, P: Phases<B>>(
    b: &mut B,
    model_cfg: &MlpConfig,
    make: impl Fn(&mut B, &Mlp<B>) -> P,
    recompute: bool,
) -> (f64, Vec<u32>, Vec<Vec<u32>>) {
    let rows = 13;
    let x = random(rows * model_cfg.input, 8, -1.0, 1.0);
    let y: Vec<u32> = (0..rows as u32).map(|i| i % model_cfg.classes as u32).collect();
    let mut model = Mlp::new(b, model_cfg.clone(), Optimizer::new(OptimizerKind::Sgd, 0.1, 0.9, 0.0), 3).unwrap();
    let phases = make(b, &model);
    let mut step = Step::with_recompute(b, &model, phases, rows, recompute).unwrap();
    let (xt, yt) = step.inputs(b, &model, rows).unwrap();
    b.write_f32(xt, &x).unwrap();
    b.write_u32(yt, &y).unwrap();
    step.forward(b, &model).unwrap();
    step.backward(b, &mut model).unwrap();
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<u32>>();
    let logits = bits(b.read_f32(step.logits()).unwrap());
    let grads = model.params_mut().map(|p| bits(b.read_f32(&p.grad).unwrap())).collect::<Vec<_>>();
    (step.take_totals(b).unwrap().loss, logits, grads)
}

/// Recomputation runs the same kernels on the same values as the stored-activation path, so
/// the loss, the logits and every gradient are the same bits — for an MLP of four hidden
/// layers and a small CNN, in f32 and both autocast types.
fn recomputed_gradients_equal_the_stored_ones<B: Backend>(b: &mut B) {
    let mlp = MlpConfig { input: 21, hidden: vec![30, 17, 26, 9], classes: 6, conv: None };
    let cnn = MlpConfig { input: 64, hidden: vec![20], classes: 4, conv: Some(ConvConfig { image: [1, 8, 8], channels: vec![4, 6] }) };
    for model_cfg in [mlp, cnn] {
        if model_cfg.conv.is_some() && b.conv_unavailable().is_some() {
            continue;
        }
        let label = model_cfg.label();
        let stored = gradients(b, &model_cfg, |_, _| F32Phases, false);
        let recomputed = gradients(b, &model_cfg, |_, _| F32Phases, true);
        assert!(stored.2.iter().flatten().any(|&g| g != 0), "{label}: the gradients were computed");
        assert!(stored == recomputed, "{label} f32: recomputed gradients differ from the stored path's");
        for precision in [Precision::F16, Precision::BF16] {
            let dt = precision.dtype16().unwrap();
            if b.amp_unavailable(dt).is_some() {
                continue;
            }
            let amp = |b: &mut B, m: &Mlp<B>| Amp::new(b, m, AmpConfig::new(precision)).unwrap().unwrap();
            let stored = gradients(b, &model_cfg, amp, false);
            let recomputed = gradients(b, &model_cfg, amp, true);
            assert!(stored == recomputed, "{label} {precision:?}: recomputed gradients differ from the stored path's");
        }
    }
}

/// The activation category's measured peak over a run, bytes.
fn activation_peak<B: Backend>(b: &mut B, data: &Dataset, cfg: &TrainConfig) -> (u64, Vec<Vec<f32>>) {
    b.reset_memory_peaks();
    let (weights, report) = run(b, data, cfg);
    let peak = report.memory.categories.iter().find(|c| c.0 == MemCategory::Activations).map(|c| c.2).unwrap();
    (peak, weights)
}

/// Recomputation lowers the activations' measured peak (the ledger's), and trains to the same
/// weights; accumulation lowers it like the smaller batch it runs.
fn the_ladder_lowers_the_measured_activation_peak<B: Backend>(b: &mut B) {
    let data = small_data();
    for precision in [Precision::F32, Precision::F16] {
        if precision != Precision::F32 && b.amp_unavailable(DType::F16).is_some() {
            continue;
        }
        let deep = TrainConfig { hidden: vec![64, 64, 64, 64], epochs: 1, ..cfg(precision, 64, 1) };
        let (stored, stored_w) = activation_peak(b, &data, &deep);
        let (recomputed, recomputed_w) = activation_peak(b, &data, &TrainConfig { recompute: true, ..deep.clone() });
        let (accumulated, _) = activation_peak(b, &data, &TrainConfig { accumulate: 4, ..deep.clone() });
        assert!(recomputed * 10 < stored * 8, "{precision:?}: recomputing peaks at {recomputed} B of activations, storing at {stored} B");
        assert!(accumulated * 3 < stored, "{precision:?}: 4 micro-batches peak at {accumulated} B, the whole batch at {stored} B");
        assert_eq!(recomputed_w, stored_w, "{precision:?}: recomputation changes no value");
    }
}

backend_tests!(every: recomputed_gradients_equal_the_stored_ones, the_ladder_lowers_the_measured_activation_peak);
