//! Copies a model's parameters and optimizer state between the backend and named host
//! tensors (the checkpoint's names; see `format`): the dense layers', and a CNN's convolutions'.

use std::collections::BTreeMap;

use super::format::{NamedTensor, bias_name, conv_bias_name, conv_weight_name, state_name, state_slot_names, weight_name};
use crate::nn::{Mlp, OptimizerKind, Param};
use gpulab_core::error::Result;
use gpulab_core::tensor::{Backend, TensorMeta};

pub fn optimizer_kind<B: Backend>(model: &Mlp<B>) -> OptimizerKind {
    match model.optimizer {
        crate::nn::Optimizer::Sgd(_) => OptimizerKind::Sgd,
        crate::nn::Optimizer::AdamW(_) => OptimizerKind::AdamW,
    }
}

/// The checkpoint name of every parameter, in the order `params` and `params_mut` visit them:
/// weight then bias of each dense layer, then of each convolution (a CNN).
fn param_names<B: Backend>(model: &Mlp<B>) -> Vec<String> {
    let dense = (0..model.weights.len()).flat_map(|i| [weight_name(i), bias_name(i)]);
    let conv = (0..model.stem.as_ref().map_or(0, |s| s.weights.len())).flat_map(|j| [conv_weight_name(j), conv_bias_name(j)]);
    dense.chain(conv).collect()
}

fn params<B: Backend>(model: &Mlp<B>) -> impl Iterator<Item = &Param<B>> {
    let dense = model.weights.iter().zip(&model.biases).flat_map(|(w, b)| [w, b]);
    dense.chain(model.stem.iter().flat_map(|s| s.params()))
}

fn params_mut<B: Backend>(model: &mut Mlp<B>) -> impl Iterator<Item = &mut Param<B>> {
    let dense = model.weights.iter_mut().zip(model.biases.iter_mut()).flat_map(|(w, b)| [w, b]);
    dense.chain(model.stem.iter_mut().flat_map(|s| s.params_mut()))
}

/// Reads every parameter and optimizer-state tensor back to the host.
pub fn snapshot<B: Backend>(b: &mut B, model: &Mlp<B>) -> Result<BTreeMap<String, NamedTensor>> {
    let slots = state_slot_names(optimizer_kind(model));
    let mut out = BTreeMap::new();
    for (name, p) in param_names(model).into_iter().zip(params(model)) {
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
    let slots = state_slot_names(optimizer_kind(model));
    let names = param_names(model);
    for (name, p) in names.iter().zip(params_mut(model)) {
        let get = |n: &str| {
            tensors
                .get(n)
                .ok_or_else(|| gpulab_core::Error::InvalidConfig(format!("checkpoint lacks {n} (it was not checked against the model)")))
        };
        b.write_f32(&mut p.value, &get(name)?.data)?;
        for (slot, t) in slots.iter().zip(p.state.iter_mut()) {
            b.write_f32(t, &get(&state_name(slot, name))?.data)?;
        }
    }
    Ok(())
}

/// Biases live as [1, out] on the backend and are stored as [out].
fn stored_shape(name: &str, shape: gpulab_core::tensor::Shape) -> Vec<usize> {
    if name.ends_with(".bias") { vec![shape[1]] } else { shape.to_vec() }
}
