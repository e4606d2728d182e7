//! The chapter's memory ladder in training: gradient accumulation (N micro-batches of B/N
//! give the large batch's update, up to summation order) and activation recomputation
//! (gradients equal to the stored-activation path, a lower activation peak), on every backend,
//! in f32 and autocast.

use gpulab::data::{self, Dataset, DatasetSpec};
use gpulab::error::{Error, Result};
use gpulab::nn::{AmpConfig, Mlp, Precision};
use gpulab::tensor::{DType, prelude::*};
use gpulab::train::{Inline, NullSink, StepDone, TrainConfig, TrainHooks, TrainReport, train_with};

use crate::common::backend_tests;

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
