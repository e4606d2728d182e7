//! A real model on real data: accuracy on the embedded digits set on every backend, CPU/GPU
//! agreement of a training step, determinism, and refusals of settings that cannot train.

use gpulab::data::{self, DatasetSpec};
use gpulab::device::CpuBackend;
use gpulab::nn::{Mlp, MlpConfig, Optimizer, OptimizerKind};
use gpulab::tensor::prelude::*;
use gpulab::train::{F32Phases, NullSink, Step, TrainConfig, TrainEvent, train};

use crate::common::{assert_close, backend_tests, random, with_gpu};

fn digits_config() -> TrainConfig {
    TrainConfig { hidden: vec![128, 64], batch: 32, epochs: 12, lr: 0.05, log_every: 10, ..TrainConfig::default() }
}

#[test]
fn digits_reaches_95_percent_on_cpu() {
    let data = data::load(&DatasetSpec::Digits, 42).unwrap();
    let report = train(&mut CpuBackend::new(), &data, &digits_config(), &mut NullSink).unwrap();
    assert!(report.final_val_accuracy >= 0.95, "validation accuracy {:.3}", report.final_val_accuracy);
    assert!(report.epochs.windows(2).all(|w| w[1].epoch == w[0].epoch + 1));
    assert!(report.gpu_busy_s.is_none(), "the CPU has no GPU timestamps");
}

fn digits_reaches_95_percent_on_a_gpu_with_timestamps<B: Backend>(gpu: &mut B) {
    let data = data::load(&DatasetSpec::Digits, 42).unwrap();
    let report = train(gpu, &data, &digits_config(), &mut NullSink).unwrap();
    assert!(report.final_val_accuracy >= 0.95, "validation accuracy {:.3}", report.final_val_accuracy);
    if report.backend.timestamps {
        let busy = report.gpu_busy_s.expect("timestamps supported, so busy time is measured");
        assert!(busy > 0.0 && busy <= report.train_wall_s * 1.05, "busy {busy} s of {} s", report.train_wall_s);
    }
}

#[test]
fn adamw_trains_digits_on_cpu() {
    let data = data::load(&DatasetSpec::Digits, 1).unwrap();
    let cfg = TrainConfig { optimizer: OptimizerKind::AdamW, lr: 1e-3, weight_decay: 0.01, epochs: 10, ..digits_config() };
    let report = train(&mut CpuBackend::new(), &data, &cfg, &mut NullSink).unwrap();
    assert!(report.final_val_accuracy >= 0.93, "validation accuracy {:.3}", report.final_val_accuracy);
}

/// One step (forward, loss, backward, update) from the same seed agrees on CPU and GPU.
fn one_step<B: Backend>(b: &mut B, opt: Optimizer, x: &[f32], y: &[u32]) -> (Vec<Vec<f32>>, f32) {
    let cfg = MlpConfig { input: 37, hidden: vec![29, 18], classes: 7, conv: None };
    let mut model = Mlp::new(b, cfg.clone(), opt, 9).unwrap();
    let mut step = Step::new(b, &model, F32Phases, 23).unwrap();
    let (xt, yt) = step.inputs(b, &model, 23).unwrap();
    b.write_f32(xt, x).unwrap();
    b.write_u32(yt, y).unwrap();
    step.train(b, &mut model, 1).unwrap();
    let loss = step.take_totals(b).unwrap().loss;
    (model.read_parameters(b).unwrap(), loss as f32)
}

fn one_training_step_agrees_with_the_cpu<B: Backend>(gpu: &mut B) {
    let x = random(23 * 37, 5, -1.0, 1.0);
    let y: Vec<u32> = (0..23).map(|i| i % 7).collect();
    for opt in [Optimizer::new(OptimizerKind::Sgd, 0.1, 0.9, 1e-4), Optimizer::new(OptimizerKind::AdamW, 1e-2, 0.0, 0.01)] {
        let (want, want_loss) = one_step(&mut CpuBackend::new(), opt, &x, &y);
        let (got, got_loss) = one_step(gpu, opt, &x, &y);
        assert_close("loss", &[got_loss], &[want_loss], 1e-5);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("{opt:?} parameter tensor {i}"), g, w, 1e-5);
        }
    }
}

backend_tests!(vs_cpu: digits_reaches_95_percent_on_a_gpu_with_timestamps, one_training_step_agrees_with_the_cpu);

#[test]
fn same_seed_gives_identical_cpu_runs() {
    let data = data::load(&DatasetSpec::Digits, 3).unwrap();
    let cfg = TrainConfig { epochs: 2, ..digits_config() };
    let losses = || {
        let mut seen = Vec::new();
        let mut sink = |ev: TrainEvent| {
            if let TrainEvent::Progress { loss, .. } = ev {
                seen.push(loss);
            }
        };
        train(&mut CpuBackend::new(), &data, &cfg, &mut sink).unwrap();
        seen
    };
    let (a, b) = (losses(), losses());
    assert!(!a.is_empty());
    assert_eq!(a, b, "bit-identical loss sequence");
}

#[test]
fn same_seed_gives_same_initial_weights_on_every_backend() {
    with_gpu("same_seed_gives_same_initial_weights_on_every_backend", |gpu| {
        let cfg = MlpConfig { input: 64, hidden: vec![32], classes: 10, conv: None };
        let opt = Optimizer::new(OptimizerKind::Sgd, 0.1, 0.9, 0.0);
        let cpu = Mlp::new(&mut CpuBackend::new(), cfg.clone(), opt, 77).unwrap().read_parameters(&mut CpuBackend::new());
        // Reading through a different CpuBackend works because tensors carry their data.
        let cpu = cpu.unwrap();
        let g = Mlp::new(gpu, cfg, opt, 77).unwrap().read_parameters(gpu).unwrap();
        assert_eq!(cpu, g);
    });
}

#[test]
fn invalid_settings_are_refused_with_a_reason() {
    let data = data::load(&DatasetSpec::Digits, 42).unwrap();
    let cases: Vec<(TrainConfig, &str)> = vec![
        (TrainConfig { batch: 0, ..digits_config() }, "batch"),
        (TrainConfig { lr: f32::NAN, ..digits_config() }, "learning rate"),
        (TrainConfig { lr: -0.1, ..digits_config() }, "learning rate"),
        (TrainConfig { epochs: 0, ..digits_config() }, "epochs"),
        (TrainConfig { momentum: 1.5, ..digits_config() }, "momentum"),
        (TrainConfig { hidden: vec![64, 0], ..digits_config() }, "hidden"),
    ];
    for (cfg, word) in cases {
        let err = train(&mut CpuBackend::new(), &data, &cfg, &mut NullSink).unwrap_err().to_string();
        assert!(err.contains(word), "expected {word:?} in {err:?}");
    }
}

#[test]
fn a_diverging_run_stops_with_a_clear_error() {
    let data = data::load(&DatasetSpec::Digits, 42).unwrap();
    let cfg = TrainConfig { lr: 1e6, epochs: 3, ..digits_config() };
    let err = train(&mut CpuBackend::new(), &data, &cfg, &mut NullSink).unwrap_err().to_string();
    assert!(err.contains("diverged") && err.contains("lower the learning rate"), "{err}");
}

#[test]
fn stop_request_ends_the_run_early() {
    struct StopAfter(usize, gpulab::stop::Stop);
    impl gpulab::train::TrainSink for StopAfter {
        fn event(&mut self, ev: TrainEvent) {
            if let TrainEvent::Progress { .. } = ev {
                self.0 = self.0.saturating_sub(1);
                if self.0 == 0 {
                    self.1.set();
                }
            }
        }
        fn stop(&self) -> &gpulab::stop::Stop {
            &self.1
        }
    }
    let data = data::load(&DatasetSpec::Digits, 42).unwrap();
    let report = train(&mut CpuBackend::new(), &data, &digits_config(), &mut StopAfter(2, Default::default())).unwrap();
    assert!(report.stopped_early);
    assert!(report.epochs.is_empty(), "stopped inside the first epoch");
}
