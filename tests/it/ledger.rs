//! The memory ledger: per-category accounting, release on drop, and budget refusals that
//! read like a real out-of-memory.

use gpulab::device::CpuBackend;
use gpulab::tensor::{DType, MemCategory as M, prelude::*};

use crate::common::with_gpu;

fn current(b: &impl Backend, cat: M) -> u64 {
    b.memory().categories.iter().find(|c| c.0 == cat).map(|c| c.1).unwrap()
}

#[test]
fn cpu_ledger_counts_categories_and_releases_on_drop() {
    let mut b = CpuBackend::new();
    let p = b.zeros([10, 10], DType::F32, M::Parameters).unwrap();
    let g = b.zeros([10, 10], DType::F32, M::Gradients).unwrap();
    assert_eq!(current(&b, M::Parameters), 400);
    assert_eq!(current(&b, M::Gradients), 400);
    drop(p);
    drop(g);
    let r = b.memory();
    assert_eq!(r.total_current, 0);
    assert_eq!(r.total_peak, 800);
}

#[test]
fn budget_refusal_names_the_category_and_sizes() {
    let mut b = CpuBackend::with_budget(Some(1000));
    let _keep = b.zeros([1, 200], DType::F32, M::Parameters).unwrap();
    let err = b.zeros([1, 100], DType::F32, M::Activations).unwrap_err().to_string();
    assert!(err.contains("out of device memory") && err.contains("activations"), "{err}");
    assert!(err.contains("400") && err.contains("200") && err.contains("1000"), "{err}");
    assert!(err.contains("reduce the batch size"), "{err}");
    // The refused allocation left no trace.
    assert_eq!(b.memory().total_current, 800);
}

#[test]
fn gpu_ledger_tracks_buffers_and_pools_them() {
    with_gpu("gpu_ledger_tracks_buffers_and_pools_them", |gpu| {
        let base = gpu.memory().total_current;
        let t = gpu.upload_f32(&vec![3.0; 10_000], [100, 100], M::Activations).unwrap();
        assert_eq!(gpu.memory().total_current - base, 40_192, "40 000 bytes rounded up to 256");
        drop(t);
        assert_eq!(gpu.memory().total_current, base);
        assert!(gpu.pooled_bytes() >= 40_192, "freed buffer kept for reuse");
        let again = gpu.zeros([100, 100], DType::F32, M::Activations).unwrap();
        assert!(gpu.read_f32(&again).unwrap().iter().all(|v| *v == 0.0), "a reused buffer is cleared");
    });
}
