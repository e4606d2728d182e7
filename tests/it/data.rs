//! Integration tests for gpulab::data: the bundled digits, the shapes generator,
//! IDX parsing (including hostile files), the batcher and spec parsing.

use std::io::Write;
use std::path::Path;

use gpulab::data::batcher::{batches_per_epoch, epoch_order, gather};
use gpulab::data::{self, DataError, Dataset, DatasetSpec, ShapesConfig};

fn assert_unit_range(xs: &[f32]) {
    assert!(xs.iter().all(|v| (0.0..=1.0).contains(v)), "a feature is outside [0, 1]");
}

fn class_counts(y: &[u32], classes: usize) -> Vec<usize> {
    let mut c = vec![0; classes];
    for &l in y {
        c[l as usize] += 1;
    }
    c
}

fn assert_same(a: &Dataset, b: &Dataset) {
    assert_eq!(a.train_x, b.train_x);
    assert_eq!(a.train_y, b.train_y);
    assert_eq!(a.val_x, b.val_x);
    assert_eq!(a.val_y, b.val_y);
}

// ---------------------------------------------------------------- digits

#[test]
fn digits_sizes_ranges_and_split() {
    let d = data::load(&DatasetSpec::Digits, 1).unwrap();
    assert_eq!(d.name, "digits");
    assert!(d.source.contains("CC BY 4.0"));
    assert_eq!((d.features, d.shape, d.classes), (64, [1, 8, 8], 10));
    assert_eq!(d.class_names, (0..10).map(|c| c.to_string()).collect::<Vec<_>>());
    assert_eq!(d.train_len() + d.val_len(), 1797);
    assert_eq!((d.train_len(), d.val_len()), (1442, 355));
    assert_eq!(d.train_x.len(), d.train_len() * 64);
    assert_eq!(d.val_x.len(), d.val_len() * 64);
    assert_unit_range(&d.train_x);
    assert_unit_range(&d.val_x);
    // Pixels were 0..=16 integers, so both ends of the range occur.
    assert!(d.train_x.contains(&1.0) && d.train_x.contains(&0.0));
    // Stratified: per class, validation gets floor(count / 5).
    let tr = class_counts(&d.train_y, 10);
    let va = class_counts(&d.val_y, 10);
    let total = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180];
    for c in 0..10 {
        assert_eq!(tr[c] + va[c], total[c], "class {c}");
        assert_eq!(va[c], total[c] / 5, "class {c}");
        assert!(tr[c] > 0 && va[c] > 0);
    }
    // The first sample in the file is a 0 and lands in train.
    assert_eq!(d.train_y[0], 0);
    assert_eq!(d.train_x[2], 5.0 / 16.0);
}

#[test]
fn digits_ignores_seed_and_is_repeatable() {
    let a = data::load(&DatasetSpec::Digits, 1).unwrap();
    let b = data::load(&DatasetSpec::Digits, 99).unwrap();
    assert_same(&a, &b);
}

// ---------------------------------------------------------------- shapes

fn shapes(cfg: ShapesConfig, seed: u64) -> Dataset {
    data::load(&DatasetSpec::Shapes(cfg), seed).unwrap()
}

#[test]
fn shapes_seed_determines_data() {
    let cfg = ShapesConfig { n: 200, ..Default::default() };
    let a = shapes(cfg.clone(), 5);
    let b = shapes(cfg.clone(), 5);
    let c = shapes(cfg, 6);
    assert_same(&a, &b);
    assert_ne!(a.train_x, c.train_x);
    assert_eq!(a.source, "generated (seed 5)");
}

#[test]
fn shapes_sizes_ranges_and_balance() {
    for cfg in [
        ShapesConfig::default(),
        ShapesConfig { res: 32, channels: 3, n: 503, noise: 0.2, classes: 3 },
        ShapesConfig { res: 8, channels: 4, n: 10, noise: 0.0, classes: 2 },
    ] {
        let d = shapes(cfg.clone(), 42);
        let f = cfg.channels * cfg.res * cfg.res;
        assert_eq!(d.features, f);
        assert_eq!(d.shape, [cfg.channels, cfg.res, cfg.res]);
        assert_eq!(d.classes, cfg.classes);
        assert_eq!(d.class_names.len(), cfg.classes);
        assert_eq!(d.train_len(), cfg.n * 4 / 5);
        assert_eq!(d.train_len() + d.val_len(), cfg.n);
        assert_eq!(d.train_x.len(), d.train_len() * f);
        assert_eq!(d.val_x.len(), d.val_len() * f);
        assert_unit_range(&d.train_x);
        assert_unit_range(&d.val_x);
        for (y, len) in [(&d.train_y, d.train_len()), (&d.val_y, d.val_len())] {
            for (c, &k) in class_counts(y, cfg.classes).iter().enumerate() {
                let fair = len / cfg.classes;
                assert!(k == fair || k == fair + 1, "class {c}: {k} of {len}");
            }
        }
        // Every image has something drawn on it.
        for img in d.train_x.chunks(f) {
            assert!(img.iter().cloned().fold(0.0, f32::max) > 0.3);
        }
    }
    let d = shapes(ShapesConfig::default(), 0);
    assert_eq!(d.name, "shapes 16x16x1 n=4000");
    assert_eq!((d.train_len(), d.val_len()), (3200, 800));
}

#[test]
fn shapes_colour_varies_across_channels() {
    let cfg = ShapesConfig { channels: 3, noise: 0.0, n: 50, ..Default::default() };
    let d = shapes(cfg, 3);
    let plane = 16 * 16;
    let differs = d.train_x.chunks(3 * plane).filter(|img| img[..plane] != img[plane..2 * plane]).count();
    assert!(differs > 30, "only {differs} of 40 images have distinct channels");
}

/// A cheap guard against a generator that draws nothing useful. Nearest class
/// centroid cannot cope with the random positions (it scores about 0.48, chance is
/// 0.25); a 256-128-4 MLP with plain SGD (lr 0.05, batch 32) reached 0.93 on this
/// set after 30 epochs when the generator was written.
#[test]
fn shapes_are_learnable() {
    let d = shapes(ShapesConfig::default(), 1);
    let f = d.features;
    let mut centroid = vec![vec![0f64; f]; d.classes];
    let counts = class_counts(&d.train_y, d.classes);
    for (img, &y) in d.train_x.chunks(f).zip(&d.train_y) {
        for (c, &p) in centroid[y as usize].iter_mut().zip(img) {
            *c += p as f64 / counts[y as usize] as f64;
        }
    }
    let correct = d
        .val_x
        .chunks(f)
        .zip(&d.val_y)
        .filter(|&(img, &y)| {
            let dist = |c: &Vec<f64>| c.iter().zip(img).map(|(a, &b)| (a - b as f64).powi(2)).sum::<f64>();
            let best = (0..d.classes).min_by(|&a, &b| dist(&centroid[a]).total_cmp(&dist(&centroid[b]))).unwrap();
            best == y as usize
        })
        .count();
    let acc = correct as f64 / d.val_len() as f64;
    assert!(acc > CENTROID_MIN_ACC, "nearest-centroid accuracy {acc}");
}
const CENTROID_MIN_ACC: f64 = 0.4;

#[test]
fn shapes_invalid_configs_are_errors() {
    let ok = ShapesConfig::default();
    for bad in [
        ShapesConfig { res: 7, ..ok.clone() },
        ShapesConfig { res: 257, ..ok.clone() },
        ShapesConfig { channels: 0, ..ok.clone() },
        ShapesConfig { channels: 5, ..ok.clone() },
        ShapesConfig { n: 9, ..ok.clone() },
        ShapesConfig { noise: -0.1, ..ok.clone() },
        ShapesConfig { noise: 1.5, ..ok.clone() },
        ShapesConfig { noise: f32::NAN, ..ok.clone() },
        ShapesConfig { classes: 1, ..ok.clone() },
        ShapesConfig { classes: 5, ..ok.clone() },
        ShapesConfig { res: 256, channels: 4, n: 1 << 20, ..ok.clone() },
    ] {
        let err = data::load(&DatasetSpec::Shapes(bad.clone()), 0).unwrap_err();
        assert!(matches!(err, DataError::Invalid(_)), "{bad:?} gave {err}");
    }
}

// ---------------------------------------------------------------- idx

fn idx_bytes(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = magic.to_be_bytes().to_vec();
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.extend_from_slice(data);
    v
}

fn images(n: u32, rows: u32, cols: u32) -> Vec<u8> {
    let data: Vec<u8> = (0..n * rows * cols).map(|i| (i * 7 % 256) as u8).collect();
    idx_bytes(0x803, &[n, rows, cols], &data)
}

fn labels(n: u32) -> Vec<u8> {
    let data: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
    idx_bytes(0x801, &[n], &data)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

/// A valid set: 12 train and 5 test images of 4x3 pixels.
fn valid_dir(gz: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("train-images-idx3-ubyte", images(12, 4, 3)),
        ("train-labels-idx1-ubyte", labels(12)),
        ("t10k-images-idx3-ubyte", images(5, 4, 3)),
        ("t10k-labels-idx1-ubyte", labels(5)),
    ];
    for (name, bytes) in files {
        if gz {
            write(dir.path(), &format!("{name}.gz"), &gzip(&bytes));
        } else {
            write(dir.path(), name, &bytes);
        }
    }
    dir
}

fn load_idx(dir: &Path) -> Result<Dataset, DataError> {
    data::load(&DatasetSpec::Idx(dir.to_path_buf()), 0)
}

#[test]
fn idx_loads_plain_and_gzipped() {
    for gz in [false, true] {
        let dir = valid_dir(gz);
        let d = load_idx(dir.path()).unwrap();
        assert_eq!((d.features, d.shape, d.classes), (12, [1, 4, 3], 10));
        assert_eq!((d.train_len(), d.val_len()), (12, 5));
        assert_eq!(d.train_y, (0..12).map(|i| i % 10).collect::<Vec<u32>>());
        assert_eq!(d.train_x[1], 7.0 / 255.0);
        assert_eq!(d.train_x.len(), 12 * 12);
        assert_unit_range(&d.train_x);
        assert_eq!(d.class_names[9], "9");
        assert!(d.name.starts_with("idx:"));
    }
}

/// Replaces one file of a valid (plain) set, loads, and returns the error message.
fn idx_error(name: &str, bytes: &[u8]) -> String {
    let dir = valid_dir(false);
    let base = name.trim_end_matches(".gz");
    std::fs::remove_file(dir.path().join(base)).unwrap();
    write(dir.path(), name, bytes);
    let err = load_idx(dir.path()).expect_err("malformed input must be an error");
    err.to_string()
}

fn assert_msg(msg: &str, file: &str, words: &[&str]) {
    assert!(msg.contains(file), "message does not name {file}: {msg}");
    for w in words {
        assert!(msg.contains(w), "message lacks \"{w}\": {msg}");
    }
}

#[test]
fn idx_bad_magic() {
    let mut bytes = images(12, 4, 3);
    bytes[3] = 0x01;
    let msg = idx_error("train-images-idx3-ubyte", &bytes);
    assert_msg(&msg, "train-images-idx3-ubyte", &["magic", "0x00000803", "0x00000801"]);
    // A gzip file without the .gz suffix gets a hint.
    let msg = idx_error("train-labels-idx1-ubyte", &gzip(&labels(12)));
    assert_msg(&msg, "train-labels-idx1-ubyte", &["magic", "gzip"]);
}

#[test]
fn idx_truncated_header() {
    let msg = idx_error("t10k-images-idx3-ubyte", &images(5, 4, 3)[..10]);
    assert_msg(&msg, "t10k-images-idx3-ubyte", &["truncated header", "expected 16 bytes, found 10"]);
    let msg = idx_error("t10k-labels-idx1-ubyte", &[0, 0]);
    assert_msg(&msg, "t10k-labels-idx1-ubyte", &["truncated header"]);
}

#[test]
fn idx_truncated_data() {
    let bytes = images(12, 4, 3); // 16 + 144 bytes
    let msg = idx_error("train-images-idx3-ubyte", &bytes[..100]);
    assert_msg(&msg, "train-images-idx3-ubyte", &["truncated", "needs 160 bytes, found 100"]);
    let msg = idx_error("train-images-idx3-ubyte.gz", &gzip(&bytes[..100]));
    assert_msg(&msg, "train-images-idx3-ubyte.gz", &["truncated", "needs 160 bytes, found 100"]);
}

#[test]
fn idx_trailing_data() {
    let mut bytes = labels(12);
    bytes.push(0);
    let msg = idx_error("train-labels-idx1-ubyte", &bytes);
    assert_msg(&msg, "train-labels-idx1-ubyte", &["trailing"]);
}

#[test]
fn idx_count_mismatch() {
    let msg = idx_error("t10k-labels-idx1-ubyte", &labels(4));
    assert_msg(&msg, "t10k-labels-idx1-ubyte", &["count mismatch", "4 labels", "5 images"]);
}

#[test]
fn idx_label_out_of_range() {
    let mut bytes = labels(12);
    bytes[8 + 3] = 10;
    let msg = idx_error("train-labels-idx1-ubyte", &bytes);
    assert_msg(&msg, "train-labels-idx1-ubyte", &["out of range", "value 10", "index 3"]);
}

#[test]
fn idx_zero_images() {
    let msg = idx_error("train-images-idx3-ubyte", &idx_bytes(0x803, &[0, 28, 28], &[]));
    assert_msg(&msg, "train-images-idx3-ubyte", &["zero images"]);
}

#[test]
fn idx_missing_file() {
    let dir = valid_dir(false);
    std::fs::remove_file(dir.path().join("t10k-labels-idx1-ubyte")).unwrap();
    let msg = load_idx(dir.path()).unwrap_err().to_string();
    assert_msg(&msg, "t10k-labels-idx1-ubyte", &["missing", "t10k-labels-idx1-ubyte.gz"]);
    let msg = load_idx(&dir.path().join("nope")).unwrap_err().to_string();
    assert!(msg.contains("nope"), "{msg}");
}

#[test]
fn idx_huge_header_claim_is_refused_before_allocating() {
    // 4 billion 28x28 images claimed by a 100-byte file.
    let mut bytes = idx_bytes(0x803, &[4_000_000_000, 28, 28], &[]);
    bytes.resize(100, 0);
    let msg = idx_error("train-images-idx3-ubyte", &bytes);
    assert_msg(&msg, "train-images-idx3-ubyte", &["truncated", "found 100"]);
    // The same claim inside a small gzip file.
    let msg = idx_error("train-images-idx3-ubyte.gz", &gzip(&bytes));
    assert_msg(&msg, "train-images-idx3-ubyte.gz", &["truncated", "4000000000x28x28"]);
    // Dimensions whose product overflows u64.
    let msg = idx_error("train-images-idx3-ubyte", &idx_bytes(0x803, &[u32::MAX; 3], &[]));
    assert_msg(&msg, "train-images-idx3-ubyte", &["impossibly large"]);
}

/// A header that claims more than gpulab reads from an IDX file (`MAX_BYTES`) is refused before
/// anything is allocated, also when the file really is that long (a sparse file: the length is
/// real, the blocks are not) and when it is gzipped.
#[test]
fn idx_claims_over_the_cap_are_refused_for_plain_and_gzipped_files() {
    use gpulab::data::idx::{IMAGES_MAGIC, MAX_BYTES};
    // 1 GiB + 1 of pixels: 1 image of 1 x (MAX_BYTES + 1).
    let claim = MAX_BYTES + 1;
    let header = idx_bytes(IMAGES_MAGIC, &[1, 1, claim as u32], &[]);
    let dir = valid_dir(false);
    let path = dir.path().join("train-images-idx3-ubyte");
    std::fs::write(&path, &header).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(header.len() as u64 + claim).unwrap();
    let msg = load_idx(dir.path()).unwrap_err().to_string();
    assert_msg(&msg, "train-images-idx3-ubyte", &["1x1x1073741825", "more than the 1024 MiB"]);
    // The gzipped form: incompressible filler makes a file big enough (> 1 MiB) that deflate's
    // ratio alone would let the claim through; the cap refuses it.
    let mut filler = header.clone();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    filler.extend((0..(3 << 19)).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    }));
    let msg = idx_error("train-images-idx3-ubyte.gz", &gzip(&filler));
    assert_msg(&msg, "train-images-idx3-ubyte.gz", &["1x1x1073741825", "more than the 1024 MiB"]);
}

#[test]
fn idx_corrupt_gzip() {
    let mut bytes = gzip(&images(12, 4, 3));
    // Break the stored CRC32 (the 8 bytes before the end hold CRC and length).
    let n = bytes.len();
    bytes[n - 8] ^= 0xff;
    let msg = idx_error("train-images-idx3-ubyte.gz", &bytes);
    assert_msg(&msg, "train-images-idx3-ubyte.gz", &["corrupt gzip"]);
    // Not gzip at all.
    let msg = idx_error("train-images-idx3-ubyte.gz", b"this is not gzip data at all, honest");
    assert_msg(&msg, "train-images-idx3-ubyte.gz", &["corrupt gzip"]);
}

#[test]
fn idx_image_size_mismatch() {
    let msg = idx_error("t10k-images-idx3-ubyte", &images(5, 3, 4));
    assert_msg(&msg, "t10k-images-idx3-ubyte", &["size mismatch", "3x4", "4x3"]);
}

// ---------------------------------------------------------------- batcher

#[test]
fn epoch_order_is_a_seeded_permutation() {
    for n in [0usize, 1, 2, 17, 1000] {
        let mut o = epoch_order(n, 3, 0);
        o.sort_unstable();
        assert_eq!(o, (0..n as u32).collect::<Vec<_>>());
    }
    assert_eq!(epoch_order(1000, 3, 4), epoch_order(1000, 3, 4));
    assert_ne!(epoch_order(1000, 3, 4), epoch_order(1000, 3, 5));
    assert_ne!(epoch_order(1000, 3, 4), epoch_order(1000, 4, 4));
    assert_ne!(epoch_order(1000, 3, 0), (0..1000).collect::<Vec<u32>>());
}

#[test]
fn gather_copies_rows_and_labels() {
    let x: Vec<f32> = (0..15).map(|v| v as f32).collect(); // 5 rows of 3
    let y = vec![10, 11, 12, 13, 14];
    let (mut xb, mut yb) = (vec![99.0; 40], vec![7; 9]);
    gather(&x, &y, 3, &[4, 0, 4], &mut xb, &mut yb);
    assert_eq!(xb, vec![12.0, 13.0, 14.0, 0.0, 1.0, 2.0, 12.0, 13.0, 14.0]);
    assert_eq!(yb, vec![14, 10, 14]);
    gather(&x, &y, 3, &[], &mut xb, &mut yb);
    assert!(xb.is_empty() && yb.is_empty());
}

#[test]
fn batches_per_epoch_counts() {
    assert_eq!(batches_per_epoch(10, 3, true), 3);
    assert_eq!(batches_per_epoch(10, 3, false), 4);
    assert_eq!(batches_per_epoch(9, 3, true), 3);
    assert_eq!(batches_per_epoch(9, 3, false), 3);
    assert_eq!(batches_per_epoch(2, 3, true), 0);
    assert_eq!(batches_per_epoch(0, 3, false), 0);
    assert_eq!(batches_per_epoch(5, 0, false), 0);
}

// ---------------------------------------------------------------- spec parsing

#[test]
fn spec_parses_valid_forms() {
    let p = |s: &str| s.parse::<DatasetSpec>().unwrap();
    assert_eq!(p("digits"), DatasetSpec::Digits);
    assert_eq!(p("shapes"), DatasetSpec::Shapes(ShapesConfig::default()));
    assert_eq!(p("shapes:res=32,channels=3"), DatasetSpec::Shapes(ShapesConfig { res: 32, channels: 3, ..Default::default() }));
    assert_eq!(
        p("shapes:res=32,channels=3,n=20000,noise=0.2,classes=3"),
        DatasetSpec::Shapes(ShapesConfig { res: 32, channels: 3, n: 20000, noise: 0.2, classes: 3 })
    );
    assert_eq!(p("idx:/tmp/x"), DatasetSpec::Idx("/tmp/x".into()));
    assert_eq!(p("idx:C:\\mnist"), DatasetSpec::Idx("C:\\mnist".into()));
}

#[test]
fn spec_rejects_bad_forms_with_help() {
    for (s, word) in [
        ("nope", "unknown dataset"),
        ("", "unknown dataset"),
        ("shapes:res=0", "res=0"),
        ("shapes:bogus=1", "bogus"),
        ("shapes:res=abc", "res"),
        ("shapes:res", "key=value"),
        ("shapes:res=16,res=32", "twice"),
        ("shapes:noise=2", "noise"),
        ("digits:x=1", "no options"),
        ("idx:", "directory"),
        ("idx", "directory"),
    ] {
        let err = s.parse::<DatasetSpec>().unwrap_err();
        assert!(matches!(err, DataError::Spec(_)), "{s}: {err:?}");
        let msg = err.to_string();
        assert!(msg.contains(word), "{s}: {msg}");
    }
    let msg = "nope".parse::<DatasetSpec>().unwrap_err().to_string();
    assert!(msg.contains("digits") && msg.contains("shapes:res=") && msg.contains("idx:DIR"), "{msg}");
}

#[test]
fn spec_display_round_trips() {
    for s in ["digits", "shapes", "shapes:res=32,channels=3", "shapes:n=20000,noise=0.2,classes=2", "idx:/tmp/x"] {
        let spec: DatasetSpec = s.parse().unwrap();
        assert_eq!(spec.to_string(), s);
        assert_eq!(spec.to_string().parse::<DatasetSpec>().unwrap(), spec);
    }
}

proptest::proptest! {
    #[test]
    fn spec_round_trips_any_valid_shapes_config(
        res in 8usize..=256, channels in 1usize..=4, n in 10usize..=4000, // 256x256x4 x 4000 is just under the 4 GiB cap
        noise in 0.0f32..=1.0, classes in 2usize..=4,
    ) {
        let spec = DatasetSpec::Shapes(ShapesConfig { res, channels, n, noise, classes });
        proptest::prop_assert_eq!(spec.to_string().parse::<DatasetSpec>().unwrap(), spec);
    }

    #[test]
    fn epoch_order_is_always_a_permutation(n in 0usize..500, seed: u64, epoch: u64) {
        let mut o = epoch_order(n, seed, epoch);
        o.sort_unstable();
        proptest::prop_assert_eq!(o, (0..n as u32).collect::<Vec<_>>());
    }
}
