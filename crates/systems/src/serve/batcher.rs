//! The dynamic batcher: a bounded queue of single-sample requests and the rule that forms
//! batches from it, with Triton's three knobs — max batch size, preferred batch sizes, max
//! queue delay. No threads or I/O here beyond the channel: the inference thread calls
//! `next_batch` in a loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use gpulab_core::error::{Error, Result};

/// Largest max batch / queue the server accepts (beyond this a setting is a typo, not a plan).
pub const MAX_BATCH_LIMIT: usize = 4096;
pub const MAX_QUEUE_LIMIT: usize = 1 << 20;
pub const MAX_DELAY_LIMIT_US: u64 = 10_000_000;

/// Triton's dynamic-batching knobs plus the queue bound.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchPolicy {
    /// No batch is larger than this.
    pub max_batch: usize,
    /// Batch sizes to send as soon as they can be formed (each ≤ max_batch); empty = wait for
    /// max_batch or the delay.
    pub preferred: Vec<usize>,
    /// How long the oldest waiting request may wait for a batch to fill, microseconds.
    pub max_queue_delay_us: u64,
    /// Requests (samples) that may wait; one more gets 503 at once.
    pub queue_capacity: usize,
}

impl Default for BatchPolicy {
    fn default() -> Self {
        BatchPolicy { max_batch: 16, preferred: vec![8, 16], max_queue_delay_us: 2000, queue_capacity: 1024 }
    }
}

impl BatchPolicy {
    /// Batch size 1, no waiting: serving without batching.
    pub fn unbatched(queue_capacity: usize) -> Self {
        BatchPolicy { max_batch: 1, preferred: Vec::new(), max_queue_delay_us: 0, queue_capacity }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if self.max_batch == 0 || self.max_batch > MAX_BATCH_LIMIT {
            return bad(format!("max batch {} must be between 1 and {MAX_BATCH_LIMIT}", self.max_batch));
        }
        if let Some(p) = self.preferred.iter().find(|&&p| p == 0 || p > self.max_batch) {
            return bad(format!("preferred batch size {p} must be between 1 and the max batch {}", self.max_batch));
        }
        if self.max_queue_delay_us > MAX_DELAY_LIMIT_US {
            return bad(format!("max queue delay {} µs is over the limit of {MAX_DELAY_LIMIT_US} µs (10 s)", self.max_queue_delay_us));
        }
        if self.queue_capacity == 0 || self.queue_capacity > MAX_QUEUE_LIMIT {
            return bad(format!("queue capacity {} must be between 1 and {MAX_QUEUE_LIMIT}", self.queue_capacity));
        }
        Ok(())
    }

    fn delay(&self) -> Duration {
        Duration::from_micros(self.max_queue_delay_us)
    }
}

/// One answered sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    pub class: usize,
    pub probabilities: Vec<f32>,
    /// From entering the queue to its batch starting to run. Measured.
    pub queue_wait: Duration,
    /// How many samples ran in its batch.
    pub batch_size: usize,
}

pub type Reply = std::result::Result<Prediction, String>;

/// One queued sample and where its answer goes.
pub struct Request {
    pub input: Vec<f32>,
    pub enqueued: Instant,
    pub reply: oneshot::Sender<Reply>,
}

/// Why a submission was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SubmitError {
    #[error("the queue is full ({capacity} requests waiting); retry shortly")]
    Full { capacity: usize },
    #[error("the server is shutting down")]
    Closed,
    #[error("{0}")]
    BadInput(String),
}

/// The sending side, shared by every HTTP handler and in-process client. Bounded: a count of
/// waiting samples is reserved before anything is sent, so a full queue refuses at once.
#[derive(Clone)]
pub struct Queue {
    tx: Sender<Request>,
    depth: Arc<AtomicUsize>,
    capacity: usize,
    features: usize,
}

/// The inference thread's side.
pub struct Batches {
    rx: Receiver<Request>,
    depth: Arc<AtomicUsize>,
    policy: BatchPolicy,
}

pub fn queue(policy: BatchPolicy, features: usize) -> (Queue, Batches) {
    let (tx, rx) = mpsc::channel();
    let depth = Arc::new(AtomicUsize::new(0));
    (Queue { tx, depth: depth.clone(), capacity: policy.queue_capacity, features }, Batches { rx, depth, policy })
}

/// Checks one input: its length and that every value is a finite number.
pub fn check_input(x: &[f32], features: usize, which: usize) -> std::result::Result<(), String> {
    if x.len() != features {
        return Err(format!("input {which} has {} features; the model takes {features}", x.len()));
    }
    if let Some(j) = x.iter().position(|v| !v.is_finite()) {
        return Err(format!("input {which} feature {j} is {}; every feature must be a finite number", x[j]));
    }
    Ok(())
}

impl Queue {
    pub fn features(&self) -> usize {
        self.features
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Samples waiting now.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// Queues every input or none: all are checked, room for all is reserved, then they are
    /// sent. Each receiver gets exactly one reply.
    pub fn submit(&self, inputs: Vec<Vec<f32>>) -> std::result::Result<Vec<oneshot::Receiver<Reply>>, SubmitError> {
        for (i, x) in inputs.iter().enumerate() {
            check_input(x, self.features, i).map_err(SubmitError::BadInput)?;
        }
        let k = inputs.len();
        self.depth
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| (d + k <= self.capacity).then_some(d + k))
            .map_err(|_| SubmitError::Full { capacity: self.capacity })?;
        let now = Instant::now();
        let mut out = Vec::with_capacity(k);
        for (i, input) in inputs.into_iter().enumerate() {
            let (reply, rx) = oneshot::channel();
            if self.tx.send(Request { input, enqueued: now, reply }).is_err() {
                self.depth.fetch_sub(k - i, Ordering::AcqRel);
                return Err(SubmitError::Closed);
            }
            out.push(rx);
        }
        Ok(out)
    }
}

impl Batches {
    pub fn policy(&self) -> &BatchPolicy {
        &self.policy
    }

    /// Samples waiting now.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    fn took(&self, r: Request) -> Request {
        self.depth.fetch_sub(1, Ordering::AcqRel);
        r
    }

    /// Blocks for the next batch: None once every `Queue` is dropped and the queue is drained
    /// (the graceful shutdown). The batch is sent when it reaches max batch; or when it is a
    /// preferred size and nothing more is waiting; or when its oldest request has waited the
    /// max queue delay.
    pub fn next_batch(&self, batch: &mut Vec<Request>) -> Option<()> {
        batch.clear();
        let first = self.rx.recv().ok()?;
        let deadline = first.enqueued + self.policy.delay();
        batch.push(self.took(first));
        let max = self.policy.max_batch;
        while batch.len() < max {
            match self.rx.try_recv() {
                Ok(r) => {
                    batch.push(self.took(r));
                    continue;
                }
                Err(TryRecvError::Disconnected) => break,
                Err(TryRecvError::Empty) => {}
            }
            // Nothing more is waiting right now.
            if self.policy.preferred.contains(&batch.len()) {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            match self.rx.recv_timeout(deadline - now) {
                Ok(r) => batch.push(self.took(r)),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        Some(())
    }
}
