//! Gradient buckets, PyTorch DDP's way: the parameters in the order backward finishes them
//! (last dense layer first, a CNN's convolutions last), packed into buckets of at most
//! `bucket_cap_mb`; a parameter larger than the cap gets a bucket of its own. A bucket is
//! all-reduced as one message as soon as its last parameter's gradient is final — with overlap
//! on, while backward goes on.

use crate::nn::{Mlp, MlpConfig, Param};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::Backend;

/// One parameter of the model: dense layer `layer`'s weight or bias, or (`conv`) convolution
/// `layer`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamRef {
    pub layer: usize,
    pub bias: bool,
    pub conv: bool,
    pub elements: usize,
}

impl ParamRef {
    /// Its index in `all_params_mut`'s order.
    pub fn slot(&self, dense: usize, convs: usize) -> usize {
        match self.conv {
            false => self.bias as usize * dense + self.layer,
            true => 2 * dense + self.bias as usize * convs + self.layer,
        }
    }

    pub fn of<'m, B: Backend>(&self, model: &'m Mlp<B>) -> Result<&'m Param<B>> {
        let stem = model.stem.as_ref();
        match (self.conv, self.bias) {
            (false, false) => model.weights.get(self.layer),
            (false, true) => model.biases.get(self.layer),
            (true, false) => stem.and_then(|s| s.weights.get(self.layer)),
            (true, true) => stem.and_then(|s| s.biases.get(self.layer)),
        }
        .ok_or_else(|| self.missing())
    }

    pub fn of_mut<'m, B: Backend>(&self, model: &'m mut Mlp<B>) -> Result<&'m mut Param<B>> {
        let stem = model.stem.as_mut();
        match (self.conv, self.bias) {
            (false, false) => model.weights.get_mut(self.layer),
            (false, true) => model.biases.get_mut(self.layer),
            (true, false) => stem.and_then(|s| s.weights.get_mut(self.layer)),
            (true, true) => stem.and_then(|s| s.biases.get_mut(self.layer)),
        }
        .ok_or_else(|| self.missing())
    }

    fn missing(&self) -> Error {
        Error::Internal(format!(
            "the model has no {}{} {}",
            if self.conv { "convolution " } else { "layer " },
            self.layer,
            if self.bias { "bias" } else { "weight" }
        ))
    }
}

/// Every parameter of `model` in `ParamRef::slot` order: dense weights, dense biases, then a
/// CNN's convolution weights and biases.
pub fn all_params_mut<B: Backend>(model: &mut Mlp<B>) -> impl Iterator<Item = &mut Param<B>> {
    let (stem_weights, stem_biases) = match model.stem.as_mut() {
        Some(s) => (s.weights.iter_mut(), s.biases.iter_mut()),
        None => (Default::default(), Default::default()),
    };
    model.weights.iter_mut().chain(model.biases.iter_mut()).chain(stem_weights).chain(stem_biases)
}

/// Parameters all-reduced together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub params: Vec<ParamRef>,
    /// The earliest (lowest) dense layer in the bucket: the bucket is ready once backward has
    /// finished this layer. None when it holds a convolution's parameters: ready only when
    /// backward ends.
    pub ready_after_layer: Option<usize>,
}

impl Bucket {
    pub fn elements(&self) -> usize {
        self.params.iter().map(|p| p.elements).sum()
    }
}

/// The largest cap accepted: far beyond any model here, and it keeps bytes in a u64.
pub const MAX_CAP_MB: f64 = 1024.0 * 1024.0;

/// Checks `bucket_cap_mb` and turns it into bytes (MiB, as DDP counts them).
pub fn cap_bytes(cap_mb: f64) -> Result<usize> {
    if !cap_mb.is_finite() || cap_mb <= 0.0 || cap_mb > MAX_CAP_MB {
        return Err(Error::InvalidConfig(format!("bucket_cap_mb must be above 0 and at most {MAX_CAP_MB} MiB, got {cap_mb}")));
    }
    Ok(((cap_mb * (1u64 << 20) as f64) as usize).max(4))
}

/// Buckets for `model`, in backward order.
pub fn plan(model: &MlpConfig, cap_bytes: usize) -> Vec<Bucket> {
    let widths = model.widths();
    let dense = (0..widths.len().saturating_sub(1)).rev().flat_map(|layer| {
        [(layer, false, widths[layer] * widths[layer + 1]), (layer, true, widths[layer + 1])].map(|(layer, bias, elements)| ParamRef {
            layer,
            bias,
            conv: false,
            elements,
        })
    });
    let stages = model.conv.as_ref().map(|c| c.stages()).unwrap_or_default();
    let conv = stages.iter().enumerate().rev().flat_map(|(layer, s)| {
        [(layer, false, s.taps() * s.out), (layer, true, s.out)].map(|(layer, bias, elements)| ParamRef {
            layer,
            bias,
            conv: true,
            elements,
        })
    });
    let mut out: Vec<Bucket> = Vec::new();
    let mut cur: Vec<ParamRef> = Vec::new();
    let mut cur_bytes = 0usize;
    for p in dense.chain(conv) {
        let bytes = p.elements * 4;
        if !cur.is_empty() && cur_bytes + bytes > cap_bytes {
            out.push(close(std::mem::take(&mut cur)));
            cur_bytes = 0;
        }
        cur.push(p);
        cur_bytes += bytes;
    }
    if !cur.is_empty() {
        out.push(close(cur));
    }
    out
}

fn close(params: Vec<ParamRef>) -> Bucket {
    let ready_after_layer = if params.iter().any(|p| p.conv) { None } else { params.iter().map(|p| p.layer).min() };
    Bucket { params, ready_after_layer }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mlp(widths: &[usize]) -> MlpConfig {
        MlpConfig { input: widths[0], hidden: widths[1..widths.len() - 1].to_vec(), classes: widths[widths.len() - 1], conv: None }
    }

    #[test]
    fn the_default_cap_holds_a_small_mlp_in_one_bucket() {
        let b = plan(&mlp(&[784, 512, 256, 10]), cap_bytes(25.0).expect("cap"));
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].elements(), 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
        assert_eq!(b[0].ready_after_layer, Some(0));
        assert_eq!(b[0].params[0], ParamRef { layer: 2, bias: false, conv: false, elements: 2560 });
    }

    /// A CNN's convolutions come after the dense layers (backward finishes them last), and a
    /// bucket that holds one is ready only when backward ends; every parameter once, with its
    /// own slot.
    #[test]
    fn a_cnns_convolutions_are_bucketed_last() {
        let cfg = crate::nn::ModelKind::Cnn.config([1, 8, 8], 64, &[16], 4).expect("a CNN");
        let b = plan(&cfg, 64 * 4);
        let all: Vec<ParamRef> = b.iter().flat_map(|b| b.params.clone()).collect();
        assert_eq!(all.iter().map(|p| p.elements).sum::<usize>(), cfg.parameter_count());
        let first_conv = all.iter().position(|p| p.conv).expect("conv parameters");
        assert!(all[first_conv..].iter().all(|p| p.conv) && all[first_conv].layer == 1, "{all:?}");
        assert!(b.iter().all(|k| k.ready_after_layer.is_none() == k.params.iter().any(|p| p.conv)));
        let mut slots: Vec<usize> = all.iter().map(|p| p.slot(2, 2)).collect();
        slots.sort();
        assert_eq!(slots, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn a_small_cap_splits_in_backward_order_and_keeps_every_parameter_once() {
        let b = plan(&mlp(&[64, 32, 16, 10]), 64 * 4);
        let all: Vec<ParamRef> = b.iter().flat_map(|b| b.params.clone()).collect();
        assert_eq!(all.len(), 6);
        let layers: Vec<usize> = all.iter().map(|p| p.layer).collect();
        assert_eq!(layers, [2, 2, 1, 1, 0, 0]);
        assert!(b.len() > 2, "{b:?}");
        for bucket in &b {
            assert!(bucket.params.len() == 1 || bucket.elements() * 4 <= 64 * 4, "{bucket:?}");
        }
        assert_eq!(b.last().expect("buckets").ready_after_layer, Some(0));
    }

    #[test]
    fn absurd_caps_are_refused_by_name() {
        for bad in [0.0, -1.0, f64::NAN, 1e12] {
            assert!(cap_bytes(bad).expect_err("refused").to_string().contains("bucket_cap_mb"));
        }
    }
}
