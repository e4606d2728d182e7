//! Exercise 5: train in a child process with checkpoints, kill it for real (SIGKILL) at a
//! chosen or random step, optionally damage the newest checkpoint, resume, and compare the
//! loss sequence and final weights with an uninterrupted run of the same seed.

mod follow;
mod report;
mod verdict;

use std::path::{Path, PathBuf};

use rand::Rng;

use super::Exercise;
use super::common;
use super::settings::checkpointing::Config;
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink};
use follow::{ChildLog, follow};
use gpulab_core::error::{Error, Result};
use gpulab_systems::checkpoint::child_process::{ChildProcess, gpulab_exe};
use gpulab_systems::checkpoint::{ChildSpec, Damage, Policy, damage, store};
use gpulab_systems::report::Report;

pub struct CheckpointLab;

/// What the three child processes and the damage step produced.
pub struct Runs {
    pub reference: ChildLog,
    pub crashed: ChildLog,
    pub resumed: Option<ChildLog>,
    /// What was done to the newest checkpoint before resuming, and to which file.
    pub damage: Option<(String, String)>,
    pub crash_at: u64,
    pub every: u64,
    /// Final weights: (identical, max |difference|), when both runs finished.
    pub weights: Option<(bool, f64)>,
    pub folder: PathBuf,
    pub kept_folder: bool,
}

impl Exercise for CheckpointLab {
    fn id(&self) -> &'static str {
        "checkpoint"
    }
    fn number(&self) -> u32 {
        5
    }
    fn title(&self) -> &'static str {
        "Checkpointing through a real crash"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../../lessons/05-checkpointing.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[("backend", "cpu"), ("epochs", "1"), ("hidden", "16"), ("checkpoint_every", "6"), ("crash_at", "20"), ("corrupt", "truncate")]
    }
    /// The mean checkpoint write time: what differs from machine to machine (disk, fsync).
    fn key_figure<'r>(&self, report: &'r Report) -> Option<&'r gpulab_systems::report::Figure> {
        common::figure_or_first(report, "mean checkpoint write")
    }

    fn live_charts(&self) -> Vec<crate::LiveChartSpec> {
        let mut c = vec![common::loss_live_chart()];
        c.extend(crate::watch::live_charts());
        c
    }
    fn settings(&self) -> Settings {
        let s = Settings::default().add(
            "backend",
            "Backend",
            &format!("Where the training process trains: {} (cpu: bit-exact resume)", gpulab_core::device::registry::spellings()),
            Value::Devices(vec!["cpu".into()]),
        );
        common::model_setting(common::training_settings(s, "digits", &[64, 32], 32, 3))
            .add("checkpoint_every", "Checkpoint every (steps)", "Save a checkpoint every N steps (0 = only at epoch ends)", settings::int(20, 0, 1_000_000))
            .add("checkpoint_every_epochs", "Checkpoint every (epochs)", "Also save every E epochs (0 = not by epochs)", settings::int(0, 0, 1000))
            .add("keep_last", "Keep last", "Checkpoints kept on disk; older ones are deleted", settings::int(3, 1, 1000))
            .add("crash_at", "Crash at step", "The training process is killed with SIGKILL right after this step (0 = a random step)", settings::int(0, 0, i64::MAX))
            .add(
                "corrupt",
                "Corrupt the latest checkpoint",
                "Damage the newest checkpoint after the crash, to watch the resume fall back to an older one",
                settings::choice("none", &["none", "flip-data", "flip-header", "truncate"]),
            )
            .add("intervals", "Intervals to compare", "Checkpoint intervals (steps) for the steps-lost and write-cost table", settings::list(&[5, 10, 20, 50, 100], 1, 1_000_000))
            .add("folder", "Folder", "Where the checkpoints go (empty = a temporary folder, removed afterwards; a folder you name is kept and must not hold checkpoints)", Value::Text(String::new()))
    }

    fn presets(&self) -> Vec<super::Preset> {
        use super::Preset;
        vec![
            Preset::new(
                "checkpoint rarely",
                "A checkpoint only every 100 steps: the crash loses more work, the writes cost less",
                &[("checkpoint_every", "100")],
            ),
            Preset::new(
                "a corrupt latest checkpoint",
                "The newest checkpoint is damaged after the crash: the resume must detect it and fall back to an older one",
                &[("corrupt", "flip-data")],
            ),
        ]
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        Config::parse(s).map(drop)
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        let c = Config::parse(s)?;
        let exe = gpulab_exe()?;
        let cfg = c.training.train_config(c.training.batch()?)?;
        let cfg = gpulab_systems::train::TrainConfig { log_every: 1, ..cfg }; // every step's loss, for the comparison
        let (folder, kept_folder) = folder(&c.folder)?;
        let backend = c.backend.to_string();
        let spec = |dir: &str, policy: Policy, resume: bool| ChildSpec {
            backend: backend.clone(),
            dataset: c.training.dataset.clone(),
            cfg: cfg.clone(),
            dir: folder.join(dir),
            policy,
            resume,
        };
        let every = c.checkpoint_every as u64;
        let policy =
            Policy { every_steps: every, every_epochs: c.checkpoint_every_epochs as usize, keep_last: c.keep_last as usize, at_end: true };
        let result = run_children(
            &c,
            sink,
            &exe,
            &spec("reference", Policy { every_steps: 0, every_epochs: 0, keep_last: 1, at_end: true }, false),
            &spec("run", policy, false),
            every,
        );
        let out = result.map(|mut runs| {
            runs.weights = compare_final_weights(&folder.join("reference"), &folder.join("run"));
            runs.folder = folder.clone();
            runs.kept_folder = kept_folder;
            report::build(self, s, &c, &cfg, runs, sink.stop_requested())
        });
        if !kept_folder {
            let _ = std::fs::remove_dir_all(&folder);
        }
        out
    }
}

/// The checkpoint folder: the one named in the settings (kept), or a fresh temporary one.
fn folder(named: &str) -> Result<(PathBuf, bool)> {
    if named.trim().is_empty() {
        // Created now, exclusively, with a random name (a guessable one in a shared /tmp could
        // be another user's folder or link); `run` removes it at the end.
        let tmp = tempfile::Builder::new()
            .prefix("gpulab-checkpoints-")
            .tempdir()
            .map_err(|e| Error::InvalidConfig(format!("cannot create a temporary checkpoint folder: {e}")))?;
        return Ok((tmp.keep(), false));
    }
    let dir = PathBuf::from(named.trim());
    for sub in ["reference", "run"] {
        if !store::list(&dir.join(sub))?.is_empty() {
            return Err(Error::InvalidConfig(format!(
                "folder: {} already holds checkpoints; choose an empty folder so none of them is overwritten",
                dir.join(sub).display()
            )));
        }
    }
    Ok((dir, true))
}

fn run_children(c: &Config, sink: &mut dyn Sink, exe: &Path, reference: &ChildSpec, run: &ChildSpec, every: u64) -> Result<Runs> {
    sink.emit(Event::Phase("reference: training without a crash (child process)".into()));
    let reference_log = follow(ChildProcess::spawn(exe, &reference.args())?, sink, "reference (uninterrupted)", None, 0, 0)?;
    let total = reference_log.total_steps;
    let empty = |reference: ChildLog, crash_at| Runs {
        reference,
        crashed: ChildLog::default(),
        resumed: None,
        damage: None,
        crash_at,
        every,
        weights: None,
        folder: PathBuf::new(),
        kept_folder: false,
    };
    if reference_log.stopped {
        return Ok(empty(reference_log, 0));
    }
    if total < 2 {
        return Err(Error::InvalidConfig(format!(
            "the run has only {total} step(s); there is nothing to crash in between. Use more epochs or a smaller batch"
        )));
    }
    let chosen = c.crash_at as u64;
    if chosen >= total {
        return Err(Error::InvalidConfig(format!(
            "crash_at: step {chosen} is not before the run's last step ({total}); choose 1..{} or 0 for random",
            total - 1
        )));
    }
    // A random crash lands after the first checkpoint whenever the run has one before its last
    // step, so every run shows a resume; crash_at = N crashes wherever the learner asks.
    let epochs = c.training.epochs.max(1) as u64;
    let first_save = if every > 0 { every } else { (total / epochs) * c.checkpoint_every_epochs.max(1) as u64 };
    let earliest = if first_save + 1 < total { first_save + 1 } else { 1 };
    let crash_at = if chosen == 0 { rand::rng().random_range(earliest..total) } else { chosen };

    sink.emit(Event::Phase(format!("training with checkpoints; SIGKILL after step {crash_at}")));
    let crashed = follow(ChildProcess::spawn(exe, &run.args())?, sink, "crashed run", Some(crash_at), 0, 2 * total)?;
    if crashed.stopped {
        return Ok(Runs { crashed, ..empty(reference_log, crash_at) });
    }

    let mut damage_done = None;
    let kind = &c.corrupt;
    if kind != "none" {
        match store::list(&run.dir)?.first() {
            Some(newest) => {
                let what = damage(newest, kind.parse::<Damage>()?)?;
                sink.emit(Event::Log(format!("corrupted {}: {what}", newest.display())));
                damage_done = Some((newest.display().to_string(), what));
            }
            None => sink.emit(Event::Log("no checkpoint was written before the crash, so there is none to corrupt".into())),
        }
    }

    sink.emit(Event::Phase("resuming from the newest valid checkpoint (new child process)".into()));
    let resume = ChildSpec { resume: true, ..run.clone() };
    let resumed = follow(ChildProcess::spawn(exe, &resume.args())?, sink, "resumed run", None, total, 2 * total)?;
    Ok(Runs { crashed, resumed: Some(resumed), damage: damage_done, ..empty(reference_log, crash_at) })
}

/// Compares the final checkpoints of the reference and the resumed run, tensor by tensor.
fn compare_final_weights(reference: &Path, run: &Path) -> Option<(bool, f64)> {
    let a = store::read(store::list(reference).ok()?.first()?).ok()?;
    let b = store::read(store::list(run).ok()?.first()?).ok()?;
    if a.meta.position != b.meta.position || a.tensors.keys().ne(b.tensors.keys()) {
        return None;
    }
    let mut identical = true;
    let mut max = 0.0f64;
    for (x, y) in a.tensors.values().zip(b.tensors.values()) {
        for (p, q) in x.data.iter().zip(&y.data) {
            identical &= p.to_bits() == q.to_bits();
            max = max.max((*p as f64 - *q as f64).abs());
        }
    }
    Some((identical, max))
}
