//! A training job on spot capacity: preemptions arrive as a Poisson process in wall time (also
//! during a restart), work since the last checkpoint is lost, each checkpoint costs its write
//! time. A sweep of the checkpoint interval, every interval on the same preemption streams
//! (common random numbers), is set against Young's and Daly's optimum intervals.

use gpulab_core::stop::Stop;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};

use super::scenario::Training;
use gpulab_core::error::{Error, Result};

/// What one run of the job took, hours.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobOutcome {
    pub wall_h: f64,
    /// Computation and checkpoint writes thrown away by preemptions.
    pub lost_h: f64,
    /// Time spent restarting (new nodes, loading the checkpoint), including failed restarts.
    pub restart_h: f64,
    pub checkpoint_h: f64,
    pub preemptions: f64,
    /// False when the job gave up (the interval is far too long for the preemption rate).
    pub finished: bool,
}

/// A run with more preemptions than this gives up (the interval is hopeless for the MTBF).
pub const MAX_PREEMPTIONS: f64 = 20_000.0;

/// The most checkpoint intervals one simulated job may be cut into (work ÷ interval): each is a
/// step of `run_job`'s loop, so this bounds a run (a few ms); validation keeps the scenario's
/// intervals, and the sweep's, within it.
pub const MAX_SEGMENTS: f64 = 1e6;

/// Refuses an interval that would cut the job into more than `MAX_SEGMENTS` pieces (or into no
/// finite number at all: 0, negative, NaN).
pub fn check_interval(t: &Training, tau_h: f64) -> Result<()> {
    let work = work_h(t);
    if tau_h > 0.0 && work / tau_h <= MAX_SEGMENTS {
        return Ok(());
    }
    Err(Error::InvalidConfig(format!(
        "training: a checkpoint interval of {tau_h} h cuts {work:.3} h of work into more than {MAX_SEGMENTS:.0} intervals; \
         the interval must be above {:.3e} h (raise training.checkpoint_interval_h, or training.checkpoint_write_s, which sets Daly's interval)",
        work / MAX_SEGMENTS
    )))
}

/// The job's compute in hours at its precision.
pub fn compute_h(t: &Training) -> f64 {
    t.work_h / t.precision_speedup
}

/// The job's work in hours: its compute at its precision, or reading its epochs from object
/// storage when that takes longer (input-bound; reads overlap compute).
pub fn work_h(t: &Training) -> f64 {
    compute_h(t).max(t.data.read_h())
}

/// One run of the job with checkpoints every `tau_h` of work; `mtbf_h` None = on-demand. An
/// interval `check_interval` refuses is an error: the loop would not end.
pub fn run_job(t: &Training, tau_h: f64, mtbf_h: Option<f64>, rng: &mut ChaCha8Rng) -> Result<JobOutcome> {
    check_interval(t, tau_h)?;
    let (work, c, r) = (work_h(t), t.checkpoint_write_s / 3600.0, t.restart_s / 3600.0);
    let exp = mtbf_h.and_then(|m| Exp::new(1.0 / m).ok());
    let draw = |rng: &mut ChaCha8Rng| exp.map_or(f64::INFINITY, |e| e.sample(rng));
    let give_up = 1000.0 * (work + c + r) + 1000.0;
    let mut o = JobOutcome::default();
    let mut done = 0.0;
    let mut next_fail = draw(rng);
    // Every step checkpoints one interval or meets one preemption, so this many steps means
    // the loop stopped making progress (a bug, not a scenario): an error, not a hang.
    let max_steps = (MAX_SEGMENTS + MAX_PREEMPTIONS) as u64 * 2 + 16;
    let mut steps = 0u64;
    while done < work - 1e-12 {
        if o.wall_h > give_up || o.preemptions > MAX_PREEMPTIONS {
            return Ok(o);
        }
        steps += 1;
        if steps > max_steps {
            return Err(Error::Internal(format!(
                "the training simulation made no progress in {max_steps} steps (interval {tau_h} h, {done} of {work} h done)"
            )));
        }
        let seg = tau_h.min(work - done);
        if o.wall_h + seg + c <= next_fail {
            o.wall_h += seg + c;
            o.checkpoint_h += c;
            done += seg;
            continue;
        }
        o.lost_h += next_fail - o.wall_h;
        o.wall_h = next_fail;
        o.preemptions += 1.0;
        // Restart; a preemption during the restart starts it again.
        loop {
            next_fail = o.wall_h + draw(rng);
            if o.wall_h + r <= next_fail {
                o.wall_h += r;
                o.restart_h += r;
                break;
            }
            o.restart_h += next_fail - o.wall_h;
            o.wall_h = next_fail;
            o.preemptions += 1.0;
            if o.preemptions > MAX_PREEMPTIONS {
                return Ok(o);
            }
        }
    }
    o.finished = true;
    Ok(o)
}

/// The mean outcome over `reps` runs, run `i` on preemption stream `i` of `seed`. `stop` is
/// looked at before each run after the first: once set, the mean is over the runs done.
pub fn mean_outcome(t: &Training, tau_h: f64, mtbf_h: Option<f64>, seed: u64, reps: u32, stop: &Stop) -> Result<JobOutcome> {
    let mut sum = JobOutcome { finished: true, ..Default::default() };
    let mut runs = 0u32;
    for i in 0..reps.max(1) {
        if i > 0 && stop.is_set() {
            break;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(100 + i as u64);
        let o = run_job(t, tau_h, mtbf_h, &mut rng)?;
        runs += 1;
        sum.wall_h += o.wall_h;
        sum.lost_h += o.lost_h;
        sum.restart_h += o.restart_h;
        sum.checkpoint_h += o.checkpoint_h;
        sum.preemptions += o.preemptions;
        sum.finished &= o.finished;
    }
    let n = runs.max(1) as f64;
    Ok(JobOutcome {
        wall_h: sum.wall_h / n,
        lost_h: sum.lost_h / n,
        restart_h: sum.restart_h / n,
        checkpoint_h: sum.checkpoint_h / n,
        preemptions: sum.preemptions / n,
        finished: sum.finished,
    })
}

/// Young's first-order optimum interval √(2·C·MTBF), hours.
pub fn young_h(t: &Training) -> f64 {
    (2.0 * t.checkpoint_write_s / 3600.0 * t.mtbf_h).sqrt()
}

/// Daly's higher-order optimum (2006): √(2CM)·[1 + ⅓√(C/2M) + (C/2M)/9] − C for C < 2M, else M.
pub fn daly_h(t: &Training) -> f64 {
    let (c, m) = (t.checkpoint_write_s / 3600.0, t.mtbf_h);
    if c >= 2.0 * m {
        return m;
    }
    let x = c / (2.0 * m);
    (2.0 * c * m).sqrt() * (1.0 + x.sqrt() / 3.0 + x / 9.0) - c
}

/// Daly's expected wall time for this model: M·e^{R/M}·(e^{(τ+C)/M} − 1)·W/τ, hours.
pub fn expected_wall_h(t: &Training, tau_h: f64) -> f64 {
    let (w, c, r, m) = (work_h(t), t.checkpoint_write_s / 3600.0, t.restart_s / 3600.0, t.mtbf_h);
    m * (r / m).exp() * (((tau_h + c) / m).exp() - 1.0) * w / tau_h
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    pub tau_h: f64,
    pub mean: JobOutcome,
    pub expected_wall_h: f64,
}

/// The sweep's shortest interval, as a share of Daly's optimum.
pub const SWEEP_FROM: f64 = 0.25;

/// `n` intervals evenly spaced from a quarter to three times Daly's optimum. `stop` is looked
/// at between runs; once set, the points finished so far are returned.
pub fn sweep(t: &Training, seed: u64, n: usize, reps: u32, stop: &Stop) -> Result<Vec<SweepPoint>> {
    let d = daly_h(t);
    let (lo, hi) = (SWEEP_FROM * d, 3.0 * d);
    let mut points = Vec::with_capacity(n);
    for i in 0..n {
        let tau_h = lo + (hi - lo) * i as f64 / (n.max(2) - 1) as f64;
        let mean = mean_outcome(t, tau_h, Some(t.mtbf_h), seed, reps, stop)?;
        if stop.is_set() {
            break; // this point's mean may be over fewer runs than the others'
        }
        points.push(SweepPoint { tau_h, mean, expected_wall_h: expected_wall_h(t, tau_h) });
    }
    Ok(points)
}

/// The sweep's interval with the shortest mean wall time.
pub fn best(points: &[SweepPoint]) -> Option<&SweepPoint> {
    points.iter().filter(|p| p.mean.finished).min_by(|a, b| a.mean.wall_h.total_cmp(&b.mean.wall_h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::Scenario;

    #[test]
    fn without_preemptions_the_job_takes_its_work_plus_checkpoints() {
        let t = Scenario::preset("steady-day").unwrap().training;
        let o = run_job(&t, 1.0, None, &mut ChaCha8Rng::seed_from_u64(0)).unwrap();
        let writes = (work_h(&t) / 1.0).ceil() * t.checkpoint_write_s / 3600.0;
        assert!((o.wall_h - (work_h(&t) + writes)).abs() < 1e-9, "{o:?}");
        assert_eq!((o.lost_h, o.preemptions), (0.0, 0.0));
    }

    #[test]
    fn daly_is_close_to_young_for_cheap_checkpoints_and_below_mtbf() {
        let mut t = Scenario::preset("steady-day").unwrap().training;
        t.checkpoint_write_s = 1.0;
        assert!((daly_h(&t) / young_h(&t) - 1.0).abs() < 0.02);
        t.checkpoint_write_s = 1e6;
        assert_eq!(daly_h(&t), t.mtbf_h);
    }
}
