//! MNIST / Fashion-MNIST files in the IDX format, which the user already has
//! (the lab downloads nothing). Headers are untrusted: the size a header claims
//! is checked against the file before anything is allocated.

use std::io::{BufReader, ErrorKind, Read};
use std::path::{Path, PathBuf};

use gpulab_core::fsutil;

use super::{DataError, Dataset};

pub const TRAIN_IMAGES: &str = "train-images-idx3-ubyte";
pub const TRAIN_LABELS: &str = "train-labels-idx1-ubyte";
pub const TEST_IMAGES: &str = "t10k-images-idx3-ubyte";
pub const TEST_LABELS: &str = "t10k-labels-idx1-ubyte";

pub const IMAGES_MAGIC: u32 = 0x0000_0803; // unsigned bytes, 3 dimensions
pub const LABELS_MAGIC: u32 = 0x0000_0801; // unsigned bytes, 1 dimension
const CLASSES: usize = 10;
/// Deflate cannot expand data by more than about 1032:1; a gzipped file whose
/// header claims more than this is lying or truncated.
const MAX_GZIP_RATIO: u64 = 1032;

/// Loads train-* as the training split and t10k-* as validation.
pub fn load(dir: &Path) -> Result<Dataset, DataError> {
    let meta = std::fs::metadata(dir).map_err(|source| DataError::Io { path: dir.into(), source })?;
    if !meta.is_dir() {
        return Err(DataError::Invalid(format!(
            "idx:{} is not a directory; point it at the folder holding {TRAIN_IMAGES} etc.",
            dir.display()
        )));
    }
    let (train_x, train_y, rows, cols) = load_pair(dir, TRAIN_IMAGES, TRAIN_LABELS)?;
    let (val_x, val_y, vr, vc) = load_pair(dir, TEST_IMAGES, TEST_LABELS)?;
    if (vr, vc) != (rows, cols) {
        return Err(DataError::malformed(
            find(dir, TEST_IMAGES)?,
            format!("image size mismatch: {vr}x{vc}, but the train images are {rows}x{cols}"),
        ));
    }
    Ok(Dataset {
        name: format!("idx:{}", dir.display()),
        source: format!("IDX files from {} (user-supplied; licence as distributed by their source)", dir.display()),
        features: rows * cols,
        shape: [1, rows, cols],
        classes: CLASSES,
        class_names: (0..CLASSES).map(|c| c.to_string()).collect(),
        train_x,
        train_y,
        val_x,
        val_y,
    })
}

/// Reads one images file and its labels file: (pixels scaled to [0,1], labels, rows, cols).
fn load_pair(dir: &Path, images: &str, labels: &str) -> Result<(Vec<f32>, Vec<u32>, usize, usize), DataError> {
    let img_path = find(dir, images)?;
    let lbl_path = find(dir, labels)?;
    let (dims, pixels) = read_idx(&img_path, IMAGES_MAGIC)?;
    let (n, rows, cols) = (dims[0] as usize, dims[1] as usize, dims[2] as usize);
    if n == 0 {
        return Err(DataError::malformed(&img_path, "zero images: the header says the file holds 0 images"));
    }
    if rows == 0 || cols == 0 {
        return Err(DataError::malformed(&img_path, format!("empty images: the header says each is {rows}x{cols}")));
    }
    let (ldims, raw_labels) = read_idx(&lbl_path, LABELS_MAGIC)?;
    if ldims[0] as usize != n {
        return Err(DataError::malformed(
            &lbl_path,
            format!(
                "count mismatch: {} labels, but {} has {n} images",
                ldims[0],
                img_path.file_name().unwrap_or_default().to_string_lossy()
            ),
        ));
    }
    if let Some((i, &v)) = raw_labels.iter().enumerate().find(|&(_, &v)| v as usize >= CLASSES) {
        return Err(DataError::malformed(
            &lbl_path,
            format!("label out of range: value {v} at index {i} (classes are 0..={})", CLASSES - 1),
        ));
    }
    let x = pixels.iter().map(|&p| p as f32 / 255.0).collect();
    let y = raw_labels.iter().map(|&l| l as u32).collect();
    Ok((x, y, rows, cols))
}

/// `dir/name`, else `dir/name.gz`, else an error listing both.
fn find(dir: &Path, name: &str) -> Result<PathBuf, DataError> {
    let gz = format!("{name}.gz");
    for candidate in [name, gz.as_str()] {
        let p = dir.join(candidate);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(DataError::Missing { dir: dir.into(), looked_for: vec![name.into(), gz] })
}

/// The largest IDX payload read, plain or after gunzipping: above EMNIST's largest split
/// (0.55 GB), far below what a lying header or a gzip bomb would make us allocate.
pub const MAX_BYTES: u64 = 1 << 30;

/// Reads an IDX file of unsigned bytes (gunzipping `*.gz`, at most `MAX_BYTES`) and returns
/// its dimensions and data, after checking magic, size and trailing bytes. One open; only a
/// regular file is read (`fsutil::open_regular`).
fn read_idx(path: &Path, magic: u32) -> Result<(Vec<u32>, Vec<u8>), DataError> {
    let (file, file_len) = fsutil::open_regular(path).map_err(|source| DataError::Io { path: path.into(), source })?;
    let gz = path.extension().is_some_and(|e| e == "gz");
    let reader: Box<dyn Read> =
        if gz { Box::new(fsutil::gunzip_reader(BufReader::new(file), MAX_BYTES)) } else { Box::new(BufReader::new(file)) };
    decode(reader, file_len, gz, magic).map_err(|e| match e {
        Bad::Format(problem) => DataError::malformed(path, problem),
        // The gzip reader's own errors (corrupt data, too large) are the file's content.
        Bad::Io(e) if gz && e.kind() != ErrorKind::PermissionDenied => DataError::malformed(path, e.to_string()),
        Bad::Io(source) => DataError::Io { path: path.into(), source },
    })
}

/// An IDX file's bytes (gzip-compressed when `gz`): its dimensions and data, or what is wrong
/// with it. The pure form of `read_idx`, for tests and fuzzing.
pub fn parse(bytes: &[u8], gz: bool, magic: u32) -> Result<(Vec<u32>, Vec<u8>), String> {
    let reader: Box<dyn Read> = if gz { Box::new(fsutil::gunzip_reader(bytes, MAX_BYTES)) } else { Box::new(bytes) };
    decode(reader, bytes.len() as u64, gz, magic).map_err(|e| match e {
        Bad::Format(p) => p,
        Bad::Io(e) => e.to_string(),
    })
}

enum Bad {
    /// The content breaks the format.
    Format(String),
    Io(std::io::Error),
}

/// What an IDX header says: its dimensions, their product (the data bytes that follow) and
/// the header's own length.
struct Header {
    dims: Vec<u32>,
    payload: u64,
    header_len: u64,
    dims_text: String,
}

/// An IDX header's checks on its own (magic, dimensions, the claim against `MAX_BYTES` and a
/// file of `file_len` bytes, compressed when `gz`), without reading the data: its dimensions and
/// data length, or what is wrong. `file_len` is what the file system says, so a sparse file's
/// length counts as real; for tests and fuzzing.
pub fn check_header(bytes: &[u8], file_len: u64, gz: bool, magic: u32) -> Result<(Vec<u32>, u64), String> {
    match read_header(bytes, file_len, gz, magic) {
        Ok(h) => Ok((h.dims, h.payload)),
        Err(Bad::Format(p)) => Err(p),
        Err(Bad::Io(e)) => Err(e.to_string()),
    }
}

/// Reads an IDX header from `reader` and checks its claim before anything is allocated for it:
/// at most `MAX_BYTES` of data, and no more than a `file_len`-byte file can hold (all of it for a
/// plain file; `MAX_GZIP_RATIO` times it for a gzipped one), so neither a lying header nor a
/// sparse file that really is that long makes us allocate past the cap.
fn read_header(mut reader: impl Read, file_len: u64, gz: bool, magic: u32) -> Result<Header, Bad> {
    let bad = |problem: String| Bad::Format(problem);
    let mut head = [0u8; 4];
    let got = read_up_to(&mut reader, &mut head).map_err(Bad::Io)?;
    if got < 4 {
        return Err(bad(format!("truncated header: expected 4 bytes of magic number, found {got}")));
    }
    let found = u32::from_be_bytes(head);
    if found != magic {
        let hint = if !gz && head[..2] == [0x1f, 0x8b] {
            " (this looks gzip-compressed; add a .gz suffix to the name)"
        } else if found == IMAGES_MAGIC || found == LABELS_MAGIC {
            " (images and labels files swapped?)"
        } else {
            ""
        };
        return Err(bad(format!("bad magic number: expected 0x{magic:08x}, found 0x{found:08x}{hint}")));
    }

    let rank = (magic & 0xff) as usize;
    let mut dim_bytes = vec![0u8; 4 * rank];
    let got = read_up_to(&mut reader, &mut dim_bytes).map_err(Bad::Io)?;
    if got < dim_bytes.len() {
        return Err(bad(format!("truncated header: expected {} bytes, found {}", 4 + dim_bytes.len(), 4 + got)));
    }
    let dims: Vec<u32> = dim_bytes.chunks(4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])).collect();
    let header_len = 4 + 4 * rank as u64;
    let dims_text = dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x");
    let payload = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
        .ok_or_else(|| bad(format!("header dimensions {dims_text} are impossibly large")))?;

    // Check the claim against the file before allocating for it.
    if gz {
        let max = file_len.saturating_mul(MAX_GZIP_RATIO);
        if payload > max {
            return Err(bad(format!(
                "truncated: header ({dims_text}) claims {payload} data bytes, \
                 more than a {file_len}-byte gzip file can hold"
            )));
        }
    } else if header_len + payload > file_len {
        return Err(bad(format!("truncated: header ({dims_text}) needs {} bytes, found {file_len}", header_len + payload)));
    }
    if payload > MAX_BYTES {
        return Err(bad(format!(
            "header ({dims_text}) claims {payload} data bytes, more than the {} MiB gpulab reads from an IDX file; \
             use a smaller split",
            MAX_BYTES >> 20
        )));
    }
    Ok(Header { dims, payload, header_len, dims_text })
}

/// Reads and checks an IDX stream of `file_len` bytes on disk (compressed when `gz`).
fn decode(mut reader: impl Read, file_len: u64, gz: bool, magic: u32) -> Result<(Vec<u32>, Vec<u8>), Bad> {
    let bad = |problem: String| Bad::Format(problem);
    let Header { dims, payload, header_len, dims_text } = read_header(&mut reader, file_len, gz, magic)?;
    let payload_len = usize::try_from(payload).map_err(|_| bad(format!("header dimensions {dims_text} are too large for this machine")))?;

    let mut data = Vec::with_capacity(payload_len);
    (&mut reader).take(payload).read_to_end(&mut data).map_err(Bad::Io)?;
    if data.len() < payload_len {
        return Err(bad(format!(
            "truncated: header ({dims_text}) needs {} bytes, found {}",
            header_len + payload,
            header_len + data.len() as u64
        )));
    }
    // Reading to the end also makes the gzip decoder verify its checksum.
    let mut extra = [0u8; 1];
    if read_up_to(&mut reader, &mut extra).map_err(Bad::Io)? > 0 {
        return Err(bad(format!("trailing data: header ({dims_text}) accounts for {} bytes but the file is longer", header_len + payload)));
    }
    Ok((dims, data))
}

/// Like read_exact, but reports how many bytes it got instead of failing at EOF.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(k) => filled += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(dims: &[u32]) -> Vec<u8> {
        let mut b = IMAGES_MAGIC.to_be_bytes().to_vec();
        dims.iter().for_each(|d| b.extend(d.to_be_bytes()));
        b
    }

    /// The header alone against a file's length: a 10 GB sparse file whose length matches its
    /// claim, and the same claim in a gzip file, are refused by the cap; a claim within both
    /// bounds gives its dimensions and data length.
    #[test]
    fn header_claims_are_held_to_the_cap_and_the_files_length() {
        let big = header(&[111_112, 300, 300]);
        for gz in [false, true] {
            let e = check_header(&big, 10_000_080_016, gz, IMAGES_MAGIC).unwrap_err();
            assert!(e.contains("10000080000 data bytes") && e.contains("1024 MiB"), "{e}");
        }
        let e = check_header(&big, 1_000, false, IMAGES_MAGIC).unwrap_err();
        assert!(e.contains("truncated") && e.contains("found 1000"), "{e}");
        assert_eq!(check_header(&header(&[2, 3, 3]), 34, false, IMAGES_MAGIC).unwrap(), (vec![2, 3, 3], 18));
    }
}
