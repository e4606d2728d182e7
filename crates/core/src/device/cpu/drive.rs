//! The thread that drives a CPU backend as a worker of its rayon pool. The CPU ops fork onto
//! rayon; forked from a thread outside any pool, each op's work is injected into the global
//! pool and the caller sleeps until a worker has finished it. On our 2-core VMs that costs
//! 13 µs for an empty `join`, against 0.02 µs from a worker, and it doubled the latency of a
//! batch-64 MLP forward (0.23 ms against 0.13). So every thread that runs exercises, training,
//! benchmarks or the inference loop calls `drive`: ops forked from a worker go on its own queue
//! and the pool's other threads steal them.

/// Runs `f` on this thread as worker 0 of a new rayon pool of the default size
/// (`RAYON_NUM_THREADS`, else one thread per core, this one included), or simply runs it when
/// this thread already is a rayon worker. For a thread that drives compute until it ends: rayon
/// still counts the thread as that pool's worker after the pool is dropped (forks then run on
/// this thread alone), so call it once, around the thread's work.
pub fn drive<R>(f: impl FnOnce() -> R) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    match rayon::ThreadPoolBuilder::new().num_threads(0).use_current_thread().thread_name(|i| format!("gpulab-cpu-{i}")).build() {
        Ok(pool) => {
            let r = f();
            drop(pool);
            r
        }
        // No threads to be had: the global pool still does the work, at the injection's cost.
        Err(_) => f(),
    }
}

#[cfg(test)]
mod tests {
    use rayon::prelude::*;

    #[test]
    fn the_driving_thread_is_a_worker_and_forks_finish() {
        std::thread::spawn(|| {
            assert_eq!(rayon::current_thread_index(), None, "a new thread is no worker");
            let sum = super::drive(|| {
                assert_eq!(rayon::current_thread_index(), Some(0), "the driver is worker 0");
                let nested = super::drive(rayon::current_num_threads);
                assert_eq!(nested, rayon::current_num_threads(), "a nested drive runs in the same pool");
                (0..10_000u64).into_par_iter().map(|v| v * v).sum::<u64>()
            });
            assert_eq!(sum, (0..10_000u64).map(|v| v * v).sum::<u64>());
        })
        .join()
        .expect("the driver thread finished");
    }
}
