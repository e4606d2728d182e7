//! The IDX data-set reader (`data::idx::parse`, the pure form of what `idx:DIR` reads): any
//! bytes, plain or gzipped, as an images or a labels file, give dimensions and data or an error,
//! never a panic or an allocation past the bound. The first byte picks the variant (bit 0:
//! gzipped, bit 1: labels); the rest is the file.
#![no_main]

use gpulab_systems::data::idx::{IMAGES_MAGIC, LABELS_MAGIC, MAX_BYTES, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, file)) = input.split_first() else { return };
    let gz = mode & 1 == 1;
    let magic = if mode & 2 == 2 { LABELS_MAGIC } else { IMAGES_MAGIC };
    let Ok((dims, data)) = parse(file, gz, magic) else { return };
    assert_eq!(dims.len(), (magic & 0xff) as usize);
    assert_eq!(data.len() as u64, dims.iter().map(|&d| d as u64).product::<u64>(), "data does not fill {dims:?}");
    assert!(data.len() as u64 <= MAX_BYTES);
    if !gz {
        assert_eq!(file.len(), 4 + 4 * dims.len() + data.len(), "trailing bytes were accepted");
    }
});
