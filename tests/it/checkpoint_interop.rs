//! A gpulab checkpoint opens in Python's `safetensors` package (with numpy) with the documented
//! names, shapes, dtypes, values and metadata. Skips without Python or the package, except in
//! CI (GPULAB_REQUIRE_PYTHON=1), where that is a failure.

use std::process::Command;

use gpulab::checkpoint::store;
use gpulab::nn::OptimizerKind;

use crate::checkpoint::{small_spec, train};

pub(crate) const SCRIPT: &str = r#"
import json, sys
from safetensors import safe_open
from safetensors.numpy import load_file
path = sys.argv[1]
tensors = load_file(path)
with safe_open(path, framework="numpy") as f:
    meta = f.metadata()
print(json.dumps({
    "tensors": {k: {"dtype": str(v.dtype), "shape": list(v.shape), "sum": float(v.astype("float64").sum())} for k, v in tensors.items()},
    "metadata": meta,
}))
"#;

/// The interpreter: `GPULAB_PYTHON` when set (e.g. a venv with PyTorch), else python3, python.
pub(crate) fn python_with_safetensors() -> Option<String> {
    let chosen = std::env::var("GPULAB_PYTHON").ok().filter(|p| !p.is_empty());
    let candidates: Vec<String> = match chosen {
        Some(p) => vec![p],
        None => vec!["python3".into(), "python".into()],
    };
    candidates.into_iter().find(|py| Command::new(py).args(["-c", "import safetensors, numpy"]).output().is_ok_and(|o| o.status.success()))
}

/// python3 with safetensors+numpy, or None after printing why `test` is skipped; a failure
/// instead when GPULAB_REQUIRE_PYTHON=1 (CI).
pub(crate) fn python_or_skip(test: &str) -> Option<String> {
    let py = python_with_safetensors();
    if py.is_none() {
        let required = std::env::var("GPULAB_REQUIRE_PYTHON").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "GPULAB_REQUIRE_PYTHON=1 but python3 with safetensors and numpy is not available (python3 -m pip install safetensors numpy)"
        );
        eprintln!("SKIPPED {test}: no python3 with safetensors+numpy (set GPULAB_REQUIRE_PYTHON=1 to make this a failure)");
    }
    py
}

#[test]
fn python_safetensors_reads_a_gpulab_checkpoint() {
    let Some(py) = python_or_skip("python_safetensors_reads_a_gpulab_checkpoint") else { return };
    let tmp = tempfile::tempdir().unwrap();
    train(&small_spec(tmp.path(), OptimizerKind::Sgd, 0));
    let path = store::list(tmp.path()).unwrap().remove(0);
    let ours = store::read(&path).unwrap();
    let out = Command::new(&py).args(["-c", SCRIPT]).arg(&path).output().unwrap();
    assert!(out.status.success(), "python failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tensors = v["tensors"].as_object().unwrap();
    let want = gpulab::checkpoint::format::tensor_specs(&ours.meta.architecture, OptimizerKind::Sgd);
    assert_eq!(tensors.len(), want.len(), "python sees {:?}", tensors.keys().collect::<Vec<_>>());
    for (name, shape) in want {
        let t = &tensors[&name];
        assert_eq!(t["dtype"], "float32", "{name}");
        assert_eq!(t["shape"], serde_json::json!(shape), "{name}");
        let sum: f64 = ours.tensors[&name].data.iter().map(|x| *x as f64).sum();
        assert!((t["sum"].as_f64().unwrap() - sum).abs() <= 1e-9 * sum.abs().max(1.0), "{name}: values differ");
    }
    let meta = &v["metadata"];
    assert_eq!(meta["format"], gpulab::checkpoint::format::FORMAT);
    assert_eq!(meta["step"], ours.meta.position.step.to_string());
    assert_eq!(meta["precision"], "fp32");
    assert!(meta["checksum"].as_str().unwrap().starts_with("crc32:"));
    let hp: gpulab::train::TrainConfig = serde_json::from_str(meta["hyperparameters"].as_str().unwrap()).unwrap();
    assert_eq!(hp, ours.meta.hyperparameters);
}
