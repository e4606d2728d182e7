//! Data sets for the lab: the bundled UCI digits, a synthetic shape generator
//! that scales to any image size, and user-supplied MNIST-style IDX files.
//! Everything is held in memory as `f32` features in [0, 1] and `u32` labels.

pub mod batcher;
pub mod digits;
pub mod idx;
pub mod loader;
pub mod shapes;
pub mod source;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

pub use gpulab_core::error::DataError;
pub use loader::{Batch, CacheStats, Loader, LoaderConfig};
pub use shapes::ShapesConfig;
pub use source::{CostlySource, SampleSource, SourceCost};

/// A classification data set held in memory as f32 features (row-major, one row per sample)
/// and u32 labels, already split into train and validation.
#[derive(Clone)]
pub struct Dataset {
    /// e.g. "digits", "shapes 16x16x1 n=4000", "idx:/path"
    pub name: String,
    /// One line of provenance: where it came from + licence, or "generated (seed N)".
    pub source: String,
    /// Values per sample (C*H*W).
    pub features: usize,
    /// [channels, height, width]
    pub shape: [usize; 3],
    pub classes: usize,
    pub class_names: Vec<String>,
    pub train_x: Vec<f32>,
    pub train_y: Vec<u32>,
    pub val_x: Vec<f32>,
    pub val_y: Vec<u32>,
}

impl Dataset {
    pub fn train_len(&self) -> usize {
        self.train_y.len()
    }

    pub fn val_len(&self) -> usize {
        self.val_y.len()
    }
}

// Hand-written so that `{:?}` prints a summary instead of millions of floats.
impl fmt::Debug for Dataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dataset")
            .field("name", &self.name)
            .field("source", &self.source)
            .field("features", &self.features)
            .field("shape", &self.shape)
            .field("classes", &self.classes)
            .field("class_names", &self.class_names)
            .field("train_len", &self.train_len())
            .field("val_len", &self.val_len())
            .finish_non_exhaustive()
    }
}

/// What the user asked for on the command line: "digits", "shapes",
/// "shapes:res=32,channels=3,n=20000,noise=0.2", "idx:DIR".
#[derive(Clone, Debug, PartialEq)]
pub enum DatasetSpec {
    Digits,
    Shapes(ShapesConfig),
    Idx(PathBuf),
}

const VALID_FORMS: &str = "valid forms: \"digits\", \"shapes\", \
\"shapes:res=16,channels=1,n=4000,noise=0.1,classes=4\" (any subset of the options), \
\"idx:DIR\" (DIR holding MNIST-style train-/t10k- IDX files)";

impl DatasetSpec {
    /// [channels, height, width] of the samples, where known before loading (IDX files say it
    /// only once read).
    pub fn image_shape(&self) -> Option<[usize; 3]> {
        match self {
            DatasetSpec::Digits => Some([1, 8, 8]),
            DatasetSpec::Shapes(c) => Some([c.channels, c.res, c.res]),
            DatasetSpec::Idx(_) => None,
        }
    }
}

impl FromStr for DatasetSpec {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self, DataError> {
        let s = s.trim();
        // Split at the first ':' only, so Windows paths like "idx:C:\mnist" survive.
        let (name, rest) = match s.split_once(':') {
            Some((n, r)) => (n, Some(r)),
            None => (s, None),
        };
        match (name.trim().to_ascii_lowercase().as_str(), rest) {
            ("digits", None) => Ok(DatasetSpec::Digits),
            ("digits", Some(_)) => Err(DataError::Spec(format!("\"{s}\": digits takes no options; {VALID_FORMS}"))),
            ("shapes", None) => Ok(DatasetSpec::Shapes(ShapesConfig::default())),
            ("shapes", Some(opts)) => ShapesConfig::parse_options(opts).map(DatasetSpec::Shapes).map_err(|e| match e {
                DataError::Spec(m) | DataError::Invalid(m) => DataError::Spec(format!("\"{s}\": {m}")),
                other => other,
            }),
            ("idx", Some(dir)) if !dir.trim().is_empty() => Ok(DatasetSpec::Idx(PathBuf::from(dir.trim()))),
            ("idx", _) => Err(DataError::Spec(format!("\"{s}\": idx needs a directory, e.g. \"idx:./mnist\"; {VALID_FORMS}"))),
            _ => Err(DataError::Spec(format!("unknown dataset \"{s}\"; {VALID_FORMS}"))),
        }
    }
}

impl fmt::Display for DatasetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatasetSpec::Digits => f.write_str("digits"),
            DatasetSpec::Shapes(cfg) => {
                let opts = cfg.options_string();
                if opts.is_empty() { f.write_str("shapes") } else { write!(f, "shapes:{opts}") }
            }
            DatasetSpec::Idx(dir) => write!(f, "idx:{}", dir.display()),
        }
    }
}

/// Loads (or generates) the data set. `seed` only matters for `shapes`; the
/// digits and IDX splits are fixed so results are comparable across runs.
pub fn load(spec: &DatasetSpec, seed: u64) -> Result<Dataset, DataError> {
    match spec {
        DatasetSpec::Digits => digits::load(),
        DatasetSpec::Shapes(cfg) => shapes::generate(cfg, seed),
        DatasetSpec::Idx(dir) => idx::load(dir),
    }
}
