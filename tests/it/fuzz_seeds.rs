//! The fuzz targets' seed corpora (fuzz/corpus/<target>/): files the code itself writes
//! (`valid-*`) and a few broken ones (`bad-*`). `write_fuzz_seeds` makes them (run it after a
//! format change: `cargo test --release --test it -- --ignored fuzz_seeds::write`); the other
//! test keeps them true, so the fuzzers always start from inputs the parsers accept.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use gpulab::checkpoint::CheckpointMeta;
use gpulab::checkpoint::format::{self, NamedTensor, RngState};
use gpulab::exercises::{self, CollectSink};
use gpulab::nn::{MlpConfig, OptimizerKind};
use gpulab::platform::{Scenario, scenario, traffic_csv};
use gpulab::quant::{ActScales, QuantizedLayer, QuantizedModel};
use gpulab::tensor::QuantGranularity;
use gpulab::train::{LoaderPosition, TrainConfig};

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target)
}

fn checkpoint_bytes(kind: OptimizerKind, poison: bool) -> Vec<u8> {
    let arch = MlpConfig { input: 4, hidden: vec![3], classes: 2, conv: None };
    let tensors: BTreeMap<String, NamedTensor> = format::tensor_specs(&arch, kind)
        .into_iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let mut data: Vec<f32> = (0..n).map(|i| i as f32 * 0.125 - 0.5).collect();
            if poison {
                data[0] = f32::NAN;
            }
            (name, NamedTensor::f32(shape, data))
        })
        .collect();
    let cfg = TrainConfig { hidden: arch.hidden.clone(), optimizer: kind, ..TrainConfig::default() };
    let meta = CheckpointMeta {
        position: LoaderPosition { step: 3, epoch: 0, batch: 3 },
        optimizer_step: 3,
        rng: RngState { generator: "chacha8".into(), seed: cfg.seed, stream: 0 },
        grad_scaler: None,
        precision: "fp32".into(),
        hyperparameters: cfg,
        architecture: arch,
        dataset: "digits".into(),
        gpulab_version: "fuzz-seed".into(),
    };
    format::encode(&meta, &tensors).unwrap()
}

fn int8_bytes(activations: ActScales, weights: QuantGranularity) -> Vec<u8> {
    let widths = [4usize, 3, 2];
    let layers = widths
        .windows(2)
        .map(|w| QuantizedLayer {
            weight: (0..w[0] * w[1]).map(|i| (i as i8).wrapping_mul(37)).collect(),
            shape: [w[0], w[1]],
            weight_scales: vec![0.02; w[1]],
            input_scale: (activations == ActScales::Static).then_some(0.05),
            bias: (0..w[1]).map(|i| i as f32 * 0.1).collect(),
        })
        .collect();
    gpulab::quant::export::to_bytes(&QuantizedModel { layers, weights, activations }, &[("observer", "minmax".into())]).unwrap()
}

fn idx_bytes(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut b = magic.to_be_bytes().to_vec();
    for d in dims {
        b.extend(d.to_be_bytes());
    }
    b.extend(data);
    b
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// With the idx target's first byte (bit 0: gzipped, bit 1: labels) before the file.
fn idx_seed(mode: u8, file: &[u8]) -> Vec<u8> {
    let mut b = vec![mode];
    b.extend(file);
    b
}

/// Every seed: (target, file name, bytes); `report` is a real exercise run's report.json.
fn seeds(report: Vec<u8>) -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out: Vec<(&'static str, String, Vec<u8>)> = Vec::new();
    let mut add = |t: &'static str, name: &str, bytes: Vec<u8>| out.push((t, name.to_string(), bytes));

    let sgd = checkpoint_bytes(OptimizerKind::Sgd, false);
    add("checkpoint", "valid-sgd.safetensors", sgd.clone());
    add("checkpoint", "valid-adamw.safetensors", checkpoint_bytes(OptimizerKind::AdamW, false));
    add("checkpoint", "bad-truncated.safetensors", sgd[..sgd.len() / 2].to_vec());
    let mut flipped = sgd.clone();
    *flipped.last_mut().unwrap() ^= 0x40;
    add("checkpoint", "bad-checksum.safetensors", flipped);
    add("checkpoint", "bad-nan.safetensors", checkpoint_bytes(OptimizerKind::Sgd, true));

    let int8 = int8_bytes(ActScales::Static, QuantGranularity::PerChannel);
    add("int8_model", "valid-static-per-channel.safetensors", int8.clone());
    add("int8_model", "valid-dynamic-per-tensor.safetensors", int8_bytes(ActScales::Dynamic, QuantGranularity::PerTensor));
    add("int8_model", "bad-truncated.safetensors", int8[..int8.len() - 7].to_vec());

    for name in scenario::PRESETS {
        add("scenario", &format!("valid-{name}.json"), Scenario::preset(name).unwrap().to_json().into_bytes());
    }
    let stuck = Scenario::preset("steady-day").unwrap().to_json().replace("\"checkpoint_write_s\": 60.0", "\"checkpoint_write_s\": 0.0");
    add("scenario", "bad-no-progress.json", stuck.into_bytes());
    add("scenario", "bad-not-json.json", b"{\"duration_h\": 24, \"traffic\": [".to_vec());

    add("traffic_csv", "valid-quarter-hours.csv", b"hour,rps\n0,8.5\n0.25,9.1\n1,12\n2.5,0\n".to_vec());
    add("traffic_csv", "bad-decreasing.csv", b"hour,rps\n0,1\n2,3\n1,4\n".to_vec());
    add("traffic_csv", "bad-nan.csv", b"hour,rps\n0,NaN\n".to_vec());
    add("traffic_csv", "bad-header.csv", b"time,rate\n0,1\n".to_vec());

    let images = idx_bytes(0x803, &[2, 3, 3], &(0..18).map(|i| i * 14).collect::<Vec<u8>>());
    let labels = idx_bytes(0x801, &[4], &[0, 9, 3, 7]);
    add("idx", "valid-images", idx_seed(0, &images));
    add("idx", "valid-labels", idx_seed(2, &labels));
    add("idx", "valid-images.gz", idx_seed(1, &gzip(&images)));
    add("idx", "valid-labels.gz", idx_seed(3, &gzip(&labels)));
    add("idx", "bad-truncated", idx_seed(0, &images[..images.len() - 5]));
    add("idx", "bad-huge-claim.gz", idx_seed(1, &gzip(&idx_bytes(0x803, &[60_000, 280, 280], &[1, 2, 3]))));
    // Bit 2: the header alone against a file length (8 bytes, little-endian) the file system
    // claims, as a sparse file's: within the cap, and a 10 GB claim the length matches.
    let sparse = |len: u64, header: &[u8]| idx_seed(4, &[&len.to_le_bytes()[..], header].concat());
    add("idx", "valid-header-sparse", sparse(34, &images[..16]));
    add("idx", "bad-header-sparse-over-cap", sparse(10_000_080_016, &idx_bytes(0x803, &[111_112, 300, 300], &[])));

    // A column's decimals past what `format!` takes (a crash once).
    let text = String::from_utf8(report.clone()).unwrap();
    add("report_json", "valid-huge-decimals.json", text.replacen("\"decimals\": ", "\"decimals\": 70000", 1).into_bytes());
    add("report_json", "valid-cpu-vs-gpu.json", report);
    add("report_json", "bad-not-json.json", b"[[[[[[[[".to_vec());

    // The predict target's first byte picks the width: (byte % 16) + 1 features.
    add("predict_body", "valid-one", b"\x03{\"input\": [0.5, -1, 2e3, 0]}".to_vec());
    add("predict_body", "valid-batch", b"\x01{\"inputs\": [[1, 2], [3.5, -4e-3], [0, 0]]}".to_vec());
    add("predict_body", "bad-empties", b"\x01{\"inputs\": [[], [], [], [], [], [], [], [], [], []]}".to_vec());
    add("predict_body", "bad-width", b"\x00{\"input\": [1, 2, 3]}".to_vec());
    add("predict_body", "bad-overflow", b"\x00{\"input\": [1e999]}".to_vec());
    out
}

/// Whether each target's parser accepts `bytes` (the fuzz targets' view of the input).
fn accepted(target: &str, bytes: &[u8]) -> bool {
    let path = Path::new("seed");
    match target {
        "checkpoint" => format::decode(bytes, path).is_ok(),
        "int8_model" => gpulab::quant::export::from_bytes(bytes, path).is_ok(),
        "scenario" => Scenario::parse(bytes).is_ok(),
        "traffic_csv" => traffic_csv::parse(bytes).is_ok(),
        "idx" => {
            let magic = if bytes[0] & 2 == 2 { gpulab::data::idx::LABELS_MAGIC } else { gpulab::data::idx::IMAGES_MAGIC };
            let gz = bytes[0] & 1 == 1;
            if bytes[0] & 4 == 4 {
                let (len, header) = bytes[1..].split_at(8);
                return gpulab::data::idx::check_header(header, u64::from_le_bytes(len.try_into().unwrap()), gz, magic).is_ok();
            }
            gpulab::data::idx::parse(&bytes[1..], gz, magic).is_ok()
        }
        "report_json" => gpulab::report::parse_json(bytes).is_ok(),
        "predict_body" => gpulab::serve::parse::parse_predict_body(&bytes[1..], (bytes[0] % 16) as usize + 1, 8).is_ok(),
        other => panic!("no fuzz target {other}"),
    }
}

#[test]
fn the_checked_in_fuzz_seeds_are_accepted_or_refused_as_their_names_say() {
    let targets = ["checkpoint", "int8_model", "scenario", "traffic_csv", "idx", "report_json", "predict_body"];
    let mut total = 0u64;
    for target in targets {
        let dir = corpus(target);
        let mut valid = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&path).unwrap();
            total += bytes.len() as u64;
            // Crashes found by fuzzing are kept as `crash-*`: they must only not panic.
            let ok = accepted(target, &bytes);
            if name.starts_with("valid-") {
                assert!(ok, "{target}/{name} is refused: regenerate the seeds (see this file's header)");
                valid += 1;
            } else if name.starts_with("bad-") {
                assert!(!ok, "{target}/{name} is accepted");
            }
        }
        assert!(valid > 0, "{target} has no valid seed");
    }
    assert!(total < 1 << 20, "the seed corpora hold {total} bytes; keep them under 1 MiB");
}

/// Writes the seeds (a real cpu-vs-gpu run on the CPU gives the report's).
#[test]
#[ignore = "writes fuzz/corpus; run by hand after a format change"]
fn write_fuzz_seeds() {
    let ex = exercises::find("cpu-vs-gpu").unwrap();
    let mut s = ex.settings();
    let sets = ["backends=cpu", "epochs=1", "sweep_sizes=32,64", "sweep_runs=1", "size=as-set"].map(String::from);
    s.apply(&sets).unwrap();
    let report = ex.run(&s, &mut CollectSink::default()).unwrap();
    let json = serde_json::to_vec_pretty(&report).unwrap();
    for (target, name, bytes) in seeds(json) {
        std::fs::create_dir_all(corpus(target)).unwrap();
        std::fs::write(corpus(target).join(name), bytes).unwrap();
    }
}
