//! Checkpoint files in a folder: atomic writes, listing newest first, keep-last-K, and
//! loading the newest one that validates (saying which were skipped and why).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::CheckpointError;
use super::format::{self, Checkpoint, CheckpointMeta, NamedTensor};
use crate::nn::{MlpConfig, OptimizerKind};

const PREFIX: &str = "ckpt-";
const SUFFIX: &str = ".safetensors";
/// Temporary files start with a dot and never match a checkpoint name.
const TMP_PREFIX: &str = ".tmp-ckpt-";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io { path: path.into(), source }
}

pub fn file_name(step: u64) -> String {
    format!("{PREFIX}{step:010}{SUFFIX}")
}

/// The step in a checkpoint's file name, or None for any other file.
pub fn step_of(path: &Path) -> Option<u64> {
    path.file_name()?.to_str()?.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.parse().ok()
}

/// One written checkpoint: where, how big, and how long the write took (measured).
#[derive(Clone, Debug)]
pub struct Saved {
    pub path: PathBuf,
    pub bytes: u64,
    /// Encode + write + both fsyncs + rename, seconds.
    pub write_s: f64,
}

/// Writes `bytes` as `dir/name` atomically and durably (see `fsutil::write_atomic`); the
/// temporary name starts with a prefix `prune` recognises.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, CheckpointError> {
    gpulab_core::fsutil::write_atomic(dir, &format!("{TMP_PREFIX}{name}."), name, bytes)
        .map_err(|(path, source)| CheckpointError::Io { path, source })
}

/// Encodes and atomically writes one checkpoint, timing the whole of it.
pub fn save(dir: &Path, meta: &CheckpointMeta, tensors: &std::collections::BTreeMap<String, NamedTensor>) -> gpulab_core::Result<Saved> {
    let t0 = Instant::now();
    let bytes = format::encode(meta, tensors)?;
    let path = write_atomic(dir, &file_name(meta.position.step), &bytes)?;
    Ok(Saved { path, bytes: bytes.len() as u64, write_s: t0.elapsed().as_secs_f64() })
}

/// Checkpoint files in `dir`, newest (highest step) first. A missing folder has none.
pub fn list(dir: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(dir)(e)),
    };
    let mut found: Vec<(u64, PathBuf)> =
        entries.filter_map(|e| e.ok()).map(|e| e.path()).filter_map(|p| step_of(&p).map(|s| (s, p))).collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// Deletes all but the newest `keep` checkpoints, and temporary files a crash left behind
/// (only the one writer of this folder calls this, after its own write finished).
pub fn prune(dir: &Path, keep: usize) -> Result<Vec<PathBuf>, CheckpointError> {
    let mut removed = Vec::new();
    for p in list(dir)?.into_iter().skip(keep.max(1)) {
        fs::remove_file(&p).map_err(io(&p))?;
        removed.push(p);
    }
    for e in fs::read_dir(dir).map_err(io(dir))?.filter_map(|e| e.ok()) {
        if e.file_name().to_str().is_some_and(|n| n.starts_with(TMP_PREFIX)) {
            let p = e.path();
            fs::remove_file(&p).map_err(io(&p))?;
        }
    }
    Ok(removed)
}

/// The largest checkpoint file read: well above the lab's largest model with AdamW's state.
pub const MAX_BYTES: u64 = 4 << 30;

/// Reads one checkpoint and checks its structure and checksum (not that it fits a model). Only
/// a regular file is read, and at most `MAX_BYTES` of it (`fsutil::read_limited`).
pub fn read(path: &Path) -> Result<Checkpoint, CheckpointError> {
    format::decode(&gpulab_core::fsutil::read_limited(path, MAX_BYTES).map_err(io(path))?, path)
}

/// Reads and fully validates one checkpoint for this model and optimizer.
pub fn load(path: &Path, arch: &MlpConfig, kind: OptimizerKind) -> Result<Checkpoint, CheckpointError> {
    let ck = read(path)?;
    format::check_fits(&ck, arch, kind, path)?;
    Ok(ck)
}

/// A checkpoint passed over on resume, and why.
#[derive(Clone, Debug)]
pub struct Skipped {
    pub path: PathBuf,
    pub kind: &'static str,
    pub reason: String,
}

/// The newest checkpoint in `dir` that validates (None if none does), and the newer ones that
/// did not. A checkpoint of another model (an MLP's for a CNN run, other widths or channels)
/// or another optimizer (SGD's for an AdamW run) is not damage to fall back past: it is the
/// error, since a run resumed or started over in that folder would write its own checkpoints
/// over the other run's.
pub fn newest_valid(
    dir: &Path,
    arch: &MlpConfig,
    kind: OptimizerKind,
) -> Result<(Option<(PathBuf, Checkpoint)>, Vec<Skipped>), CheckpointError> {
    let mut skipped = Vec::new();
    for p in list(dir)? {
        match load(&p, arch, kind) {
            Ok(ck) => return Ok((Some((p, ck)), skipped)),
            Err(e @ (CheckpointError::ArchitectureMismatch { .. } | CheckpointError::OptimizerMismatch { .. })) => return Err(e),
            Err(e) => skipped.push(Skipped { path: p, kind: e.kind(), reason: e.to_string() }),
        }
    }
    Ok((None, skipped))
}
