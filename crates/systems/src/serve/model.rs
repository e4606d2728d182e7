//! The model a server serves (and exercise 9 quantizes), on the host: its architecture and f32
//! layers, where it came from and a version string. `load_model` is the one place a model source
//! becomes a `HostModel` (an exercise-9 int8 file is the `Int8` arm; `train_model` is training
//! first with the caller's sink), and `DeviceModel` is its
//! weights-only copy on a backend: no gradients, no optimizer state; its forward is the one dense
//! forward pass (`nn::DenseStack`), with f32 layers or an int8 model's `Int8` layers.

use std::path::PathBuf;

use crate::checkpoint::format::{bias_name, weight_name};
use crate::checkpoint::store;
use crate::data::{self, Dataset, DatasetSpec};
use crate::nn::{DenseStack, HostLayer, Mlp, MlpConfig, Workspace};
use crate::quant::{self, QuantizedModel};
use crate::train::{self, Inline, NullSink, StepDone, TrainConfig, TrainHooks, TrainReport, TrainSink};
use gpulab_core::device::Device;
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{Backend, DType};
use gpulab_core::with_backend;

/// Where the served model comes from.
#[derive(Clone, Debug)]
pub enum ModelSource {
    /// An exercise-5 / `gpulab train --checkpoint-dir` checkpoint file (safetensors).
    Checkpoint(PathBuf),
    /// Exercise 9's int8 model (`model.int8.safetensors`, read by `quant::load`).
    Int8(PathBuf),
    /// Train the model first with the existing trainer (`cfg`) on `dataset`, on `backend`.
    TrainFirst { dataset: String, cfg: TrainConfig, backend: Device },
}

/// A model on the host: its architecture and f32 layers (`nn::HostLayer`: weight `[in, out]`
/// row-major, bias `[out]`).
#[derive(Clone, Debug)]
pub struct HostModel {
    pub arch: MlpConfig,
    pub layers: Vec<HostLayer>,
    /// Shown by /healthz and /metrics (`gpulab_model_info`), e.g. "ckpt-0000000120 (step 120)".
    pub version: String,
    /// One line: the file or the training run it came from.
    pub source: String,
    /// Set for an int8 model: the server runs its quantized forward; `layers` then hold the
    /// dequantized weights (q · scale), for `validate` and as an f32 reference.
    pub int8: Option<QuantizedModel>,
}

impl HostModel {
    /// Checks every layer against the architecture; a mismatch names the layer.
    pub fn validate(&self) -> Result<()> {
        self.arch.validate()?;
        let widths = self.arch.widths();
        if self.layers.len() + 1 != widths.len() {
            return Err(Error::InvalidConfig(format!(
                "model has {} layers but architecture {} needs {}",
                self.layers.len(),
                self.arch.describe(),
                widths.len() - 1
            )));
        }
        for (i, (l, io)) in self.layers.iter().zip(widths.windows(2)).enumerate() {
            if l.weight.len() != io[0] * io[1] || l.bias.len() != io[1] || l.shape != [io[0], io[1]] {
                return Err(Error::InvalidConfig(format!(
                    "layer {i} holds {} weights and {} biases; {} needs {}×{} and {}",
                    l.weight.len(),
                    l.bias.len(),
                    self.arch.describe(),
                    io[0],
                    io[1],
                    io[1]
                )));
            }
        }
        Ok(())
    }

    /// The exact f32 prediction on the host, one sample (the reference the tests compare the
    /// server's batched answers with).
    pub fn logits_host(&self, x: &[f32]) -> Vec<f32> {
        let mut a = x.to_vec();
        let last = self.layers.len() - 1;
        for (i, l) in self.layers.iter().enumerate() {
            let out = l.bias.len();
            let mut z = l.bias.clone();
            for (k, &xk) in a.iter().enumerate() {
                for (j, zj) in z.iter_mut().enumerate() {
                    *zj += xk * l.weight[k * out + j];
                }
            }
            if i < last {
                z.iter_mut().for_each(|v| *v = v.max(0.0));
            }
            a = z;
        }
        a
    }
}

/// Builds the model a server will serve or exercise 9 quantizes. The one entry point for every
/// model source.
pub fn load_model(source: &ModelSource) -> Result<HostModel> {
    match source {
        ModelSource::Checkpoint(path) => from_checkpoint(path),
        ModelSource::Int8(path) => from_int8(path),
        ModelSource::TrainFirst { dataset, cfg, backend } => train_first(dataset, cfg, backend),
    }
}

/// Reads a checkpoint, checks it fits its own stated architecture (every tensor present with
/// its shape), and keeps the parameters.
pub fn from_checkpoint(path: &std::path::Path) -> Result<HostModel> {
    let ck = store::read(path)?;
    crate::checkpoint::format::require_mlp(&ck, path, "the inference server and exercise 9's quantization")?;
    let arch = ck.meta.architecture.clone();
    arch.validate()?;
    crate::checkpoint::format::check_fits(&ck, &arch, ck.meta.hyperparameters.optimizer, path)?;
    let mut params = Vec::new();
    for i in 0..arch.widths().len() - 1 {
        for n in [weight_name(i), bias_name(i)] {
            let t = ck.tensors.get(&n).ok_or_else(|| Error::InvalidConfig(format!("checkpoint {} lacks {n}", path.display())))?;
            params.push(t.data.clone());
        }
    }
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("checkpoint");
    let m = HostModel {
        version: format!("{name} (step {})", ck.meta.position.step),
        source: format!("checkpoint {} ({} on {})", path.display(), arch.describe(), ck.meta.dataset),
        layers: HostLayer::from_parameters(&params, &arch.widths())?,
        arch,
        int8: None,
    };
    m.validate()?;
    Ok(m)
}

/// Reads an int8 model written by exercise 9 (`quant::load` checks every tensor against its
/// widths); an error names the file.
pub fn from_int8(path: &std::path::Path) -> Result<HostModel> {
    let q = quant::load(path)?;
    let widths = q.widths();
    let named = |e: Error| Error::InvalidConfig(format!("int8 model {}: {e}", path.display()));
    let (&input, rest) = widths.split_first().ok_or_else(|| named(Error::InvalidConfig("no layers".into())))?;
    let (&classes, hidden) = rest.split_last().ok_or_else(|| named(Error::InvalidConfig("no output layer".into())))?;
    let arch = MlpConfig { input, hidden: hidden.to_vec(), classes, conv: None };
    arch.validate().map_err(named)?;
    let layers = q
        .layers
        .iter()
        .map(|l| {
            let cols = l.shape[1];
            let weight = l.weight.iter().enumerate().map(|(e, &v)| v as f32 * l.weight_scales[e % cols]).collect();
            HostLayer { weight, shape: l.shape, bias: l.bias.clone() }
        })
        .collect();
    let name = path.file_name().and_then(|s| s.to_str()).unwrap_or("int8 model");
    let m = HostModel {
        version: format!("{name} (int8, {} weights, {} activations)", quant::granularity_name(q.weights), q.activations.name()),
        source: format!("int8 model {} ({})", path.display(), arch.describe()),
        arch,
        layers,
        int8: Some(q),
    };
    m.validate().map_err(named)?;
    Ok(m)
}

/// Keeps the parameters of the run's last step.
struct Capture(Option<Vec<Vec<f32>>>);

impl<B: Backend> TrainHooks<B> for Capture {
    fn after_step(&mut self, b: &mut B, model: &Mlp<B>, done: StepDone) -> Result<()> {
        if done.run_end {
            self.0 = Some(model.read_parameters(b)?);
        }
        Ok(())
    }
}

/// Trains `cfg` on `data` with the lab's trainer on `b`, its events to `sink`: the run's report
/// and the model of its last step (None when the run stopped before it).
pub fn train_model<B: Backend>(
    b: &mut B,
    data: &Dataset,
    cfg: &TrainConfig,
    sink: &mut dyn TrainSink,
) -> Result<(TrainReport, Option<HostModel>)> {
    let mut cap = Capture(None);
    let report = train::train_with(b, data, cfg, sink, &mut cap, &mut Inline)?;
    let Some(params) = cap.0 else { return Ok((report, None)) };
    let arch = MlpConfig { input: data.features, hidden: cfg.hidden.clone(), classes: data.classes, conv: None };
    let m = HostModel {
        version: format!("trained-{}-steps-seed-{}", report.steps, cfg.seed),
        source: format!(
            "trained first: {} on {} for {} epoch(s), validation accuracy {:.3}",
            arch.describe(),
            data.name,
            cfg.epochs,
            report.final_val_accuracy
        ),
        layers: HostLayer::from_parameters(&params, &arch.widths())?,
        arch,
        int8: None,
    };
    m.validate()?;
    Ok((report, Some(m)))
}

/// Trains `cfg` on `dataset` with the lab's trainer and keeps the final parameters.
pub fn train_first(dataset: &str, cfg: &TrainConfig, backend: &Device) -> Result<HostModel> {
    cfg.validate()?;
    let spec: DatasetSpec = dataset.parse()?;
    let data: Dataset = data::load(&spec, cfg.seed)?;
    let mut engine = backend.open(None)?;
    let (_, model) = with_backend!(&mut engine, b => train_model(b, &data, cfg, &mut NullSink))?;
    model.ok_or_else(|| Error::Internal("training ended without its last step".into()))
}

/// The served model's weights on a backend: parameters only (inference needs no gradients or
/// optimizer state — the memory ledger shows the difference from training).
pub struct DeviceModel<B: Backend> {
    pub arch: MlpConfig,
    /// f32 layers, or an int8 model's quantized ones.
    layers: DenseStack<B>,
}

impl<B: Backend> DeviceModel<B> {
    pub fn upload(b: &mut B, m: &HostModel) -> Result<Self> {
        m.validate()?;
        let layers = match &m.int8 {
            Some(q) => DenseStack::quantized(b, q)?,
            None => DenseStack::float(b, &m.layers, DType::F32)?,
        };
        Ok(DeviceModel { arch: m.arch.clone(), layers })
    }

    /// A forward-only workspace for `rows` samples (no gradient buffers).
    pub fn workspace(&self, b: &mut B, rows: usize) -> Result<Workspace<B>> {
        Workspace::new(b, &self.arch, rows, false)
    }

    /// Logits of the rows written into `ws.x`, left in `ws.logits()`.
    pub fn forward(&self, b: &mut B, ws: &mut Workspace<B>) -> Result<()> {
        self.layers.forward_into(b, &ws.x, &mut ws.acts)
    }
}
