//! Errors from loading or describing a data set. Every message names the
//! file (or the spec) and the problem, so a user can fix it without a debugger.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The `--dataset` string could not be understood.
    #[error("bad dataset spec: {0}")]
    Spec(String),

    /// The operating system refused to read a file (permissions, not a file, ...).
    #[error("cannot read {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },

    /// A required file is not there; `looked_for` lists every name tried.
    #[error(
        "missing file in {}: looked for {}",
        dir.display(),
        looked_for.join(" or ")
    )]
    Missing { dir: PathBuf, looked_for: Vec<String> },

    /// The file exists but its contents are wrong (bad magic, truncated, ...).
    #[error("{}: {problem}", path.display())]
    Malformed { path: PathBuf, problem: String },

    /// A configuration value is out of range.
    #[error("invalid dataset configuration: {0}")]
    Invalid(String),
}

impl DataError {
    pub fn malformed(path: impl Into<PathBuf>, problem: impl Into<String>) -> Self {
        DataError::Malformed { path: path.into(), problem: problem.into() }
    }
}
