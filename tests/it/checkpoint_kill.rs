//! The real crash: the gpulab binary trains as a child process and is killed with SIGKILL at
//! random moments — including right as a checkpoint write starts — twenty times, resuming
//! each time. The stitched loss sequence and the final weights equal an uninterrupted run's
//! exactly (CPU backend); so does a killed and resumed run of the small CNN.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gpulab::checkpoint::child_process::{ChildProcess, Line};
use gpulab::checkpoint::{ChildSpec, Policy, store};
use gpulab::nn::OptimizerKind;
use gpulab::train::{TrainConfig, TrainEvent};
use rand::{Rng, SeedableRng};

fn spec(dir: &Path, every: u64) -> ChildSpec {
    ChildSpec {
        backend: "cpu".into(),
        dataset: "digits".into(),
        // Wide enough that a checkpoint write takes a moment to land a kill in.
        cfg: TrainConfig {
            hidden: vec![256, 256],
            batch: 48,
            epochs: 4,
            lr: 0.002,
            optimizer: OptimizerKind::AdamW,
            log_every: 1,
            ..TrainConfig::default()
        },
        dir: dir.into(),
        policy: Policy { every_steps: every, every_epochs: 0, keep_last: 2, at_end: true },
        resume: false,
    }
}

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_gpulab"))
}

fn next(w: &mut ChildProcess) -> Option<TrainEvent> {
    match w.next(Duration::from_secs(120)) {
        Some(Line::Event(e)) => Some(e),
        Some(Line::Unexpected(l)) => panic!("unexpected output from the child: {l:?}"),
        None if w.output_ended() => None,
        None => panic!("the child went silent for 120 s: {}", w.stderr_tail()),
    }
}

/// Runs `spec` to the end in a child; returns its losses.
fn run_to_end(spec: &ChildSpec) -> BTreeMap<u64, f64> {
    let mut w = ChildProcess::spawn(exe(), &spec.args()).unwrap();
    let mut losses = BTreeMap::new();
    let mut finished = false;
    while let Some(e) = next(&mut w) {
        match e {
            TrainEvent::Progress { step, loss, .. } => {
                losses.insert(step, loss);
            }
            TrainEvent::Finished { .. } => finished = true,
            TrainEvent::Failed { message } => panic!("child failed: {message}"),
            _ => {}
        }
    }
    assert!(w.wait().unwrap().success() && finished, "child did not finish: {}", w.stderr_tail());
    losses
}

#[test]
fn sigkill_at_random_moments_twenty_times_then_resume_is_bit_exact() {
    let (ref_dir, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let reference = run_to_end(&spec(ref_dir.path(), 0));
    let total = *reference.keys().last().unwrap();

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0xC0FFEE);
    let mut run = spec(dir.path(), 4);
    let mut seen: BTreeMap<u64, f64> = BTreeMap::new();
    let (mut kills, mut at_write_start, mut tmp_left) = (0, 0, 0);
    for round in 0..20 {
        let mut w = ChildProcess::spawn(exe(), &run.args()).unwrap();
        // Every third round dies the moment a checkpoint write starts; the others after a
        // random number of steps, plus a random sub-millisecond delay.
        let at_save = round % 3 == 2;
        let after_steps = rng.random_range(1..12u64);
        let delay_us = rng.random_range(0..800u64);
        let mut steps_here = 0;
        let mut killed = false;
        while let Some(e) = next(&mut w) {
            match e {
                TrainEvent::Progress { step, loss, .. } => {
                    // A step redone after a resume must give the very same loss.
                    if let Some(old) = seen.insert(step, loss) {
                        assert_eq!(old.to_bits(), loss.to_bits(), "round {round}: step {step} redone with a different loss");
                    }
                    steps_here += 1;
                    if !at_save && steps_here >= after_steps {
                        std::thread::sleep(Duration::from_micros(delay_us));
                        killed = true;
                    }
                }
                TrainEvent::Saving { .. } if at_save && steps_here > 0 => {
                    at_write_start += 1;
                    killed = true;
                }
                TrainEvent::Failed { message } => panic!("round {round}: child failed: {message}"),
                _ => {}
            }
            if killed {
                w.kill().unwrap();
                kills += 1;
                break;
            }
        }
        // The child may have run (and checkpointed) further steps while the kill was on its
        // way: their lines are still in the pipe. Read them, or a resume past them would look
        // like steps that never ran.
        if killed {
            while let Some(e) = next(&mut w) {
                if let TrainEvent::Progress { step, loss, .. } = e
                    && let Some(old) = seen.insert(step, loss)
                {
                    assert_eq!(old.to_bits(), loss.to_bits(), "round {round}: step {step} redone with a different loss");
                }
            }
        }
        if !killed {
            w.wait().unwrap();
        }
        tmp_left += std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".tmp-"))
            .count();
        // Every checkpoint left behind validates: a kill never leaves a half-written one under a real name.
        for p in store::list(dir.path()).unwrap() {
            store::read(&p).unwrap_or_else(|e| panic!("round {round}: a kill left a bad checkpoint: {e}"));
        }
        run.resume = true;
    }
    eprintln!("{kills} kills, {at_write_start} as a checkpoint write started, {tmp_left} left a partial temporary file");
    assert!(kills >= 15, "only {kills} of 20 rounds were killed; the run is too short for the test");
    assert!(at_write_start >= 5);
    // The signal beat the write (temporary file, fsync, rename) at least once; those files were
    // never taken for checkpoints and the next writer removed them.
    assert!(tmp_left >= 1, "no kill landed during a checkpoint write");

    // The last resume runs to the end.
    for (step, loss) in run_to_end(&run) {
        if let Some(old) = seen.insert(step, loss) {
            assert_eq!(old.to_bits(), loss.to_bits(), "step {step} redone with a different loss");
        }
    }
    assert_eq!(seen.len() as u64, total, "some steps never ran");
    for (step, want) in &reference {
        assert_eq!(seen[step].to_bits(), want.to_bits(), "loss at step {step}: {} vs reference {want}", seen[step]);
    }
    let a = store::read(&store::list(ref_dir.path()).unwrap()[0]).unwrap();
    let b = store::read(&store::list(dir.path()).unwrap()[0]).unwrap();
    assert_eq!(a.meta.position, b.meta.position);
    assert!(a.tensors == b.tensors, "final weights or optimizer state differ from the uninterrupted run");
}

#[test]
fn a_parent_survives_garbage_and_a_child_that_dies_at_once() {
    // Not gpulab at all: `sh` prints garbage and exits non-zero.
    if cfg!(unix) {
        let mut w =
            ChildProcess::spawn(Path::new("sh"), &["-c".into(), "echo not-json; echo '{\"event\":\"nope\"}'; exit 3".into()]).unwrap();
        let mut lines = Vec::new();
        while let Some(l) = w.next(Duration::from_secs(10)) {
            lines.push(l);
        }
        assert!(lines.iter().all(|l| matches!(l, Line::Unexpected(_))), "{lines:?}");
        assert_eq!(lines.len(), 2);
    }
    // gpulab refusing its arguments: the parent sees a failed exit and the error on stderr.
    let mut bad = spec(Path::new("/nonexistent/dir/for/gpulab"), 4);
    bad.cfg.batch = 0;
    let mut w = ChildProcess::spawn(exe(), &bad.args()).unwrap();
    while w.next(Duration::from_secs(30)).is_some() {}
    assert!(!w.wait().unwrap().success());
    assert!(w.stderr_tail().contains("batch size"), "{}", w.stderr_tail());
}

#[test]
fn a_save_requested_on_stdin_is_written_after_the_current_step() {
    let dir = tempfile::tempdir().unwrap();
    // The wide model's 120 steps leave the child's stdin reader ample time, even on a busy machine.
    let s = spec(dir.path(), 0);
    let mut w = ChildProcess::spawn(exe(), &s.args()).unwrap();
    let mut saved = Vec::new();
    let mut last_step = 0;
    while let Some(e) = next(&mut w) {
        match e {
            TrainEvent::Progress { step, .. } => {
                if step == 1 {
                    w.request_save().unwrap();
                }
                last_step = step;
            }
            TrainEvent::Saved { step, .. } => saved.push(step),
            _ => {}
        }
    }
    assert!(w.wait().unwrap().success(), "{}", w.stderr_tail());
    // With no interval, only the requested checkpoint (after step 1) and the final one.
    assert_eq!(saved.len(), 2, "{saved:?}");
    assert!(saved[0] >= 1 && saved[0] < last_step, "{saved:?}");
    assert_eq!(saved[1], last_step);
}

#[test]
fn a_cnn_killed_mid_run_resumes_bit_exact_with_its_convolutions() {
    use gpulab::nn::ModelKind;
    // `gpulab train --model cnn --checkpoint-dir …` on two-channel 8×8 shapes, AdamW.
    let cnn = |dir: &Path, every: u64| {
        let mut s = spec(dir, every);
        s.dataset = "shapes:res=8,channels=2,n=240".into();
        s.cfg = TrainConfig {
            model: ModelKind::Cnn,
            hidden: vec![16],
            batch: 16,
            epochs: 2,
            lr: 0.002,
            optimizer: OptimizerKind::AdamW,
            log_every: 1,
            ..TrainConfig::default()
        };
        s
    };
    let (ref_dir, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let reference = run_to_end(&cnn(ref_dir.path(), 0));
    let total = *reference.keys().last().unwrap();
    assert!(total >= 16, "only {total} steps");

    let mut run = cnn(dir.path(), 4);
    assert!(run.args().windows(2).any(|a| a == ["--model", "cnn"]), "{:?}", run.args());
    let mut w = ChildProcess::spawn(exe(), &run.args()).unwrap();
    let mut seen: BTreeMap<u64, f64> = BTreeMap::new();
    let mut record = |step: u64, loss: f64| {
        if let Some(old) = seen.insert(step, loss) {
            assert_eq!(old.to_bits(), loss.to_bits(), "step {step} redone with a different loss");
        }
    };
    while let Some(e) = next(&mut w) {
        match e {
            TrainEvent::Progress { step, loss, .. } => {
                record(step, loss);
                if step >= 9 {
                    w.kill().unwrap();
                    break;
                }
            }
            TrainEvent::Failed { message } => panic!("child failed: {message}"),
            _ => {}
        }
    }
    // Steps the child ran while the kill was on its way.
    while let Some(e) = next(&mut w) {
        if let TrainEvent::Progress { step, loss, .. } = e {
            record(step, loss);
        }
    }
    let resumed_from = store::list(dir.path()).unwrap().first().and_then(|p| store::step_of(p)).expect("a checkpoint before the kill");
    assert!(resumed_from >= 8 && resumed_from < total, "newest checkpoint at step {resumed_from}");

    run.resume = true;
    for (step, loss) in run_to_end(&run) {
        record(step, loss);
    }
    assert_eq!(seen.len() as u64, total, "some steps never ran");
    for (step, want) in &reference {
        assert_eq!(seen[step].to_bits(), want.to_bits(), "loss at step {step}: {} vs reference {want}", seen[step]);
    }
    let a = store::read(&store::list(ref_dir.path()).unwrap()[0]).unwrap();
    let b = store::read(&store::list(dir.path()).unwrap()[0]).unwrap();
    assert_eq!(b.meta.architecture.conv.as_ref().map(|c| c.image), Some([2, 8, 8]), "the checkpoint records the CNN and its images");
    assert!(b.tensors.contains_key("conv1.weight") && b.tensors.contains_key("optimizer.exp_avg_sq.conv0.bias"));
    assert_eq!(a.meta.position, b.meta.position);
    assert!(a.tensors == b.tensors, "final weights or optimizer state differ from the uninterrupted run");
}
