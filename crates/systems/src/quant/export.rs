//! The quantized model as safetensors, readable by `quant::load` (and so by the inference
//! server) and by Python's `safetensors`. Tensor names, for layer i:
//!
//! | name | dtype | shape | meaning |
//! |---|---|---|---|
//! | `layers.{i}.weight` | I8 | [inputs, outputs] | q = clamp(round(w / s), −127, 127) |
//! | `layers.{i}.weight_scale` | F32 | [outputs] | s per output channel (all equal when per-tensor) |
//! | `layers.{i}.input_scale` | F32 | [1] | the static activation scale (absent when dynamic) |
//! | `layers.{i}.bias` | F32 | [outputs] | the f32 bias |
//!
//! Metadata: `format` = `gpulab-int8/1`, `widths` (JSON, e.g. `[64,128,64,10]`), `weights`
//! (`per-channel`/`per-tensor`), `activations` (`static`/`dynamic`), and anything the caller
//! adds (observer, data set). w ≈ q · weight_scale; y = (x_q · W_q) · input_scale · weight_scale + bias.

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

use super::{ActScales, QuantizedLayer, QuantizedModel, granularity_name};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::QuantGranularity;

pub const FORMAT: &str = "gpulab-int8/1";

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The file's bytes; `extra` goes into the metadata beside the format keys.
pub fn to_bytes(m: &QuantizedModel, extra: &[(&str, String)]) -> Result<Vec<u8>> {
    let mut blobs: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (i, l) in m.layers.iter().enumerate() {
        blobs.push((format!("layers.{i}.weight"), Dtype::I8, l.shape.to_vec(), l.weight.iter().map(|&v| v as u8).collect()));
        blobs.push((format!("layers.{i}.weight_scale"), Dtype::F32, vec![l.shape[1]], f32_bytes(&l.weight_scales)));
        blobs.push((format!("layers.{i}.bias"), Dtype::F32, vec![l.shape[1]], f32_bytes(&l.bias)));
        if let Some(s) = l.input_scale {
            blobs.push((format!("layers.{i}.input_scale"), Dtype::F32, vec![1], f32_bytes(&[s])));
        }
    }
    let mut meta: HashMap<String, String> = extra.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    meta.insert("format".into(), FORMAT.into());
    meta.insert("widths".into(), serde_json::to_string(&m.widths()).map_err(|e| Error::Internal(e.to_string()))?);
    meta.insert("weights".into(), granularity_name(m.weights).into());
    meta.insert("activations".into(), m.activations.name().into());
    let views = blobs
        .iter()
        .map(|(n, d, s, b)| TensorView::new(*d, s.clone(), b).map(|v| (n.as_str(), v)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Internal(format!("a quantized tensor does not match its shape: {e}")))?;
    safetensors::serialize(views, Some(meta)).map_err(|e| Error::Internal(format!("could not encode the quantized model: {e}")))
}

/// Writes the model to `path` durably (temporary file, fsync, rename).
pub fn save(path: &Path, m: &QuantizedModel, extra: &[(&str, String)]) -> Result<()> {
    let bytes = to_bytes(m, extra)?;
    gpulab_core::fsutil::write_file_atomic(path, &bytes).map(drop).map_err(|(path, source)| Error::Io { path, source })
}

/// The largest int8 model file read.
pub const MAX_BYTES: u64 = 1 << 30;

/// Reads a quantized model written by `save`, checking every tensor against the widths. Only
/// a regular file is read, and at most `MAX_BYTES` of it (`fsutil::read_limited`).
pub fn load(path: &Path) -> Result<QuantizedModel> {
    let bytes = gpulab_core::fsutil::read_limited(path, MAX_BYTES).map_err(|source| Error::Io { path: path.into(), source })?;
    from_bytes(&bytes, path)
}

/// `load` from bytes already read; `path` only names the file in errors.
pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<QuantizedModel> {
    let bad = |what: String| Error::InvalidConfig(format!("{}: not a usable gpulab int8 model: {what}", path.display()));
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| bad(format!("not safetensors ({e})")))?;
    let st = SafeTensors::deserialize(bytes).map_err(|e| bad(format!("not safetensors ({e})")))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let get = |k: &str| meta.get(k).ok_or_else(|| bad(format!("metadata key {k:?} is missing")));
    if get("format")? != FORMAT {
        return Err(bad(format!("format {:?} is not {FORMAT:?}", meta["format"])));
    }
    let widths: Vec<usize> = serde_json::from_str(get("widths")?).map_err(|e| bad(format!("widths: {e}")))?;
    if widths.len() < 2 || widths.contains(&0) {
        return Err(bad(format!("widths {widths:?} need at least an input and an output, none zero")));
    }
    let weights = match get("weights")?.as_str() {
        "per-channel" => QuantGranularity::PerChannel,
        "per-tensor" => QuantGranularity::PerTensor,
        w => return Err(bad(format!("weights {w:?} is not per-channel or per-tensor"))),
    };
    let activations = match get("activations")?.as_str() {
        "static" => ActScales::Static,
        "dynamic" => ActScales::Dynamic,
        a => return Err(bad(format!("activations {a:?} is not static or dynamic"))),
    };
    let tensor = |name: &str, dtype: Dtype, shape: &[usize]| -> Result<Vec<u8>> {
        let t = st.tensor(name).map_err(|_| bad(format!("tensor {name} is missing")))?;
        if t.dtype() != dtype || t.shape() != shape {
            return Err(bad(format!("tensor {name} is {:?} {:?}, expected {dtype:?} {shape:?}", t.dtype(), t.shape())));
        }
        Ok(t.data().to_vec())
    };
    let floats = |b: Vec<u8>| -> Vec<f32> { b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect() };
    let mut layers = Vec::new();
    for (i, w) in widths.windows(2).enumerate() {
        let weight = tensor(&format!("layers.{i}.weight"), Dtype::I8, &[w[0], w[1]])?.into_iter().map(|v| v as i8).collect();
        let weight_scales = floats(tensor(&format!("layers.{i}.weight_scale"), Dtype::F32, &[w[1]])?);
        let bias = floats(tensor(&format!("layers.{i}.bias"), Dtype::F32, &[w[1]])?);
        let input_scale = match activations {
            ActScales::Static => Some(floats(tensor(&format!("layers.{i}.input_scale"), Dtype::F32, &[1])?)[0]),
            ActScales::Dynamic => None,
        };
        if let Some(s) = weight_scales.iter().chain(&input_scale).find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(bad(format!("layer {i} has a scale of {s}; every scale must be finite and positive")));
        }
        if let Some((j, b)) = bias.iter().enumerate().find(|(_, b)| !b.is_finite()) {
            return Err(bad(format!("tensor layers.{i}.bias holds {b} at index {j}; every value must be finite")));
        }
        layers.push(QuantizedLayer { weight, shape: [w[0], w[1]], weight_scales, input_scale, bias });
    }
    Ok(QuantizedModel { layers, weights, activations })
}
