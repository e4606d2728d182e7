//! Pipeline and model parallelism (`gpulab::parallel::pipeline`): the same gradients, so the
//! same weights, as the unpipelined model; measured bubbles in range; refusals that name the
//! setting and the limit.

use gpulab::data::{self, Dataset, batcher};
use gpulab::device::CpuBackend;
use gpulab::nn::{Mlp, MlpConfig, Workspace};
use gpulab::parallel::pipeline::{PipeConfig, train_pipeline};
use gpulab::train::TrainConfig;

/// Micro-batches add their gradients in a different order than one batch's GEMM sums its rows
/// (float32 is not associative): a few ulps per step, far below this after a few steps.
const TOLERANCE: f32 = 2e-5;
const STEPS: u64 = 4;

fn digits() -> Dataset {
    data::load(&"digits".parse().unwrap(), 42).unwrap()
}

fn cfg(batch: usize) -> TrainConfig {
    TrainConfig { hidden: vec![48, 24], batch, epochs: 1, lr: 0.05, ..Default::default() }
}

/// The unpipelined model, step by step: one batch, forward, backward, update.
fn unpipelined(data: &Dataset, cfg: &TrainConfig, steps: u64) -> Vec<Vec<f32>> {
    let mut b = CpuBackend::new();
    let arch = MlpConfig { input: data.features, hidden: cfg.hidden.clone(), classes: data.classes, conv: None };
    let mut model = Mlp::new(&mut b, arch.clone(), cfg.optimizer(), cfg.seed).unwrap();
    let mut ws = Workspace::new(&mut b, &arch, cfg.batch, true).unwrap();
    let order = batcher::epoch_order(data.train_len(), cfg.seed, 0);
    let (mut xb, mut yb) = (Vec::new(), Vec::new());
    for idx in order.chunks_exact(cfg.batch).take(steps as usize) {
        batcher::gather(&data.train_x, &data.train_y, data.features, idx, &mut xb, &mut yb);
        gpulab::tensor::prelude::CoreOps::write_f32(&mut b, &mut ws.x, &xb).unwrap();
        gpulab::tensor::prelude::CoreOps::write_u32(&mut b, &mut ws.y, &yb).unwrap();
        model.forward(&mut b, &mut ws).unwrap();
        model.backward(&mut b, &mut ws).unwrap();
        model.update(&mut b).unwrap();
    }
    model.read_parameters(&mut b).unwrap()
}

fn pipe(stages: usize, micro_batches: usize) -> PipeConfig {
    PipeConfig { stages, micro_batches, max_steps: Some(STEPS), timeline_steps: 2 }
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f32::max)
}

#[test]
fn pipeline_parallel_gives_the_same_weights_as_the_unpipelined_model() {
    let data = digits();
    let cfg = cfg(48);
    let want = unpipelined(&data, &cfg, STEPS);
    for m in [1, 2, 4] {
        let r = train_pipeline(&data, &cfg, &pipe(2, m)).unwrap_or_else(|e| panic!("M={m}: {e}"));
        assert_eq!((r.stages, r.steps, r.losses.len()), (2, STEPS, STEPS as usize));
        let d = max_diff(&r.params, &want);
        if m == 1 {
            // One micro-batch runs the very same operations, split over two threads.
            assert_eq!(d, 0.0, "plain model parallel must match bit for bit");
        }
        assert!(d <= TOLERANCE, "M={m}: weights differ by {d} after {STEPS} steps (tolerance {TOLERANCE})");
        assert!((0.0..1.0).contains(&r.bubble), "M={m}: bubble {}", r.bubble);
        assert!(r.losses.iter().all(|l| l.is_finite() && *l > 0.0), "{:?}", r.losses);
        for lane in ["stage 0 (layer 0)", "stage 1 (layers 1–2)"] {
            assert!(r.timeline.lanes.iter().any(|l| l == lane), "{lane} missing: {:?}", r.timeline.lanes);
        }
    }
}

#[test]
fn bad_pipeline_settings_name_the_setting_and_the_limit() {
    let data = digits();
    let err = |c: &TrainConfig, p: PipeConfig| train_pipeline(&data, c, &p).expect_err("must refuse").to_string();
    let e = err(&cfg(48), pipe(2, 0));
    assert!(e.contains("micro_batches") && e.contains("at least 1"), "{e}");
    let e = err(&cfg(48), pipe(4, 1));
    assert!(e.contains("pipeline_stages 4") && e.contains("3 layers"), "{e}");
    let e = err(&cfg(50), pipe(2, 4));
    assert!(e.contains("batch 50") && e.contains("micro_batches 4") && e.contains("e.g. 48"), "{e}");
    let e = err(&cfg(48), pipe(0, 1));
    assert!(e.contains("pipeline_stages must be at least 1"), "{e}");
}
