//! The IDX data-set reader (`data::idx::parse`, the pure form of what `idx:DIR` reads): any
//! bytes, plain or gzipped, as an images or a labels file, give dimensions and data or an error,
//! never a panic or an allocation past the bound. The first byte picks the variant (bit 0:
//! gzipped, bit 1: labels, bit 2: the header path alone, `check_header`, against a file length
//! the next 8 bytes give, as a sparse file's: its length is real, its blocks are not); the rest
//! is the file.
#![no_main]

use gpulab_systems::data::idx::{IMAGES_MAGIC, LABELS_MAGIC, MAX_BYTES, check_header, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, file)) = input.split_first() else { return };
    let gz = mode & 1 == 1;
    let magic = if mode & 2 == 2 { LABELS_MAGIC } else { IMAGES_MAGIC };
    if mode & 4 == 4 {
        let Some((len, header)) = file.split_first_chunk::<8>() else { return };
        let file_len = u64::from_le_bytes(*len);
        let Ok((dims, payload)) = check_header(header, file_len, gz, magic) else { return };
        assert_eq!(dims.len(), (magic & 0xff) as usize);
        assert_eq!(payload, dims.iter().map(|&d| d as u64).product::<u64>());
        assert!(payload <= MAX_BYTES, "a claim of {payload} bytes passed the cap");
        if !gz {
            assert!(4 + 4 * dims.len() as u64 + payload <= file_len, "a claim past the file's length passed");
        }
        return;
    }
    let Ok((dims, data)) = parse(file, gz, magic) else { return };
    assert_eq!(dims.len(), (magic & 0xff) as usize);
    assert_eq!(data.len() as u64, dims.iter().map(|&d| d as u64).product::<u64>(), "data does not fill {dims:?}");
    assert!(data.len() as u64 <= MAX_BYTES);
    if !gz {
        assert_eq!(file.len(), 4 + 4 * dims.len() + data.len(), "trailing bytes were accepted");
    }
});
