//! Allocation: a refused allocation leaves nothing behind (no leaked storage, no ledger
//! bytes), and the int8 types are counted at their real size on every backend.

use gpulab::Error;
use gpulab::device::CpuBackend;
use gpulab::tensor::{DType, MemCategory as M, prelude::*};

use crate::common::with_gpu;

/// This process's resident memory in bytes (Linux: VmRSS in /proc/self/status).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse::<u64>().ok()?;
    Some(kb * 1024)
}

#[test]
fn refused_cpu_uploads_leak_nothing() {
    let Some(before) = resident_bytes() else {
        eprintln!("SKIPPED refused_cpu_uploads_leak_nothing: no /proc/self/status (resident memory is read the Linux way)");
        return;
    };
    const TRIES: u64 = 100;
    let data = vec![1.5f32; 1 << 20]; // 4 MiB, refused by a 1 MiB budget every time
    let mut b = CpuBackend::with_budget(Some(1 << 20));
    for _ in 0..TRIES {
        let err = b.upload_f32(&data, [1, data.len()], M::Activations).unwrap_err();
        assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
        let err = b.zeros([1024, 1024], DType::F32, M::Activations).unwrap_err();
        assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    }
    let grown = resident_bytes().unwrap_or(before).saturating_sub(before);
    // What keeping each refused upload would cost (zeros come from calloc'd pages, which are
    // not resident until touched, so only the uploads count).
    let leak = (TRIES * 4) << 20;
    // Other tests of this binary run in parallel threads, so allow them some growth: a leak
    // of even a third of the refused bytes still fails.
    assert!(grown < leak / 3, "resident memory grew by {} MiB over {TRIES} refused 4 MiB allocations", grown >> 20);
    let m = b.memory();
    assert_eq!(m.total_current, 0, "refusals left bytes in the ledger");
    assert_eq!(m.total_peak, 0, "refusals counted towards the peak");
}

#[test]
fn cpu_counts_int8_at_a_quarter_of_f32() {
    let mut b = CpuBackend::new();
    let q = b.zeros([64, 32], DType::I8, M::Parameters).unwrap();
    assert_eq!(b.memory().total_current, 64 * 32);
    let acc = b.zeros([64, 32], DType::I32, M::Activations).unwrap();
    assert_eq!(b.memory().total_current, 64 * 32 * 5);
    assert_eq!((q.dtype(), acc.dtype(), q.shape()), (DType::I8, DType::I32, [64, 32]));
    drop((q, acc));
    assert_eq!(b.memory().total_current, 0);
}

#[test]
fn gpu_packs_int8_four_per_word() {
    with_gpu("gpu_packs_int8_four_per_word", |gpu| {
        let base = gpu.memory().total_current;
        let q = gpu.zeros([64, 32], DType::I8, M::Parameters).unwrap();
        assert_eq!(gpu.memory().total_current - base, 2048, "2048 i8 in 512 words, a multiple of 256 bytes");
        let f = gpu.zeros([64, 32], DType::F32, M::Parameters).unwrap();
        assert_eq!(gpu.memory().total_current - base, 2048 + 8192);
        let mut copy = gpu.zeros([64, 32], DType::I8, M::Parameters).unwrap();
        gpu.copy(&q, &mut copy).unwrap();
        let err = gpu.read_f32(&q).unwrap_err();
        assert!(matches!(err, Error::DType { .. }) && err.to_string().contains("i8"), "{err}");
        gpu.sync().unwrap();
        drop((q, f, copy));
        assert_eq!(gpu.memory().total_current, base);
    });
}
