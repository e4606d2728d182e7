//! The checkpoint file: safetensors with gpulab's tensor names and string metadata, plus a
//! CRC-32 over the metadata and every tensor so a changed byte anywhere is caught on load.
//!
//! Tensor names (all F32, little-endian), for layer i of the MLP:
//! `layers.{i}.weight` [in, out], `layers.{i}.bias` [out], and the optimizer state of each:
//! `optimizer.momentum.layers.{i}.weight` (SGD), or `optimizer.exp_avg.…` and
//! `optimizer.exp_avg_sq.…` (AdamW's first and second moments).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use serde::{Deserialize, Serialize};

use super::CheckpointError;
use crate::nn::{MlpConfig, OptimizerKind};
use crate::train::{LoaderPosition, TrainConfig};

/// The value of the `format` metadata key; a file without it is not a gpulab checkpoint.
pub const FORMAT: &str = "gpulab-checkpoint/1";

/// One tensor as stored: its dtype name, shape and (for F32) values.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedTensor {
    pub dtype: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl NamedTensor {
    pub fn f32(shape: Vec<usize>, data: Vec<f32>) -> Self {
        NamedTensor { dtype: "F32".into(), shape, data }
    }
}

/// The random-number state. Each epoch's shuffle is a ChaCha8 stream derived from (seed,
/// epoch), and nothing else is drawn after initialisation, so this is the whole RNG state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RngState {
    pub generator: String,
    pub seed: u64,
    /// The stream of the epoch the next batch comes from.
    pub stream: u64,
}

/// Everything in a checkpoint besides the tensors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    /// Steps done, and where the data loader continues (epoch, batch index within it).
    pub position: LoaderPosition,
    /// The optimizer's own step counter (AdamW's bias correction).
    pub optimizer_step: u32,
    pub rng: RngState,
    /// A mixed-precision gradient scaler's state, when the run has one.
    pub grad_scaler: Option<serde_json::Value>,
    pub precision: String,
    pub hyperparameters: TrainConfig,
    pub architecture: MlpConfig,
    pub dataset: String,
    pub gpulab_version: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub meta: CheckpointMeta,
    pub tensors: BTreeMap<String, NamedTensor>,
}

/// The optimizer-state slot names, in the order `Param::state` holds them (PyTorch's names).
pub fn state_slot_names(kind: OptimizerKind) -> &'static [&'static str] {
    match kind {
        OptimizerKind::Sgd => &["momentum"],
        OptimizerKind::AdamW => &["exp_avg", "exp_avg_sq"],
    }
}

pub fn weight_name(layer: usize) -> String {
    format!("layers.{layer}.weight")
}
pub fn bias_name(layer: usize) -> String {
    format!("layers.{layer}.bias")
}
pub fn conv_weight_name(stage: usize) -> String {
    format!("conv{stage}.weight")
}
pub fn conv_bias_name(stage: usize) -> String {
    format!("conv{stage}.bias")
}
pub fn state_name(slot: &str, param: &str) -> String {
    format!("optimizer.{slot}.{param}")
}

/// Every tensor a checkpoint of this model and optimizer must hold, with its shape.
pub fn tensor_specs(arch: &MlpConfig, kind: OptimizerKind) -> Vec<(String, Vec<usize>)> {
    let mut specs = Vec::new();
    for (i, w) in arch.widths().windows(2).enumerate() {
        specs.push((weight_name(i), vec![w[0], w[1]]));
        specs.push((bias_name(i), vec![w[1]]));
    }
    for (j, s) in arch.conv.iter().flat_map(|c| c.stages()).enumerate() {
        specs.push((conv_weight_name(j), vec![s.taps(), s.out]));
        specs.push((conv_bias_name(j), vec![s.out]));
    }
    let params = specs.clone();
    for slot in state_slot_names(kind) {
        specs.extend(params.iter().map(|(n, s)| (state_name(slot, n), s.clone())));
    }
    specs
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("checkpoint metadata serialises")
}

fn metadata_map(meta: &CheckpointMeta) -> HashMap<String, String> {
    let mut m = HashMap::new();
    let p = meta.position;
    m.insert("format".into(), FORMAT.into());
    m.insert("gpulab_version".into(), meta.gpulab_version.clone());
    m.insert("step".into(), p.step.to_string());
    m.insert("epoch".into(), p.epoch.to_string());
    m.insert("batch_in_epoch".into(), p.batch.to_string());
    m.insert("optimizer_step".into(), meta.optimizer_step.to_string());
    m.insert("rng".into(), json(&meta.rng));
    if let Some(s) = &meta.grad_scaler {
        m.insert("grad_scaler".into(), json(s));
    }
    m.insert("precision".into(), meta.precision.clone());
    m.insert("hyperparameters".into(), json(&meta.hyperparameters));
    m.insert("architecture".into(), json(&meta.architecture));
    m.insert("dataset".into(), meta.dataset.clone());
    m
}

/// CRC-32 over the metadata (sorted, without the checksum itself) and every tensor's name,
/// dtype, shape and bytes in name order.
fn checksum<'a>(meta: &HashMap<String, String>, tensors: impl Iterator<Item = (&'a str, &'a str, &'a [usize], &'a [u8])>) -> String {
    let mut h = crc32fast::Hasher::new();
    let sorted: BTreeMap<_, _> = meta.iter().filter(|(k, _)| *k != "checksum").collect();
    for (k, v) in sorted {
        h.update(k.as_bytes());
        h.update(&[0]);
        h.update(v.as_bytes());
        h.update(&[0]);
    }
    for (name, dtype, shape, bytes) in tensors {
        h.update(name.as_bytes());
        h.update(&[0]);
        h.update(dtype.as_bytes());
        for d in shape {
            h.update(&(*d as u64).to_le_bytes());
        }
        h.update(bytes);
    }
    format!("crc32:{:08x}", h.finalize())
}

/// The file's bytes.
pub fn encode(meta: &CheckpointMeta, tensors: &BTreeMap<String, NamedTensor>) -> gpulab_core::Result<Vec<u8>> {
    let bytes: BTreeMap<&str, Vec<u8>> =
        tensors.iter().map(|(n, t)| (n.as_str(), t.data.iter().flat_map(|v| v.to_le_bytes()).collect())).collect();
    let mut m = metadata_map(meta);
    let sum = checksum(&m, tensors.iter().map(|(n, t)| (n.as_str(), "F32", t.shape.as_slice(), bytes[n.as_str()].as_slice())));
    m.insert("checksum".into(), sum);
    let views = tensors
        .iter()
        .map(|(n, t)| TensorView::new(Dtype::F32, t.shape.clone(), &bytes[n.as_str()]).map(|v| (n.as_str(), v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| gpulab_core::Error::InvalidConfig(format!("checkpoint tensor does not match its shape: {e}")))?;
    safetensors::serialize(views, Some(m)).map_err(|e| gpulab_core::Error::InvalidConfig(format!("could not encode the checkpoint: {e}")))
}

/// Largest header a gpulab checkpoint can plausibly have; a bigger length field is damage.
const MAX_HEADER: u64 = 100 << 20;

/// Parses and checks the file's bytes: structure, checksum, then the metadata's values.
pub fn decode(bytes: &[u8], path: &Path) -> Result<Checkpoint, CheckpointError> {
    let truncated = |detail: String| CheckpointError::Truncated { path: path.into(), detail };
    let bad_header = |detail: String| CheckpointError::BadHeader { path: path.into(), detail };
    let Some(len_bytes) = bytes.get(..8) else {
        return Err(truncated(format!("{} bytes, less than the 8-byte header length", bytes.len())));
    };
    let n = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes"));
    if n > MAX_HEADER {
        return Err(bad_header(format!("header length field says {n} bytes")));
    }
    if 8 + n > bytes.len() as u64 {
        return Err(truncated(format!("the header needs {n} bytes but only {} follow", bytes.len() - 8)));
    }
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| match e {
        SafeTensorError::MetadataIncompleteBuffer => match data_end(&bytes[8..8 + n as usize]) {
            Some(end) if 8 + n + end > bytes.len() as u64 => {
                truncated(format!("the tensors need {end} bytes after the header but only {} are there", bytes.len() as u64 - 8 - n))
            }
            _ => bad_header("the tensor byte ranges do not cover the file exactly".into()),
        },
        e => bad_header(e.to_string()),
    })?;
    let st = SafeTensors::deserialize(bytes).map_err(|e| bad_header(e.to_string()))?;
    let meta = header.metadata().clone().ok_or_else(|| bad_header("no __metadata__ section".into()))?;
    let get = |key: &str| {
        meta.get(key).ok_or_else(|| CheckpointError::BadMetadata { path: path.into(), key: key.into(), detail: "missing".into() })
    };
    if get("format")? != FORMAT {
        return Err(CheckpointError::BadMetadata {
            path: path.into(),
            key: "format".into(),
            detail: format!("{:?} is not {FORMAT:?}", meta["format"]),
        });
    }
    let stored = get("checksum")?.clone();
    let mut views: Vec<(String, TensorView)> = st.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    let dtypes: Vec<String> = views.iter().map(|(_, v)| format!("{:?}", v.dtype())).collect();
    let computed = checksum(&meta, views.iter().zip(&dtypes).map(|((n, v), d)| (n.as_str(), d.as_str(), v.shape(), v.data())));
    if computed != stored {
        return Err(CheckpointError::ChecksumMismatch { path: path.into(), stored, computed });
    }
    let mut tensors = BTreeMap::new();
    for ((name, v), dtype) in views.iter().zip(dtypes) {
        let data: Vec<f32> = if v.dtype() == Dtype::F32 {
            v.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()
        } else {
            Vec::new()
        };
        // A checksum only says the bytes are the ones written; a diverged run writes NaN.
        if let Some(index) = data.iter().position(|x| !x.is_finite()) {
            let count = data.iter().filter(|x| !x.is_finite()).count();
            return Err(CheckpointError::NonFinite { path: path.into(), name: name.clone(), count, index, value: data[index] });
        }
        tensors.insert(name.clone(), NamedTensor { dtype, shape: v.shape().to_vec(), data });
    }
    Ok(Checkpoint { meta: parse_meta(&meta, path)?, tensors })
}

/// The end of the last tensor's byte range, read from the header JSON (None if it does not parse).
fn data_end(header: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(header).ok()?;
    v.as_object()?.iter().filter(|(k, _)| *k != "__metadata__").filter_map(|(_, t)| t.get("data_offsets")?.get(1)?.as_u64()).max()
}

fn parse_meta(m: &HashMap<String, String>, path: &Path) -> Result<CheckpointMeta, CheckpointError> {
    fn field<T: serde::de::DeserializeOwned>(m: &HashMap<String, String>, path: &Path, key: &str, raw: bool) -> Result<T, CheckpointError> {
        let bad = |detail: String| CheckpointError::BadMetadata { path: path.into(), key: key.into(), detail };
        let text = m.get(key).ok_or_else(|| bad("missing".into()))?;
        // Plain strings are stored as-is; everything else is JSON.
        let r = if raw { serde_json::from_value(serde_json::Value::String(text.clone())) } else { serde_json::from_str(text) };
        r.map_err(|e| bad(format!("{text:?}: {e}")))
    }
    Ok(CheckpointMeta {
        position: LoaderPosition {
            step: field(m, path, "step", false)?,
            epoch: field(m, path, "epoch", false)?,
            batch: field(m, path, "batch_in_epoch", false)?,
        },
        optimizer_step: field(m, path, "optimizer_step", false)?,
        rng: field(m, path, "rng", false)?,
        grad_scaler: if m.contains_key("grad_scaler") { Some(field(m, path, "grad_scaler", false)?) } else { None },
        precision: field(m, path, "precision", true)?,
        hyperparameters: field(m, path, "hyperparameters", false)?,
        architecture: field(m, path, "architecture", false)?,
        dataset: field(m, path, "dataset", true)?,
        gpulab_version: field(m, path, "gpulab_version", true)?,
    })
}

/// Refuses a CNN's checkpoint where only an MLP's dense layers are read (`what` says where,
/// e.g. "the inference server"), naming the model it holds.
pub fn require_mlp(ck: &Checkpoint, path: &Path, what: &str) -> gpulab_core::Result<()> {
    match ck.meta.architecture.conv {
        Some(_) => Err(gpulab_core::Error::InvalidConfig(format!(
            "checkpoint {} holds a {}; {what} takes an MLP's checkpoint (it runs no convolutions)",
            path.display(),
            ck.meta.architecture.label()
        ))),
        None => Ok(()),
    }
}

/// Checks that the checkpoint fits this model and optimizer: architecture, optimizer, then
/// every tensor.
pub fn check_fits(ck: &Checkpoint, arch: &MlpConfig, kind: OptimizerKind, path: &Path) -> Result<(), CheckpointError> {
    if &ck.meta.architecture != arch {
        return Err(CheckpointError::ArchitectureMismatch {
            path: path.into(),
            expected: arch.label(),
            found: ck.meta.architecture.label(),
        });
    }
    if ck.meta.hyperparameters.optimizer != kind {
        return Err(CheckpointError::OptimizerMismatch {
            path: path.into(),
            expected: kind.name(),
            found: ck.meta.hyperparameters.optimizer.name(),
        });
    }
    for (name, shape) in tensor_specs(arch, kind) {
        let t = ck.tensors.get(&name).ok_or_else(|| CheckpointError::MissingTensor { path: path.into(), name: name.clone() })?;
        if t.dtype != "F32" || t.shape != shape {
            return Err(CheckpointError::ShapeMismatch {
                path: path.into(),
                name,
                expected: shape,
                found: t.shape.clone(),
                dtype: t.dtype.clone(),
            });
        }
    }
    Ok(())
}
