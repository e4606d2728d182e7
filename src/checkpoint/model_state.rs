//! Copies a model's parameters and optimizer state between the backend and named host
//! tensors (the checkpoint's names; see `format`).

use std::collections::BTreeMap;

use super::format::{NamedTensor, bias_name, state_name, state_slot_names, weight_name};
use crate::error::Result;
use crate::nn::{Mlp, OptimizerKind};
use crate::tensor::{Backend, TensorMeta};

pub fn optimizer_kind<B: Backend>(model: &Mlp<B>) -> OptimizerKind {
    match model.optimizer {
        crate::nn::Optimizer::Sgd(_) => OptimizerKind::Sgd,
        crate::nn::Optimizer::AdamW(_) => OptimizerKind::AdamW,
    }
}

/// (name, parameter) for every parameter: weight then bias of each layer.
fn named_params<B: Backend>(model: &Mlp<B>) -> Vec<(String, &crate::nn::Param<B>)> {
    model.weights.iter().zip(&model.biases).enumerate().flat_map(|(i, (w, b))| [(weight_name(i), w), (bias_name(i), b)]).collect()
}

/// Checkpoints name an MLP's tensors only: a CNN is refused rather than saved without its
/// convolutions.
fn refuse_cnn<B: Backend>(model: &Mlp<B>) -> Result<()> {
    match model.stem {
        Some(_) => Err(crate::Error::InvalidConfig("model cnn cannot be checkpointed yet (checkpoints hold an MLP's tensors); train the CNN without a checkpoint folder, or use model mlp".into())),
        None => Ok(()),
    }
}

/// Reads every parameter and optimizer-state tensor back to the host.
pub fn snapshot<B: Backend>(b: &mut B, model: &Mlp<B>) -> Result<BTreeMap<String, NamedTensor>> {
    refuse_cnn(model)?;
    let slots = state_slot_names(optimizer_kind(model));
    let mut out = BTreeMap::new();
    for (name, p) in named_params(model) {
        let shape = stored_shape(&name, p.value.shape());
        out.insert(name.clone(), NamedTensor::f32(shape.clone(), b.read_f32(&p.value)?));
        for (slot, t) in slots.iter().zip(&p.state) {
            out.insert(state_name(slot, &name), NamedTensor::f32(shape.clone(), b.read_f32(t)?));
        }
    }
    Ok(out)
}

/// Writes checked tensors (see `format::check_fits`) into the model's buffers.
pub fn restore<B: Backend>(b: &mut B, model: &mut Mlp<B>, tensors: &BTreeMap<String, NamedTensor>) -> Result<()> {
    refuse_cnn(model)?;
    let slots = state_slot_names(optimizer_kind(model));
    let names: Vec<String> = named_params(model).into_iter().map(|(n, _)| n).collect();
    let params = model.weights.iter_mut().zip(model.biases.iter_mut()).flat_map(|(w, b)| [w, b]);
    for (name, p) in names.iter().zip(params) {
        let get = |n: &str| tensors.get(n).ok_or_else(|| crate::Error::InvalidConfig(format!("checkpoint lacks {n} (it was not checked against the model)")));
        b.write_f32(&mut p.value, &get(name)?.data)?;
        for (slot, t) in slots.iter().zip(p.state.iter_mut()) {
            b.write_f32(t, &get(&state_name(slot, name))?.data)?;
        }
    }
    Ok(())
}

/// Biases live as [1, out] on the backend and are stored as [out].
fn stored_shape(name: &str, shape: crate::tensor::Shape) -> Vec<usize> {
    if name.ends_with(".bias") { vec![shape[1]] } else { shape.to_vec() }
}
