//! A multi-threaded data loader with PyTorch's knobs: `num_workers` threads (0 = load on the
//! training thread), `prefetch_factor` batches queued ahead per worker, and `cache` (keep decoded
//! samples after their first read). Batch `i` always goes to worker `i % num_workers` and the
//! training thread takes batches in order, so the batches are the same for any worker count;
//! each batch's augmentation is seeded from (seed, epoch, batch index).
//!
//! Workers only start a batch when given a ticket; the training thread keeps at most
//! `num_workers * prefetch_factor` batches in flight (at least the one it needs). Dropping the
//! loader raises a stop flag, closes the ticket channels and joins the threads, so stopping
//! mid-epoch cannot deadlock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::DataError;
use super::batcher;
use super::source::SampleSource;
use gpulab_core::spans::{self, SpanRecorder, stage};

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoaderConfig {
    pub batch: usize,
    /// Loader threads; 0 loads on the training thread, as PyTorch does.
    pub num_workers: usize,
    /// Ready batches queued ahead per worker; 0 = a worker starts a batch only when it is needed.
    pub prefetch_factor: usize,
    /// Keep decoded samples in memory after their first read.
    pub cache: bool,
    /// Shuffle and augmentation seed.
    pub seed: u64,
    pub epochs: usize,
}

/// One ready batch.
#[derive(Debug)]
pub struct Batch {
    pub epoch: usize,
    /// Index within the epoch.
    pub index: usize,
    /// Sample indices, in order.
    pub indices: Vec<u32>,
    pub x: Vec<f32>,
    pub y: Vec<u32>,
}

/// Reads served from the cache and decodes done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
}

/// What every worker shares.
struct Shared {
    source: Arc<dyn SampleSource>,
    cfg: LoaderConfig,
    cache: Option<Vec<OnceLock<(Box<[f32]>, u32)>>>,
    hits: AtomicU64,
    misses: AtomicU64,
    stop: AtomicBool,
    spans: Option<SpanRecorder>,
}

/// Keeps batch augmentation independent of other users of the same seed.
const DOMAIN: u64 = 0x6c6f_6164_6572_2121; // "loader!!"

impl Shared {
    fn batches_per_epoch(&self) -> usize {
        batcher::batches_per_epoch(self.source.len(), self.cfg.batch, false)
    }

    /// Reads one sample, through the cache when it is on.
    fn sample(&self, i: u32, buf: &mut Vec<f32>) -> Result<u32, DataError> {
        let Some(cache) = &self.cache else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return self.source.read(i, buf);
        };
        let slot = cache.get(i as usize).ok_or_else(|| DataError::Invalid(format!("sample {i} is past the end of the source")))?;
        if let Some((x, y)) = slot.get() {
            self.hits.fetch_add(1, Ordering::Relaxed);
            buf.clear();
            buf.extend_from_slice(x);
            return Ok(*y);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let y = self.source.read(i, buf)?;
        // Another worker may have filled it meanwhile; both decoded the same bytes.
        let _ = slot.set((buf.clone().into_boxed_slice(), y));
        Ok(y)
    }

    /// Produces batch `global` (epoch-major). Err when the source fails; Ok(None) when stopped.
    fn make(&self, global: usize, lane: &str) -> Result<Option<Batch>, DataError> {
        let per = self.batches_per_epoch();
        let (epoch, index) = (global / per, global % per);
        let order = batcher::epoch_order(self.source.len(), self.cfg.seed, epoch as u64);
        let indices: Vec<u32> = order.chunks(self.cfg.batch).nth(index).map(<[u32]>::to_vec).unwrap_or_default();
        let f = self.source.features();
        let t0 = Instant::now();
        let mut decoded = Vec::with_capacity(indices.len());
        let mut y = Vec::with_capacity(indices.len());
        let mut buf = Vec::with_capacity(f);
        for &i in &indices {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            y.push(self.sample(i, &mut buf)?);
            if buf.len() != f {
                return Err(DataError::Invalid(format!("sample {i} has {} values, the source promised {f}", buf.len())));
            }
            decoded.push(std::mem::take(&mut buf));
            buf = Vec::with_capacity(f);
        }
        let t1 = Instant::now();
        let mut rng = ChaCha8Rng::seed_from_u64(self.cfg.seed ^ DOMAIN);
        rng.set_stream(((epoch as u64) << 32) | index as u64);
        let mut x = Vec::with_capacity(indices.len() * f);
        for mut s in decoded {
            self.source.augment(&mut s, &mut rng);
            x.extend_from_slice(&s);
        }
        if let Some(r) = &self.spans {
            r.record(lane, stage::LOAD, t0, t1);
            r.record(lane, stage::COLLATE, t1, Instant::now());
        }
        Ok(Some(Batch { epoch, index, indices, x, y }))
    }
}

struct Worker {
    tickets: Option<Sender<usize>>,
    results: Receiver<Result<Batch, DataError>>,
    handle: Option<JoinHandle<()>>,
}

pub struct Loader {
    shared: Arc<Shared>,
    workers: Vec<Worker>,
    /// Next batch the training thread will take, and next batch to hand out a ticket for.
    next: usize,
    issued: usize,
    total: usize,
}

impl Loader {
    /// Starts the workers for `cfg.epochs` epochs over `source`. Spans go to `spans` if given.
    pub fn new(source: Arc<dyn SampleSource>, cfg: LoaderConfig, spans: Option<SpanRecorder>) -> Result<Self, DataError> {
        if cfg.batch == 0 || source.is_empty() || cfg.epochs == 0 {
            return Err(DataError::Invalid(format!(
                "a loader needs a batch size, samples and epochs (got batch {}, {} samples, {} epochs)",
                cfg.batch,
                source.len(),
                cfg.epochs
            )));
        }
        if cfg.num_workers > 64 || cfg.prefetch_factor > 64 {
            return Err(DataError::Invalid(format!(
                "num_workers {} and prefetch_factor {} must each be at most 64",
                cfg.num_workers, cfg.prefetch_factor
            )));
        }
        let cache = cfg.cache.then(|| (0..source.len()).map(|_| OnceLock::new()).collect());
        let shared = Arc::new(Shared {
            source,
            cfg,
            cache,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            spans,
        });
        let total = shared.batches_per_epoch() * cfg.epochs;
        let mut workers = Vec::new();
        for w in 0..cfg.num_workers {
            let (ticket_tx, ticket_rx) = channel::<usize>();
            let (result_tx, result_rx) = channel();
            let sh = shared.clone();
            let handle = std::thread::Builder::new()
                .name(spans::worker_lane(w))
                .spawn(move || {
                    let lane = spans::worker_lane(w);
                    for global in ticket_rx {
                        match sh.make(global, &lane) {
                            Ok(Some(b)) => {
                                if result_tx.send(Ok(b)).is_err() {
                                    return;
                                }
                            }
                            Ok(None) => return,
                            Err(e) => {
                                let _ = result_tx.send(Err(e));
                                return;
                            }
                        }
                    }
                })
                .map_err(|e| DataError::Invalid(format!("could not start loader worker {w}: {e}")))?;
            workers.push(Worker { tickets: Some(ticket_tx), results: result_rx, handle: Some(handle) });
        }
        let mut loader = Loader { shared, workers, next: 0, issued: 0, total };
        if cfg.prefetch_factor > 0 {
            loader.issue(); // start filling the queues before the first batch is asked for
        }
        Ok(loader)
    }

    pub fn batches_per_epoch(&self) -> usize {
        self.shared.batches_per_epoch()
    }

    pub fn cache_stats(&self) -> CacheStats {
        CacheStats { hits: self.shared.hits.load(Ordering::Relaxed), misses: self.shared.misses.load(Ordering::Relaxed) }
    }

    /// Hands out tickets up to the prefetch limit: `num_workers * prefetch_factor` batches in
    /// flight counting the one the trainer is about to take (at least that one).
    fn issue(&mut self) {
        let w = self.workers.len();
        if w == 0 {
            return;
        }
        let ahead = (w * self.shared.cfg.prefetch_factor).max(1);
        while self.issued < self.total && self.issued < self.next + ahead {
            if let Some(t) = &self.workers[self.issued % w].tickets {
                let _ = t.send(self.issued);
            }
            self.issued += 1;
        }
    }

    /// The next batch in order; None after the last epoch. A source error ends the loader.
    pub fn next_batch(&mut self) -> Option<Result<Batch, DataError>> {
        if self.next >= self.total {
            return None;
        }
        let global = self.next;
        self.issue();
        self.next += 1;
        let out = if self.workers.is_empty() {
            match self.shared.make(global, spans::MAIN) {
                Ok(Some(b)) => Ok(b),
                Ok(None) => Err(DataError::Invalid("the loader was stopped".into())),
                Err(e) => Err(e),
            }
        } else {
            let w = global % self.workers.len();
            match self.workers[w].results.recv() {
                Ok(r) => r,
                Err(_) => Err(DataError::Invalid(format!("loader worker {w} ended unexpectedly"))),
            }
        };
        if out.is_err() {
            self.next = self.total; // nothing after an error
        }
        Some(out)
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for w in &mut self.workers {
            w.tickets = None; // closes the ticket channel: the worker's loop ends
        }
        for w in &mut self.workers {
            if let Some(h) = w.handle.take() {
                let _ = h.join();
            }
        }
    }
}
