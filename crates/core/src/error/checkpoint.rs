//! Why a checkpoint was refused. Each variant names the file and the problem, so a resume can
//! say which checkpoint it skipped and why.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint {path} is truncated: {detail}")]
    Truncated { path: PathBuf, detail: String },

    #[error("checkpoint {path} has a bad header: {detail}")]
    BadHeader { path: PathBuf, detail: String },

    #[error("checkpoint {path} fails its checksum (stored {stored}, computed {computed}): the file was changed after it was written")]
    ChecksumMismatch { path: PathBuf, stored: String, computed: String },

    #[error("checkpoint {path} lacks tensor {name}")]
    MissingTensor { path: PathBuf, name: String },

    #[error("checkpoint {path}: tensor {name} has shape {found:?} ({dtype}), this model needs {expected:?} (F32)")]
    ShapeMismatch { path: PathBuf, name: String, expected: Vec<usize>, found: Vec<usize>, dtype: String },

    #[error(
        "checkpoint {path} is for a different model: it holds {found}, this run trains {expected}; resume it with the model that wrote it, or use another folder"
    )]
    ArchitectureMismatch { path: PathBuf, expected: String, found: String },

    #[error(
        "checkpoint {path} was written by a run with optimizer {found}, this run uses {expected} (its state tensors differ); resume it with optimizer {found}, or use another folder"
    )]
    OptimizerMismatch { path: PathBuf, expected: &'static str, found: &'static str },

    #[error(
        "checkpoint {path}: tensor {name} holds {count} non-finite value(s) (the first, {value}, at index {index}): the run that wrote it had diverged; resume from an earlier checkpoint or train again"
    )]
    NonFinite { path: PathBuf, name: String, count: usize, index: usize, value: f32 },

    #[error("checkpoint {path} has no usable {key} in its metadata: {detail}")]
    BadMetadata { path: PathBuf, key: String, detail: String },

    #[error("checkpoint I/O on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl CheckpointError {
    /// A short name for tables and logs, e.g. "checksum mismatch".
    pub fn kind(&self) -> &'static str {
        match self {
            CheckpointError::Truncated { .. } => "truncated",
            CheckpointError::BadHeader { .. } => "bad header",
            CheckpointError::ChecksumMismatch { .. } => "checksum mismatch",
            CheckpointError::MissingTensor { .. } => "missing tensor",
            CheckpointError::ShapeMismatch { .. } => "shape mismatch",
            CheckpointError::ArchitectureMismatch { .. } => "architecture mismatch",
            CheckpointError::OptimizerMismatch { .. } => "optimizer mismatch",
            CheckpointError::NonFinite { .. } => "non-finite values",
            CheckpointError::BadMetadata { .. } => "bad metadata",
            CheckpointError::Io { .. } => "I/O error",
        }
    }
}
