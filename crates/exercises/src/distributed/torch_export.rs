//! `gpulab export torch --exercise distributed`: exercise 6's experiment as a PyTorch DDP
//! program a learner can take to a cluster — `train_ddp.py`, the initial weights
//! (`init.safetensors`, nn.Linear's [out, in] layout), the data and each epoch's shuffling
//! order (`data.safetensors`), the hyperparameters (`config.json`), the first losses of a real
//! gpulab CPU run of the same settings (`gpulab_losses.json`, measured) and a README.txt.

use std::path::{Path, PathBuf};

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde_json::json;

use super::super::settings::Settings;
use gpulab_core::device::CpuBackend;
use gpulab_core::error::{Error, Result};
use gpulab_systems::checkpoint::format::{bias_name, weight_name};
use gpulab_systems::data::{Dataset, batcher};
use gpulab_systems::nn::{MlpConfig, ModelKind, Optimizer, Precision, he_normal};
use gpulab_systems::train::{NullSink, Recorder, TrainConfig};

/// The Python program; it reads everything else from the files beside it.
pub const SCRIPT: &str = include_str!("train_ddp.py");
/// Steps of gpulab's own losses written for the script's `--compare`.
pub const REFERENCE_STEPS: usize = 10;
/// Largest relative loss difference `--compare` accepts: both sides compute in float32, only
/// the summation order differs.
pub const COMPARE_TOLERANCE: f64 = 1e-3;

/// What was written, for the CLI to print.
pub struct Exported {
    pub files: Vec<PathBuf>,
    /// gpulab's losses of the first steps (measured on the CPU backend), mean per sample.
    pub losses: Vec<f64>,
}

/// Writes the export of exercise 6 with settings `s` into `out` (created if missing).
pub fn export(s: &Settings, out: &Path) -> Result<Exported> {
    let (training, bucket_cap_mb) = crate::settings::distributed::export(s)?;
    training.validate()?;
    let data = training.load_dataset()?;
    let cfg = training.train_config(training.batch()?)?;
    if cfg.model != ModelKind::Mlp || cfg.amp.precision != Precision::F32 {
        return Err(Error::InvalidConfig(format!(
            "the PyTorch export writes the fp32 MLP (nn.Linear layers), not model={} precision={}; export with model=mlp precision=fp32",
            cfg.model.name(),
            cfg.amp.precision.name()
        )));
    }
    if data.train_len() == 0 || data.val_len() == 0 {
        return Err(Error::InvalidConfig(format!("data set {} has an empty train or validation split", data.name)));
    }
    let arch = MlpConfig { input: data.features, hidden: cfg.hidden.clone(), classes: data.classes, conv: None };
    arch.validate()?;
    let orders = data.train_len().saturating_mul(cfg.epochs);
    if orders > 50_000_000 {
        return Err(Error::InvalidConfig(format!(
            "epochs: {} epochs × {} samples of shuffling order is too large to export (limit 50 million indices)",
            cfg.epochs,
            data.train_len()
        )));
    }
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let losses = reference_losses(&data, &cfg)?;
    let mut files = Vec::new();
    let mut write = |name: &str, bytes: &[u8]| -> Result<()> {
        // Atomic, and never into a FIFO or device that stands at the name (`fsutil::replaceable`).
        let path = gpulab_core::fsutil::write_atomic(out, &format!(".{name}."), name, bytes).map_err(|(p, e)| io(&p, e))?;
        files.push(path);
        Ok(())
    };
    write("train_ddp.py", SCRIPT.as_bytes())?;
    write("init.safetensors", &initial_weights(&arch, cfg.seed)?)?;
    write("data.safetensors", &data_file(&data, &cfg)?)?;
    let config = config_json(bucket_cap_mb, &arch, &cfg, &data)?;
    write("config.json", serde_json::to_string_pretty(&config).map_err(|e| Error::Internal(e.to_string()))?.as_bytes())?;
    let reference = json!({
        "provenance": "measured: gpulab's CPU backend, the same settings, loss read back after every step",
        "losses": losses,
    });
    write("gpulab_losses.json", reference.to_string().as_bytes())?;
    write("README.txt", readme(&arch, &cfg, &data).as_bytes())?;
    Ok(Exported { files, losses })
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Report(format!("could not write {}: {e}", path.display()))
}

/// gpulab's first `REFERENCE_STEPS` losses with these settings, on the CPU backend.
fn reference_losses(data: &Dataset, cfg: &TrainConfig) -> Result<Vec<f64>> {
    let cfg = TrainConfig { log_every: 1, ..cfg.clone() };
    let mut rec = Recorder::new(NullSink).stop_after(REFERENCE_STEPS);
    gpulab_systems::train::train(&mut CpuBackend::new(), data, &cfg, &mut rec)?;
    Ok(rec.windows.iter().take(REFERENCE_STEPS).map(|w| w.loss).collect())
}

fn le<T: Copy, const N: usize>(v: &[T], bytes: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|x| bytes(*x)).collect()
}

fn serialize(tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)>) -> Result<Vec<u8>> {
    let views = tensors
        .iter()
        .map(|(n, d, shape, bytes)| TensorView::new(*d, shape.clone(), bytes).map(|v| (n.as_str(), v)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Internal(format!("export tensor does not match its shape: {e}")))?;
    safetensors::serialize(views, None).map_err(|e| Error::Internal(format!("could not encode safetensors: {e}")))
}

/// The weights `Mlp::new` starts from (He normal, zero biases), transposed to nn.Linear's
/// [out, in], under the checkpoint's names `layers.{i}.weight` / `layers.{i}.bias`.
pub fn initial_weights(arch: &MlpConfig, seed: u64) -> Result<Vec<u8>> {
    let mut t = Vec::new();
    for (i, w) in arch.widths().windows(2).enumerate() {
        let (fan_in, fan_out) = (w[0], w[1]);
        let w_in_out = he_normal(fan_in, fan_out, seed, i);
        let mut w_out_in = vec![0.0f32; fan_in * fan_out];
        for r in 0..fan_in {
            for c in 0..fan_out {
                w_out_in[c * fan_in + r] = w_in_out[r * fan_out + c];
            }
        }
        t.push((weight_name(i), Dtype::F32, vec![fan_out, fan_in], le(&w_out_in, f32::to_le_bytes)));
        t.push((bias_name(i), Dtype::F32, vec![fan_out], vec![0u8; fan_out * 4]));
    }
    serialize(t)
}

/// Train and validation arrays (labels as int64, what cross_entropy takes) and each epoch's
/// shuffling order (`batcher::epoch_order`, the one gpulab's loop uses).
fn data_file(data: &Dataset, cfg: &TrainConfig) -> Result<Vec<u8>> {
    let n = data.train_len();
    let labels = |y: &[u32]| le(&y.iter().map(|&v| v as i64).collect::<Vec<_>>(), i64::to_le_bytes);
    let order: Vec<i64> = (0..cfg.epochs).flat_map(|e| batcher::epoch_order(n, cfg.seed, e as u64)).map(|i| i as i64).collect();
    serialize(vec![
        ("train_x".into(), Dtype::F32, vec![n, data.features], le(&data.train_x, f32::to_le_bytes)),
        ("train_y".into(), Dtype::I64, vec![n], labels(&data.train_y)),
        ("val_x".into(), Dtype::F32, vec![data.val_len(), data.features], le(&data.val_x, f32::to_le_bytes)),
        ("val_y".into(), Dtype::I64, vec![data.val_len()], labels(&data.val_y)),
        ("order".into(), Dtype::I64, vec![cfg.epochs, n], le(&order, i64::to_le_bytes)),
    ])
}

fn config_json(bucket_cap_mb: f64, arch: &MlpConfig, cfg: &TrainConfig, data: &Dataset) -> Result<serde_json::Value> {
    let optimizer = match cfg.optimizer() {
        Optimizer::Sgd(o) => json!({"kind": "sgd", "lr": o.lr, "momentum": o.momentum, "weight_decay": o.weight_decay}),
        Optimizer::AdamW(o) => {
            json!({"kind": "adamw", "lr": o.lr, "beta1": o.beta1, "beta2": o.beta2, "eps": o.eps, "weight_decay": o.weight_decay})
        }
    };
    Ok(json!({
        "exported_by": format!("gpulab {} export torch --exercise distributed", env!("CARGO_PKG_VERSION")),
        "dataset": data.name,
        "widths": arch.widths(),
        "batch": cfg.batch,
        "epochs": cfg.epochs,
        "seed": cfg.seed,
        "optimizer": optimizer,
        "loss": "softmax cross-entropy, mean over the global batch",
        "bucket_cap_mb": bucket_cap_mb,
        "compare_tolerance": COMPARE_TOLERANCE,
    }))
}

fn readme(arch: &MlpConfig, cfg: &TrainConfig, data: &Dataset) -> String {
    format!(
        "gpulab exercise 6 exported for PyTorch DistributedDataParallel\n\n\
         Model {} (Linear + ReLU, softmax cross-entropy), data set {} ({} training / {} validation samples),\n\
         global batch {}, {} epochs, optimizer {:?} lr {}, seed {}.\n\n\
         Files\n  train_ddp.py        the training program (read its header for what differs from gpulab)\n\
         \x20 config.json         hyperparameters\n  init.safetensors    initial weights, nn.Linear layout: layers.i.weight [out, in], layers.i.bias [out]\n\
         \x20 data.safetensors    train_x, train_y, val_x, val_y, order [epochs, n] (gpulab's shuffle of each epoch)\n\
         \x20 gpulab_losses.json  gpulab's first {} losses with these settings (measured, CPU backend)\n\n\
         Run (needs: pip install torch safetensors)\n\
         \x20 python train_ddp.py --compare                 one process; checks the first losses against gpulab's\n\
         \x20 torchrun --nproc-per-node N train_ddp.py      N processes on this machine (NCCL on GPUs, Gloo on CPU)\n\
         \x20 torchrun --nnodes M --nproc-per-node N --rdzv-backend c10d --rdzv-endpoint HOST:29400 train_ddp.py\n\
         \x20                                              on each of M machines: more than one machine\n\n\
         The global batch ({}) must divide by the number of processes for equal shares; an uneven last\n\
         batch is handled so every step makes gpulab's update.\n",
        arch.describe(),
        data.name,
        data.train_len(),
        data.val_len(),
        cfg.batch,
        cfg.epochs,
        cfg.optimizer,
        cfg.lr,
        cfg.seed,
        REFERENCE_STEPS,
        cfg.batch,
    )
}
