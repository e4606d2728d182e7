//! The checkpoint loader (`checkpoint::store::read` after its bounded read): any bytes give a
//! checkpoint or an error, never a panic. An accepted checkpoint holds finite F32 tensors of
//! their declared shapes, and writing it again reads back the same.
#![no_main]

use std::path::Path;

use gpulab_systems::checkpoint::format::{decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let path = Path::new("fuzz.safetensors");
    let Ok(ck) = decode(bytes, path) else { return };
    for (name, t) in &ck.tensors {
        if t.dtype == "F32" {
            assert_eq!(t.data.len(), t.shape.iter().product::<usize>(), "{name}: values do not fill its shape");
            assert!(t.data.iter().all(|v| v.is_finite()), "{name}: a non-finite value was accepted");
        } else {
            assert!(t.data.is_empty(), "{name}: {} tensor carries f32 values", t.dtype);
        }
    }
    // Only F32 tensors are written back (encode's contract).
    if ck.tensors.values().all(|t| t.dtype == "F32") {
        let again = encode(&ck.meta, &ck.tensors).expect("an accepted checkpoint encodes");
        assert_eq!(decode(&again, path).expect("a re-encoded checkpoint decodes"), ck);
    }
});
