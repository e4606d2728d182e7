//! The input pipeline: deterministic batches for any worker count, the cache, a clean stop
//! mid-epoch and errors from a failing source.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use gpulab::data::{self, CostlySource, DataError, DatasetSpec, Loader, LoaderConfig, SampleSource, SourceCost};
use rand_chacha::ChaCha8Rng;

fn source(latency_ms: f64) -> Arc<dyn SampleSource> {
    let spec: DatasetSpec = "shapes:res=8,n=230".parse().unwrap();
    let data = Arc::new(data::load(&spec, 3).unwrap());
    let cost = SourceCost { storage_latency_ms: latency_ms, decode_passes: 1, rotate_deg: 10.0, noise: 0.05 };
    Arc::new(CostlySource::new(data, cost).unwrap())
}

fn cfg(workers: usize, prefetch: usize, cache: bool) -> LoaderConfig {
    LoaderConfig { batch: 32, num_workers: workers, prefetch_factor: prefetch, cache, seed: 9, epochs: 2 }
}

fn all_batches(src: Arc<dyn SampleSource>, c: LoaderConfig) -> Vec<(usize, usize, Vec<u32>, Vec<f32>, Vec<u32>)> {
    let mut l = Loader::new(src, c, None).unwrap();
    let mut out = Vec::new();
    while let Some(b) = l.next_batch() {
        let b = b.unwrap();
        out.push((b.epoch, b.index, b.indices, b.x, b.y));
    }
    out
}

#[test]
fn same_batches_for_any_worker_count_prefetch_and_cache() {
    let src = source(0.0);
    let (n, per) = (src.len(), src.len().div_ceil(32));
    assert!(n % 32 != 0, "the test wants a partial last batch");
    let want = all_batches(src.clone(), cfg(0, 0, false));
    assert_eq!(want.len(), 2 * per);
    assert_eq!(want[per - 1].2.len(), n % 32, "the last batch of an epoch keeps the remainder");
    for (w, p, c) in [(1, 0, false), (2, 1, false), (3, 2, true), (4, 4, true)] {
        let got = all_batches(src.clone(), cfg(w, p, c));
        assert!(got == want, "workers={w} prefetch={p} cache={c} gave different batches");
    }
    // Augmentation is seeded per batch: the two epochs differ.
    assert_ne!(want[0].3, want[per].3);
}

#[test]
fn cache_hits_after_the_first_epoch() {
    // No prefetch: nothing of the second epoch is read before the first is taken.
    let src = source(0.0);
    let (n, per) = (src.len() as u64, src.len().div_ceil(32));
    let mut l = Loader::new(src.clone(), cfg(2, 0, true), None).unwrap();
    let mut taken = 0;
    while let Some(b) = l.next_batch() {
        b.unwrap();
        taken += 1;
        if taken == per {
            let s = l.cache_stats();
            assert_eq!((s.hits, s.misses), (0, n), "the first epoch decodes every sample once");
        }
    }
    assert_eq!((l.cache_stats().hits, l.cache_stats().misses), (n, n), "the second epoch is served from the cache");
    let mut l = Loader::new(src, cfg(2, 2, false), None).unwrap();
    while l.next_batch().is_some() {}
    assert_eq!((l.cache_stats().hits, l.cache_stats().misses), (0, 2 * n));
}

/// Runs `f` on a thread and fails if it has not finished within `secs`.
fn within(secs: u64, what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(secs)).unwrap_or_else(|_| panic!("{what} did not finish within {secs} s (deadlock?)"));
}

#[test]
fn dropping_the_loader_mid_epoch_joins_its_workers() {
    within(20, "stopping mid-epoch", || {
        for (w, p) in [(1, 0), (3, 2), (4, 8)] {
            let mut l = Loader::new(source(2.0), cfg(w, p, true), None).unwrap();
            l.next_batch().unwrap().unwrap();
            drop(l); // workers are mid-batch, sleeping in the simulated storage read
        }
        // Never taking a batch at all.
        drop(Loader::new(source(2.0), cfg(2, 4, false), None).unwrap());
    });
}

/// A source whose sample 100 cannot be read.
struct Failing(Arc<dyn SampleSource>);

impl SampleSource for Failing {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn features(&self) -> usize {
        self.0.features()
    }
    fn read(&self, index: u32, out: &mut Vec<f32>) -> Result<u32, DataError> {
        if index == 100 {
            return Err(DataError::Invalid("sample 100: checksum mismatch".into()));
        }
        self.0.read(index, out)
    }
    fn augment(&self, x: &mut [f32], rng: &mut ChaCha8Rng) {
        self.0.augment(x, rng)
    }
}

#[test]
fn source_errors_reach_the_caller_and_end_the_loader() {
    within(20, "the failing source", || {
        for workers in [0, 1, 3] {
            let mut l = Loader::new(Arc::new(Failing(source(0.0))), cfg(workers, 2, false), None).unwrap();
            let mut err = None;
            while let Some(b) = l.next_batch() {
                if let Err(e) = b {
                    err = Some(e.to_string());
                }
            }
            let err = err.unwrap_or_else(|| panic!("workers={workers}: the error was lost"));
            assert!(err.contains("checksum mismatch"), "workers={workers}: {err}");
        }
    });
}

#[test]
fn bad_loader_settings_are_named() {
    let e = Loader::new(source(0.0), LoaderConfig { batch: 0, ..cfg(1, 1, false) }, None).err().unwrap();
    assert!(e.to_string().contains("batch size"), "{e}");
}
