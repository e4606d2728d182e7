//! The int8 model loader (`quant::load` after its bounded read): any bytes give a model or an
//! error, never a panic. An accepted model's tensors have the shapes its widths declare, every
//! scale is finite and positive, and writing it again reads back the same.
#![no_main]

use std::path::Path;

use gpulab_systems::quant::export::{from_bytes, to_bytes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let path = Path::new("fuzz.int8.safetensors");
    let Ok(m) = from_bytes(bytes, path) else { return };
    assert!(!m.layers.is_empty());
    for (i, l) in m.layers.iter().enumerate() {
        let [inputs, outputs] = l.shape;
        assert_eq!(l.weight.len(), inputs * outputs, "layer {i}: weights do not fill its shape");
        assert_eq!(l.weight_scales.len(), outputs, "layer {i}");
        assert_eq!(l.bias.len(), outputs, "layer {i}");
        assert!(l.weight_scales.iter().chain(&l.input_scale).all(|s| s.is_finite() && *s > 0.0), "layer {i}: a bad scale");
        assert!(l.bias.iter().all(|b| b.is_finite()), "layer {i}: a non-finite bias");
    }
    assert!(m.layers.windows(2).all(|w| w[0].shape[1] == w[1].shape[0]), "consecutive layers do not chain");
    let again = to_bytes(&m, &[]).expect("an accepted model encodes");
    assert_eq!(from_bytes(&again, path).expect("a re-encoded model loads"), m);
});
