//! Checkpoint files: every kind of damage gives its named error, the resume falls back to the
//! newest checkpoint that validates, and a resumed in-process run matches an uninterrupted one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use gpulab::checkpoint::{CheckpointError, Damage, Policy, ChildEvent, ChildSpec, damage, format, run_child, store};
use gpulab::nn::{MlpConfig, OptimizerKind};
use gpulab::train::TrainConfig;

pub fn small_spec(dir: &Path, optimizer: OptimizerKind, every: u64) -> ChildSpec {
    let lr = if optimizer == OptimizerKind::AdamW { 0.002 } else { 0.05 };
    ChildSpec {
        backend: "cpu".into(),
        dataset: "digits".into(),
        cfg: TrainConfig { hidden: vec![24, 16], batch: 40, epochs: 2, lr, optimizer, log_every: 1, ..TrainConfig::default() },
        dir: dir.into(),
        policy: Policy { every_steps: every, every_epochs: 0, keep_last: 4, at_end: true },
        resume: false,
    }
}

/// Trains `spec` in this process; returns (step, loss) per step and the checkpoints written.
pub fn train(spec: &ChildSpec) -> (Vec<(u64, f64)>, Vec<ChildEvent>) {
    let mut events = Vec::new();
    let mut emit = |e: ChildEvent| events.push(e);
    run_child(spec, &mut emit, Arc::new(AtomicBool::new(false))).expect("training runs");
    let losses = events.iter().filter_map(|e| if let ChildEvent::Step { step, loss, .. } = e { Some((*step, *loss)) } else { None }).collect();
    (losses, events)
}

fn arch() -> MlpConfig {
    MlpConfig { input: 64, hidden: vec![24, 16], classes: 10, conv: None }
}

fn newest(dir: &Path) -> PathBuf {
    store::list(dir).unwrap().into_iter().next().expect("a checkpoint")
}

fn copy_of(src: &Path, dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::copy(src, &p).unwrap();
    p
}

#[test]
fn checkpoint_holds_the_documented_tensors_and_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = small_spec(tmp.path(), OptimizerKind::AdamW, 10);
    train(&spec);
    let ck = store::load(&newest(tmp.path()), &arch(), OptimizerKind::AdamW).unwrap();
    let names: Vec<&str> = ck.tensors.keys().map(|s| s.as_str()).collect();
    for n in ["layers.0.weight", "layers.2.bias", "optimizer.exp_avg.layers.1.weight", "optimizer.exp_avg_sq.layers.0.bias"] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    assert_eq!(ck.tensors["layers.0.weight"].shape, vec![64, 24]);
    assert_eq!(ck.tensors["layers.2.bias"].shape, vec![10]);
    assert_eq!(ck.meta.precision, "fp32");
    assert_eq!(ck.meta.hyperparameters, spec.cfg);
    assert_eq!(ck.meta.rng.seed, spec.cfg.seed);
    // AdamW's step counter is the step count (one update per step).
    assert_eq!(ck.meta.optimizer_step as u64, ck.meta.position.step);
    assert!(ck.meta.grad_scaler.is_none());
    // Keep-last-K: 4 kept of the ones written.
    assert_eq!(store::list(tmp.path()).unwrap().len(), 4);
}

#[test]
fn truncation_at_any_offset_is_named_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    train(&small_spec(tmp.path(), OptimizerKind::Sgd, 50));
    let good = std::fs::read(newest(tmp.path())).unwrap();
    let header_end = 8 + u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    for cut in [0, 3, 8, 9, header_end / 2, header_end - 1, header_end, header_end + 1, good.len() / 2, good.len() - 1] {
        let p = tmp.path().join("cut.safetensors");
        std::fs::write(&p, &good[..cut]).unwrap();
        match store::load(&p, &arch(), OptimizerKind::Sgd) {
            Err(CheckpointError::Truncated { .. }) => {}
            other => panic!("cut at {cut} of {}: expected Truncated, got {other:?}", good.len()),
        }
    }
}

#[test]
fn flipped_bytes_are_caught_by_the_header_check_or_the_checksum() {
    let tmp = tempfile::tempdir().unwrap();
    train(&small_spec(tmp.path(), OptimizerKind::Sgd, 50));
    let src = newest(tmp.path());
    let p = copy_of(&src, tmp.path(), "x.bin");
    damage(&p, Damage::FlipHeader).unwrap();
    assert!(matches!(store::load(&p, &arch(), OptimizerKind::Sgd), Err(CheckpointError::BadHeader { .. })));
    let p = copy_of(&src, tmp.path(), "x.bin");
    damage(&p, Damage::FlipData).unwrap();
    assert!(matches!(store::load(&p, &arch(), OptimizerKind::Sgd), Err(CheckpointError::ChecksumMismatch { .. })));

    // A flipped bit anywhere, header or data, is refused: never loaded as if it were good.
    let good = std::fs::read(&src).unwrap();
    let stride = (good.len() / 97).max(1);
    for at in (0..good.len()).step_by(stride).chain([8, 20, 100]) {
        let mut bad = good.clone();
        bad[at] ^= 0x04;
        std::fs::write(&p, &bad).unwrap();
        let e = store::load(&p, &arch(), OptimizerKind::Sgd).expect_err(&format!("a flip at byte {at} loaded"));
        assert!(
            // A flip inside a metadata key or a tensor name (where it lands depends on the
            // header's length) is refused as bad metadata or a missing tensor instead.
            matches!(
                e,
                CheckpointError::BadHeader { .. }
                    | CheckpointError::ChecksumMismatch { .. }
                    | CheckpointError::Truncated { .. }
                    | CheckpointError::BadMetadata { .. }
                    | CheckpointError::MissingTensor { .. }
            ),
            "flip at {at}: unexpected {e}"
        );
    }
    // A metadata value inside the header (the step) changed: the checksum covers it.
    let at = find(&good, b"\"step\":\"").unwrap() + 8;
    let mut bad = good.clone();
    bad[at] = if bad[at] == b'1' { b'2' } else { b'1' };
    std::fs::write(&p, &bad).unwrap();
    assert!(matches!(store::load(&p, &arch(), OptimizerKind::Sgd), Err(CheckpointError::ChecksumMismatch { .. })));
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn wrong_architecture_missing_tensor_and_wrong_shape_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    train(&small_spec(tmp.path(), OptimizerKind::Sgd, 50));
    let p = newest(tmp.path());
    let other = MlpConfig { input: 64, hidden: vec![32], classes: 10, conv: None };
    assert!(matches!(store::load(&p, &other, OptimizerKind::Sgd), Err(CheckpointError::ArchitectureMismatch { .. })));
    // SGD state is momentum; an AdamW run needs moments the file does not have.
    assert!(matches!(store::load(&p, &arch(), OptimizerKind::AdamW), Err(CheckpointError::MissingTensor { .. })));

    // Re-encoded (valid checksum) without a tensor, and with a tensor of the wrong shape.
    let ck = store::read(&p).unwrap();
    let mut tensors = ck.tensors.clone();
    tensors.remove("layers.1.bias");
    let q = tmp.path().join("missing.bin");
    std::fs::write(&q, format::encode(&ck.meta, &tensors).unwrap()).unwrap();
    match store::load(&q, &arch(), OptimizerKind::Sgd) {
        Err(CheckpointError::MissingTensor { name, .. }) => assert_eq!(name, "layers.1.bias"),
        other => panic!("expected MissingTensor, got {other:?}"),
    }
    let mut tensors = ck.tensors.clone();
    tensors.insert("layers.1.bias".into(), format::NamedTensor::f32(vec![2, 8], vec![0.0; 16]));
    std::fs::write(&q, format::encode(&ck.meta, &tensors).unwrap()).unwrap();
    assert!(matches!(store::load(&q, &arch(), OptimizerKind::Sgd), Err(CheckpointError::ShapeMismatch { .. })));
}

#[test]
fn resume_falls_back_past_damaged_checkpoints_and_still_matches_the_reference() {
    let (ref_dir, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (want, _) = train(&small_spec(ref_dir.path(), OptimizerKind::AdamW, 0));
    let want_final = store::read(&newest(ref_dir.path())).unwrap();

    // A run that "crashed" after its checkpoints at 10, 20, 30: keep those, then damage two.
    let mut spec = small_spec(dir.path(), OptimizerKind::AdamW, 10);
    train(&spec);
    let all = store::list(dir.path()).unwrap();
    std::fs::remove_file(&all[0]).unwrap(); // the final one: as if it was never written
    let kept = store::list(dir.path()).unwrap();
    damage(&kept[0], Damage::Truncate(0.3)).unwrap();
    damage(&kept[1], Damage::FlipData).unwrap();

    let (found, skipped) = store::newest_valid(dir.path(), &arch(), OptimizerKind::AdamW).unwrap();
    let kinds: Vec<&str> = skipped.iter().map(|s| s.kind).collect();
    assert_eq!(kinds, ["truncated", "checksum mismatch"]);
    let (path, ck) = found.expect("an older checkpoint validates");
    assert_eq!(path, kept[2]);

    spec.resume = true;
    let (got, events) = train(&spec);
    assert!(events.iter().filter(|e| matches!(e, ChildEvent::Skipped { .. })).count() == 2);
    assert_eq!(got.first().map(|l| l.0), Some(ck.meta.position.step + 1), "resumed at the wrong step");
    for (step, loss) in &got {
        let w = want[*step as usize - 1];
        assert_eq!((w.0, w.1.to_bits()), (*step, loss.to_bits()), "loss at step {step} differs: {loss} vs {}", w.1);
    }
    assert_eq!(store::read(&newest(dir.path())).unwrap().tensors, want_final.tensors, "final weights differ");
}

#[test]
fn a_fresh_run_refuses_a_folder_that_already_holds_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    train(&small_spec(tmp.path(), OptimizerKind::Sgd, 50));
    let mut emit = |_e: ChildEvent| {};
    let err = run_child(&small_spec(tmp.path(), OptimizerKind::Sgd, 50), &mut emit, Arc::new(AtomicBool::new(false))).unwrap_err();
    assert!(err.to_string().contains("already holds checkpoints"), "{err}");
}

#[test]
fn every_e_epochs_saves_at_epoch_ends_only() {
    let tmp = tempfile::tempdir().unwrap();
    let mut spec = small_spec(tmp.path(), OptimizerKind::Sgd, 0);
    spec.policy.every_epochs = 1;
    spec.policy.at_end = false;
    let (losses, events) = train(&spec);
    let per_epoch = losses.len() as u64 / 2;
    let saved: Vec<u64> = events.iter().filter_map(|e| if let ChildEvent::Saved { step, .. } = e { Some(*step) } else { None }).collect();
    assert_eq!(saved, [per_epoch, 2 * per_epoch]);
    let ck = store::read(&newest(tmp.path())).unwrap();
    assert_eq!((ck.meta.position.epoch, ck.meta.position.batch), (2, 0), "the loader continues at the next epoch's first batch");
}

#[test]
fn fp16_resume_restores_the_loss_scaler_and_matches_the_reference() {
    use gpulab::nn::{AmpConfig, GradScalerState, Precision};
    // A short growth interval and a large initial scale make the scaler back off and grow
    // within a few steps, so a resume that forgot its state would scale differently.
    let fp16 = |spec: &mut ChildSpec| {
        let mut amp = AmpConfig::new(Precision::F16);
        amp.scaler.init_scale = 1048576.0;
        amp.scaler.growth_interval = 3;
        spec.cfg.amp = amp;
    };
    let (ref_dir, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut reference = small_spec(ref_dir.path(), OptimizerKind::AdamW, 0);
    fp16(&mut reference);
    let (want, _) = train(&reference);
    let want_final = store::read(&newest(ref_dir.path())).unwrap();

    let mut spec = small_spec(dir.path(), OptimizerKind::AdamW, 10);
    fp16(&mut spec);
    train(&spec);
    std::fs::remove_file(newest(dir.path())).unwrap(); // crashed before the final save
    let ck = store::read(&newest(dir.path())).unwrap();
    assert_eq!(ck.meta.precision, "fp16");
    let state: GradScalerState = serde_json::from_value(ck.meta.grad_scaler.clone().expect("scaler state saved")).unwrap();
    assert!(state != GradScalerState { scale: 1048576.0, growth_tracker: 0 }, "the scaler state should have moved by step {}: {state:?}", ck.meta.position.step);

    spec.resume = true;
    let (got, _) = train(&spec);
    assert_eq!(got.first().map(|l| l.0), Some(ck.meta.position.step + 1));
    for (step, loss) in &got {
        let w = want[*step as usize - 1];
        assert_eq!((w.0, w.1.to_bits()), (*step, loss.to_bits()), "loss at step {step} differs: {loss} vs {}", w.1);
    }
    assert_eq!(store::read(&newest(dir.path())).unwrap().tensors, want_final.tensors, "final weights differ");

    // Resuming that folder as an fp32 run is refused by name.
    let mut as_f32 = small_spec(dir.path(), OptimizerKind::AdamW, 10);
    as_f32.resume = true;
    let mut emit = |_e: ChildEvent| {};
    let err = run_child(&as_f32, &mut emit, Arc::new(AtomicBool::new(false))).unwrap_err().to_string();
    assert!(err.contains("fp16") && err.contains("fp32"), "{err}");
}
