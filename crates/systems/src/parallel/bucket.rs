//! Gradient buckets, PyTorch DDP's way: the parameters in the order backward finishes them
//! (last layer first), packed into buckets of at most `bucket_cap_mb`; a parameter larger than
//! the cap gets a bucket of its own. A bucket is all-reduced as one message as soon as its
//! last parameter's gradient is final — with overlap on, while backward goes on.

use gpulab_core::error::{Error, Result};

/// One parameter of the MLP: layer `layer`'s weight or bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamRef {
    pub layer: usize,
    pub bias: bool,
    pub elements: usize,
}

/// Parameters all-reduced together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub params: Vec<ParamRef>,
    /// The earliest (lowest) layer in the bucket: the bucket is ready once backward has
    /// finished this layer.
    pub ready_after_layer: usize,
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

/// Buckets for an MLP whose layers have `widths` (input, hidden…, classes), in backward order.
pub fn plan(widths: &[usize], cap_bytes: usize) -> Vec<Bucket> {
    let layers = widths.len().saturating_sub(1);
    let mut out: Vec<Bucket> = Vec::new();
    let mut cur: Vec<ParamRef> = Vec::new();
    let mut cur_bytes = 0usize;
    for layer in (0..layers).rev() {
        for (bias, elements) in [(false, widths[layer] * widths[layer + 1]), (true, widths[layer + 1])] {
            let bytes = elements * 4;
            if !cur.is_empty() && cur_bytes + bytes > cap_bytes {
                out.push(close(std::mem::take(&mut cur)));
                cur_bytes = 0;
            }
            cur.push(ParamRef { layer, bias, elements });
            cur_bytes += bytes;
        }
    }
    if !cur.is_empty() {
        out.push(close(cur));
    }
    out
}

fn close(params: Vec<ParamRef>) -> Bucket {
    let ready_after_layer = params.iter().map(|p| p.layer).min().unwrap_or(0);
    Bucket { params, ready_after_layer }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_holds_a_small_mlp_in_one_bucket() {
        let b = plan(&[784, 512, 256, 10], cap_bytes(25.0).expect("cap"));
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].elements(), 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
        assert_eq!(b[0].ready_after_layer, 0);
        assert_eq!(b[0].params[0], ParamRef { layer: 2, bias: false, elements: 2560 });
    }

    #[test]
    fn a_small_cap_splits_in_backward_order_and_keeps_every_parameter_once() {
        let widths = [64, 32, 16, 10];
        let b = plan(&widths, 64 * 4);
        let all: Vec<ParamRef> = b.iter().flat_map(|b| b.params.clone()).collect();
        assert_eq!(all.len(), 6);
        let layers: Vec<usize> = all.iter().map(|p| p.layer).collect();
        assert_eq!(layers, [2, 2, 1, 1, 0, 0]);
        assert!(b.len() > 2, "{b:?}");
        for bucket in &b {
            assert!(bucket.params.len() == 1 || bucket.elements() * 4 <= 64 * 4, "{bucket:?}");
        }
        assert_eq!(b.last().expect("buckets").ready_after_layer, 0);
    }

    #[test]
    fn absurd_caps_are_refused_by_name() {
        for bad in [0.0, -1.0, f64::NAN, 1e12] {
            assert!(cap_bytes(bad).expect_err("refused").to_string().contains("bucket_cap_mb"));
        }
    }
}
