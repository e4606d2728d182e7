//! Opens the replicas' backends, runs one thread per replica and forwards their events to the
//! caller's thread (which owns the sink), then sums up what they measured.

use std::sync::mpsc::channel;
use std::time::Instant;

use super::replica::{ReplicaOut, ReplicaPlan, run_replica};
use super::summary::{DpReport, ReplicaLanes, summarize, timeline};
use super::{DpConfig, ReplicaKind, bucket, ring};
use crate::data::Dataset;
use crate::train::{StepClock, TrainConfig, TrainEvent, TrainSink};
use gpulab_core::device::gpu::{GpuBackend, GpuSelector, adapters};
use gpulab_core::device::{CpuBackend, cuda};
use gpulab_core::error::{Error, Result};

/// A replica's backend, opened (GPU) or to be built on its own pool (CPU).
enum Opened {
    Cpu(rayon::ThreadPool),
    Gpu(Box<GpuBackend>),
}

/// Opens every replica's backend on this thread, one after another: wgpu crashes on
/// concurrent device creation (wgpu issue #10010).
fn open(kind: ReplicaKind, n: usize) -> Result<Vec<Opened>> {
    match kind {
        ReplicaKind::Cpu { threads } => (0..n)
            .map(|r| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(move |i| format!("replica {r} worker {i}"))
                    .build()
                    .map(Opened::Cpu)
                    .map_err(|e| Error::InvalidConfig(format!("could not start replica {r}'s {threads} threads: {e}")))
            })
            .collect(),
        ReplicaKind::GpuDevices => (0..n).map(|_| GpuBackend::open(&GpuSelector::Auto, None).map(|g| Opened::Gpu(Box::new(g)))).collect(),
        ReplicaKind::GpuAdapters => {
            // One replica per physical GPU, not per adapter entry: the same GPU through Vulkan
            // and GL would otherwise count twice and "parallel" replicas would share it.
            let list: Vec<_> =
                adapters::enumerate(&adapters::instance()).iter().enumerate().map(|(i, a)| adapters::summarize(i, a)).collect();
            let devices = adapters::distinct_devices(&list);
            if n > devices.len() {
                return Err(Error::InvalidConfig(format!(
                    "replicas {n} is more than the {} distinct GPUs of this machine ({} wgpu adapters: one GPU reached through several APIs counts once); use kind=gpu for N devices on one adapter",
                    devices.len(),
                    list.len()
                )));
            }
            devices.iter().take(n).map(|g| GpuBackend::open(&GpuSelector::Index(g[0]), None).map(|g| Opened::Gpu(Box::new(g)))).collect()
        }
        // The CUDA build's own refusal first (no driver, no feature); with a GPU, NCCL replicas
        // are what is missing.
        ReplicaKind::Cuda => cuda::open(0, None).and_then(|_| {
            Err(Error::UnsupportedOp {
                op: "data parallel",
                backend: "cuda".into(),
                why: "NCCL all-reduce between CUDA replicas is not built yet; use kind=cpu or kind=gpu".into(),
            })
        }),
    }
}

/// Trains `cfg` (whose `batch` is the global batch) data-parallel as `dp` says. `sink` gets the
/// run's events on this thread; when its `stop` is set, every replica stops after the same step.
/// Replica 0 speaks for the run (every replica holds the same weights); the others' device
/// windows (`Progress` with their `replica`) and step splits come too, and once every replica's
/// first steps are in, the live timeline (`TrainEvent::Timeline`).
pub fn train(data: &Dataset, cfg: &TrainConfig, dp: &DpConfig, sink: &mut dyn TrainSink) -> Result<DpReport> {
    cfg.validate()?;
    dp.validate(cfg, data.train_len())?;
    if data.val_len() == 0 {
        return Err(Error::InvalidConfig(format!("data set {} has an empty validation split", data.name)));
    }
    let model_cfg = cfg.model.config(data.shape, data.features, &cfg.hidden, data.classes)?;
    let buckets = bucket::plan(&model_cfg, bucket::cap_bytes(dp.bucket_cap_mb)?);
    let opened = open(dp.kind, dp.replicas)?;
    let peers = ring::ring(dp.replicas, dp.link);
    let stop = sink.stop().clone();
    let (tx, rx) = channel::<(usize, TrainEvent)>();
    let origin = Instant::now();
    let results: Vec<Result<ReplicaOut>> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (rank, (backend, peer)) in opened.into_iter().zip(peers).enumerate() {
            let plan = ReplicaPlan {
                rank,
                replicas: dp.replicas,
                data,
                cfg,
                buckets: buckets.clone(),
                overlap: dp.overlap,
                shard_optimizer: dp.shard_optimizer,
                timeline_steps: dp.timeline_steps,
                origin,
                stop: stop.clone(),
                events: tx.clone(),
                checkpoints: dp.checkpoints.as_ref(),
            };
            let h = std::thread::Builder::new().name(format!("replica {rank}")).spawn_scoped(s, move || match backend {
                Opened::Cpu(pool) => pool.install(|| run_replica(&mut CpuBackend::new(), plan, peer)),
                Opened::Gpu(mut g) => run_replica(&mut *g, plan, peer),
            });
            handles.push(h.map_err(|e| Error::TrainingProcess(format!("could not start replica {rank}'s thread: {e}"))));
        }
        drop(tx);
        let mut lanes: Vec<Option<Lanes>> = vec![None; dp.replicas];
        while let Ok((rank, ev)) = rx.recv() {
            if let Some(ev) = forward(dp, cfg.batch, &mut lanes, rank, ev) {
                sink.event(ev);
            }
        }
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, h)| h?.join().unwrap_or_else(|_| Err(Error::Internal(format!("replica {rank}'s thread panicked")))))
            .collect()
    });
    let outs = first_cause(results)?;
    Ok(summarize(dp, cfg, &model_cfg, &buckets, outs))
}

/// One replica's clock readings of the run's first steps and its communication thread's spans.
type Lanes = (Vec<StepClock>, Vec<(f64, f64)>);

/// What the watcher sees of replica `rank`'s event: replica 0's events speak for the run; of the
/// others', only what is theirs (device windows, step splits). Lanes are kept until every
/// replica's are in, then drawn as the live timeline (the report's, with the same title,
/// replaces it at the end).
fn forward(dp: &DpConfig, global: usize, lanes: &mut [Option<Lanes>], rank: usize, ev: TrainEvent) -> Option<TrainEvent> {
    match ev {
        TrainEvent::Lanes { replica, steps, comm_spans } => {
            *lanes.get_mut(replica)? = Some((steps, comm_spans));
            let all: Option<Vec<ReplicaLanes<'_>>> =
                lanes.iter().map(|l| l.as_ref().map(|(s, c)| ReplicaLanes { steps: s, comm_spans: c })).collect();
            Some(TrainEvent::Timeline(Box::new(timeline(dp, global, &all?))))
        }
        ev @ (TrainEvent::Progress { .. } | TrainEvent::Split { .. }) => Some(ev),
        ev if rank == 0 => Some(ev),
        _ => None,
    }
}

/// Every replica's (or pipeline stage's) result, or the error that started it: one that fails
/// takes its neighbours down with `Error::PeerLost`, which are consequences, not causes.
pub(super) fn first_cause<T>(results: Vec<Result<T>>) -> Result<Vec<T>> {
    let mut errors: Vec<Error> = Vec::new();
    let mut outs = Vec::new();
    for r in results {
        match r {
            Ok(o) => outs.push(o),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        return Ok(outs);
    }
    let pos = errors.iter().position(|e| !matches!(e, Error::PeerLost(_))).unwrap_or(0);
    Err(errors.swap_remove(pos))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cause is told from its consequences by the error's variant, not by its words: a
    /// cause that mentions a neighbour is still the cause.
    #[test]
    fn the_first_cause_is_the_error_that_is_not_a_lost_peer() {
        let lost = || Err(Error::PeerLost("replica 0 lost its next neighbour in the ring all-reduce".into()));
        let cause = Err(Error::InvalidConfig("replica 1's neighbour bucket does not fit".into()));
        let e = first_cause::<()>(vec![lost(), cause, lost()]).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig(_)), "{e}");
        assert!(matches!(first_cause::<()>(vec![lost(), lost()]).unwrap_err(), Error::PeerLost(_)));
        assert_eq!(first_cause(vec![Ok(1), Ok(2)]).unwrap(), vec![1, 2]);
    }
}
