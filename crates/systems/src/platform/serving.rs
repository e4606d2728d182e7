//! The serving side as a discrete-event simulation: requests arrive (a non-homogeneous Poisson
//! process by thinning), pass the gateway's token bucket, wait in a queue per model version,
//! and are served in dynamic batches by workers that cold-start, may be spot-reclaimed, and are
//! added and removed by the autoscaler. Every random draw comes from a ChaCha stream of the
//! scenario's seed, one stream per purpose, so a seed replays exactly.

use gpulab_core::stop::Stop;
use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};

pub mod canary;

use super::control::{self, VersionStats};
use super::events::{Ev, Queue};
use super::result::{Sample, ScaleAction, ServingResult, SimTotals};
use super::scenario::{Scenario, ServiceTime, Signal};
use gpulab_core::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum State {
    Starting,
    Idle,
    Busy,
    Gone,
}

struct Worker {
    state: State,
    spot: bool,
    /// Finishes its batch, then leaves (scale-down never drops work in flight).
    draining: bool,
    batch: Vec<Req>,
}

#[derive(Clone, Copy)]
struct Req {
    arrived: f64,
    version: usize,
}

/// Per-version latencies and errors since a point in time.
#[derive(Default, Clone)]
struct Window {
    latencies: Vec<f64>,
    errors: u64,
}

impl Window {
    fn stats(&mut self) -> VersionStats {
        let served = self.latencies.len() as u64;
        let error_rate = if served == 0 { 0.0 } else { self.errors as f64 / served as f64 };
        VersionStats { served, error_rate, p95_s: control::quantile(&mut self.latencies, 0.95).unwrap_or(0.0) }
    }
}

pub struct Sim<'a> {
    sc: &'a Scenario,
    q: Queue,
    now: f64,
    end: f64,
    workers: Vec<Worker>,
    idle: Vec<usize>,
    queues: [VecDeque<Req>; 2],
    timer_at: f64,
    tokens: f64,
    tokens_at: f64,
    lambda_max: f64,
    rng_arrival: ChaCha8Rng,
    rng_service: ChaCha8Rng,
    rng_route: ChaCha8Rng,
    rng_spot: ChaCha8Rng,
    rng_eval: ChaCha8Rng,
    t: SimTotals,
    // Windows: the current sample, the autoscaler interval, the canary window per version.
    sample_lat: Vec<f64>,
    all_lat: Vec<f64>,
    sample_counts: [u64; 4],
    scale_lat: Vec<f64>,
    busy_mark: (f64, f64),
    /// Requests arrived by the autoscaler's last look (the request-rate signal's window).
    arrived_mark: u64,
    canary_win: [Window; 2],
    v1_baseline: Option<VersionStats>,
    canary_share: f64,
    canary_step: usize,
    last_up: f64,
    last_down: f64,
    /// (time, desired workers) of the autoscaler's looks within the scale-down cooldown.
    recent: VecDeque<(f64, u32)>,
    out: ServingResult,
}

fn rng(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream);
    r
}

/// The most events one run may handle. A validated scenario stays far below it (at most
/// `MAX_REQUESTS` requests, each a handful of events, plus the controllers' looks); reaching it
/// means the simulation stopped making progress, an error instead of a loop without end.
pub const MAX_EVENTS: u64 = 2_000_000_000;
/// The most events at one simulated instant: more means time has stopped advancing.
pub const MAX_EVENTS_AT_ONE_INSTANT: u64 = 10_000_000;
/// How many events pass between two looks at the stop flag (a few ms of simulation).
const STOP_EVERY: u64 = 1 << 14;

/// Runs the serving simulation of `sc` to its end, or until `stop` is set: it is looked at after
/// each sample and every few thousand events in between, so a stop is prompt even when samples
/// are far apart. `on_sample` sees each sample as it is taken (live charts). An error when the
/// run breaks its event bounds (`MAX_EVENTS`, `MAX_EVENTS_AT_ONE_INSTANT`).
pub fn simulate(sc: &Scenario, stop: &Stop, on_sample: &mut dyn FnMut(&Sample)) -> Result<ServingResult> {
    let mut sim = Sim::new(sc);
    sim.run(stop, on_sample)?;
    sim.out.totals = sim.t.clone();
    for (q, slot) in [(0.50, &mut sim.out.p50_s), (0.95, &mut sim.out.p95_s), (0.99, &mut sim.out.p99_s)] {
        *slot = control::quantile(&mut sim.all_lat, q);
    }
    Ok(sim.out)
}

impl<'a> Sim<'a> {
    fn new(sc: &'a Scenario) -> Self {
        let spikes: f64 = sc.traffic.spikes.iter().map(|s| s.multiplier.max(1.0)).product();
        let mut sim = Sim {
            sc,
            q: Queue::default(),
            now: 0.0,
            end: sc.duration_h * 3600.0,
            workers: Vec::new(),
            idle: Vec::new(),
            queues: [VecDeque::new(), VecDeque::new()],
            timer_at: f64::INFINITY,
            tokens: sc.gateway.rate_limit_rps.max(1.0),
            tokens_at: 0.0,
            lambda_max: sc.traffic.peak_underlying_rps() * spikes,
            rng_arrival: rng(sc.seed, 0),
            rng_service: rng(sc.seed, 1),
            rng_route: rng(sc.seed, 2),
            rng_spot: rng(sc.seed, 3),
            rng_eval: rng(sc.seed, 4),
            t: SimTotals::default(),
            sample_lat: Vec::new(),
            all_lat: Vec::new(),
            sample_counts: [0; 4],
            scale_lat: Vec::new(),
            busy_mark: (0.0, 0.0),
            arrived_mark: 0,
            canary_win: Default::default(),
            v1_baseline: None,
            canary_share: 0.0,
            canary_step: 0,
            last_up: f64::NEG_INFINITY,
            last_down: f64::NEG_INFINITY,
            recent: VecDeque::new(),
            out: ServingResult::default(),
        };
        // The minimum pool is warm at the start.
        for _ in 0..sc.autoscaler.min_workers {
            sim.add_worker(true);
        }
        sim.t.max_alive = sim.alive();
        sim.schedule_arrival();
        sim.q.push(0.0, Ev::Sample);
        sim.q.push(sc.autoscaler.interval_s, Ev::Autoscale);
        if sc.canary.enabled && sc.canary.start_h * 3600.0 < sim.end {
            sim.q.push(sc.canary.start_h * 3600.0, Ev::CanaryStart);
        }
        sim
    }

    /// Offered requests per second at time `t` (seconds).
    pub fn rate(sc: &Scenario, t: f64) -> f64 {
        let tr = &sc.traffic;
        let h = t / 3600.0;
        let spikes: f64 = tr.spikes.iter().filter(|s| h >= s.start_h && h < s.start_h + s.duration_h).map(|s| s.multiplier).product();
        tr.underlying_rps(h) * spikes
    }

    fn run(&mut self, stop: &Stop, on_sample: &mut dyn FnMut(&Sample)) -> Result<()> {
        let (mut events, mut at_instant) = (0u64, 0u64);
        while let Some((t, ev)) = self.q.pop() {
            if t > self.end {
                break;
            }
            events += 1;
            at_instant = if t == self.now { at_instant + 1 } else { 0 };
            if events > MAX_EVENTS || at_instant > MAX_EVENTS_AT_ONE_INSTANT {
                return Err(Error::Internal(format!(
                    "the serving simulation stopped advancing at {:.6} h ({events} events, {at_instant} at this instant, the last {ev:?}); \
                     scenario {:?}",
                    t / 3600.0,
                    self.sc.name
                )));
            }
            if events.is_multiple_of(STOP_EVERY) && stop.is_set() {
                self.out.stopped_early = true;
                return Ok(());
            }
            self.advance(t);
            match ev {
                Ev::Arrival => self.arrival(),
                Ev::BatchDone { worker } => self.batch_done(worker),
                Ev::WorkerReady { worker } => {
                    if self.workers[worker].state == State::Starting {
                        self.workers[worker].state = State::Idle;
                        self.idle.push(worker);
                        self.dispatch();
                    }
                }
                Ev::Preempt { worker } => self.preempt(worker),
                Ev::BatchTimer => {
                    self.timer_at = f64::INFINITY;
                    self.dispatch();
                }
                Ev::Autoscale => self.autoscale(),
                Ev::Sample => {
                    let s = self.sample();
                    on_sample(&s);
                    self.out.samples.push(s);
                    if stop.is_set() {
                        self.out.stopped_early = true;
                        return Ok(());
                    }
                    if self.now + self.sc.sample_every_s <= self.end + 1e-9 {
                        self.q.push(self.now + self.sc.sample_every_s, Ev::Sample);
                    }
                }
                Ev::CanaryStart => self.canary_start(),
                Ev::CanaryCheck => self.canary_check(),
            }
        }
        self.advance(self.end);
        Ok(())
    }

    /// Integrates the time-weighted totals up to `t`.
    fn advance(&mut self, t: f64) {
        let dt = t - self.now;
        if dt > 0.0 {
            let (busy, ready, od, spot) = self.census();
            self.t.in_system_area += self.in_flight() as f64 * dt;
            self.t.busy_area += busy as f64 * dt;
            self.t.ready_area += ready as f64 * dt;
            self.t.worker_area += (od + spot) as f64 * dt;
            self.t.cost += (od as f64 * self.sc.pool.gpu.on_demand_per_h + spot as f64 * self.sc.pool.gpu.spot_per_h) * dt / 3600.0;
        }
        self.now = t;
    }

    /// (busy, ready = idle + busy, alive on-demand, alive spot).
    fn census(&self) -> (u32, u32, u32, u32) {
        let (mut busy, mut ready, mut od, mut spot) = (0, 0, 0, 0);
        for w in &self.workers {
            match w.state {
                State::Gone => continue,
                State::Busy => {
                    busy += 1;
                    ready += 1
                }
                State::Idle => ready += 1,
                State::Starting => {}
            }
            if w.spot { spot += 1 } else { od += 1 }
        }
        (busy, ready, od, spot)
    }

    /// Workers that count towards the pool: starting or ready, not draining.
    fn alive(&self) -> u32 {
        self.workers.iter().filter(|w| w.state != State::Gone && !w.draining).count() as u32
    }

    fn queued(&self) -> u64 {
        (self.queues[0].len() + self.queues[1].len()) as u64
    }

    fn in_flight(&self) -> u64 {
        self.queued() + self.workers.iter().map(|w| w.batch.len() as u64).sum::<u64>()
    }

    fn schedule_arrival(&mut self) {
        if self.lambda_max <= 0.0 {
            return;
        }
        // Thinning (Lewis–Shedler): candidates at the peak rate, each kept with rate(t)/peak.
        let Ok(exp) = Exp::new(self.lambda_max) else { return };
        let mut t = self.now;
        loop {
            t += exp.sample(&mut self.rng_arrival);
            if t > self.end {
                return;
            }
            let keep: f64 = self.rng_arrival.random();
            if keep * self.lambda_max <= Self::rate(self.sc, t) {
                self.q.push(t, Ev::Arrival);
                return;
            }
        }
    }

    fn arrival(&mut self) {
        self.schedule_arrival();
        self.t.arrived += 1;
        self.sample_counts[0] += 1;
        let limit = self.sc.gateway.rate_limit_rps;
        if limit > 0.0 {
            let cap = limit.max(1.0);
            self.tokens = (self.tokens + (self.now - self.tokens_at) * limit).min(cap);
            self.tokens_at = self.now;
            if self.tokens < 1.0 {
                self.t.rejected += 1;
                self.sample_counts[1] += 1;
                return;
            }
            self.tokens -= 1.0;
        }
        let version = usize::from(self.canary_share > 0.0 && self.rng_route.random::<f64>() < self.canary_share);
        self.queues[version].push_back(Req { arrived: self.now, version });
        self.dispatch();
    }

    /// Requests that waited past the gateway's timeout leave with an error.
    fn expire(&mut self) {
        let timeout = self.sc.gateway.timeout_s;
        if timeout <= 0.0 {
            return;
        }
        for v in 0..2 {
            while self.queues[v].front().is_some_and(|r| self.now - r.arrived >= timeout) {
                let r = self.queues[v].pop_front().expect("checked");
                self.t.timed_out += 1;
                self.t.sojourn_sum += self.now - r.arrived;
                self.sample_counts[2] += 1;
            }
        }
    }

    /// Dynamic batching: an idle worker takes a full batch at once, or whatever waits once the
    /// oldest request has waited the maximum queue delay.
    fn dispatch(&mut self) {
        self.expire();
        let (max_b, delay) = (self.sc.pool.max_batch as usize, self.sc.pool.max_queue_delay_s);
        while !self.idle.is_empty() {
            let ready = (0..2)
                .filter_map(|v| self.queues[v].front().map(|r| (v, r.arrived)))
                // The same sum the timer is armed with (below): late in a run `now - arrived`
                // can round below `delay` at the very instant the timer fires, which re-armed
                // the timer at that instant for ever.
                .filter(|&(v, arrived)| self.queues[v].len() >= max_b || self.now >= arrived + delay - 1e-12)
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let Some((v, _)) = ready else { break };
            let w = self.idle.pop().expect("checked");
            let n = self.queues[v].len().min(max_b);
            let batch: Vec<Req> = self.queues[v].drain(..n).collect();
            for r in &batch {
                self.t.queue_wait_sum += self.now - r.arrived;
            }
            let mean = self.batch_seconds(n) * if v == 1 { self.sc.canary.v2_slowdown } else { 1.0 };
            let secs = match self.sc.pool.service_time {
                ServiceTime::Deterministic => mean,
                ServiceTime::Exponential => Exp::new(1.0 / mean).map(|e| e.sample(&mut self.rng_service)).unwrap_or(mean),
            };
            self.t.batches += 1;
            self.t.batched_requests += n as u64;
            let worker = &mut self.workers[w];
            worker.state = State::Busy;
            worker.batch = batch;
            self.q.push(self.now + secs, Ev::BatchDone { worker: w });
        }
        // Arm the timer for the oldest waiting request when nothing could go yet.
        if !self.idle.is_empty() {
            let due = (0..2).filter_map(|v| self.queues[v].front().map(|r| r.arrived + delay)).fold(f64::INFINITY, f64::min);
            if due < self.timer_at {
                self.timer_at = due;
                self.q.push(due, Ev::BatchTimer);
            }
        }
    }

    /// The curve's batch time for `n`, linear between its points and beyond its ends.
    pub fn batch_seconds(&self, n: usize) -> f64 {
        control::curve_seconds(&self.sc.pool.curve, n)
    }

    fn batch_done(&mut self, w: usize) {
        if self.workers[w].state != State::Busy {
            return; // reclaimed while busy: its batch went back to the queue
        }
        let batch = std::mem::take(&mut self.workers[w].batch);
        for r in batch {
            let latency = self.now - r.arrived;
            let p_err = if r.version == 1 { self.sc.canary.v2_error_rate } else { self.sc.canary.v1_error_rate };
            let error = self.rng_route.random::<f64>() < p_err;
            self.t.served += 1;
            self.t.sojourn_sum += latency;
            if error {
                self.t.errors += 1;
            } else if latency <= self.sc.slo_latency_s {
                self.t.good += 1;
            }
            self.sample_counts[3] += 1;
            self.sample_lat.push(latency);
            self.all_lat.push(latency);
            self.scale_lat.push(latency);
            let win = &mut self.canary_win[r.version];
            win.latencies.push(latency);
            win.errors += u64::from(error);
        }
        let worker = &mut self.workers[w];
        if worker.draining {
            worker.state = State::Gone;
        } else {
            worker.state = State::Idle;
            self.idle.push(w);
        }
        self.dispatch();
    }

    fn add_worker(&mut self, warm: bool) {
        let alive = self.alive();
        let spot_alive = self.workers.iter().filter(|w| w.state != State::Gone && !w.draining && w.spot).count() as f64;
        // On-demand first; spot while the spot share stays within its target.
        let spot = spot_alive + 1.0 <= self.sc.pool.spot_share * (alive + 1) as f64 + 1e-9;
        let id = self.workers.len();
        self.workers.push(Worker { state: if warm { State::Idle } else { State::Starting }, spot, draining: false, batch: Vec::new() });
        if warm {
            self.idle.push(id);
        } else {
            self.q.push(self.now + self.sc.pool.cold_start_s, Ev::WorkerReady { worker: id });
        }
        let rate = self.sc.pool.spot_preemptions_per_h / 3600.0;
        if spot && rate > 0.0 {
            let after = Exp::new(rate).map(|e| e.sample(&mut self.rng_spot)).unwrap_or(f64::INFINITY);
            self.q.push(self.now + after, Ev::Preempt { worker: id });
        }
    }

    /// A spot reclaim: the worker vanishes; its batch returns to the front of its queue.
    fn preempt(&mut self, w: usize) {
        if self.workers[w].state == State::Gone {
            return;
        }
        self.t.preemptions += 1;
        let batch = std::mem::take(&mut self.workers[w].batch);
        self.t.requeued += batch.len() as u64;
        for r in batch.into_iter().rev() {
            self.queues[r.version].push_front(r);
        }
        self.workers[w].state = State::Gone;
        self.idle.retain(|&i| i != w);
        self.dispatch();
    }

    fn autoscale(&mut self) {
        let a = &self.sc.autoscaler;
        self.q.push(self.now + a.interval_s, Ev::Autoscale);
        self.expire();
        let (_, ready, _, _) = self.census();
        let signal = match a.signal {
            // Requests waiting or being served per serving worker (what a KEDA queue scaler
            // sees): a drained queue with busy workers still counts their batches.
            Signal::QueueDepth => self.in_flight() as f64 / ready.max(1) as f64,
            Signal::Utilisation => {
                let (busy, rdy) = (self.t.busy_area - self.busy_mark.0, self.t.ready_area - self.busy_mark.1);
                if rdy > 0.0 { busy / rdy } else { 1.0 }
            }
            Signal::P95Latency => {
                let oldest = (0..2).filter_map(|v| self.queues[v].front().map(|r| self.now - r.arrived)).fold(0.0, f64::max);
                control::quantile(&mut self.scale_lat, 0.95).unwrap_or(0.0).max(oldest)
            }
            Signal::RequestRate => (self.t.arrived - self.arrived_mark) as f64 / a.interval_s / self.alive().max(1) as f64,
        };
        self.busy_mark = (self.t.busy_area, self.t.ready_area);
        self.scale_lat.clear();
        self.arrived_mark = self.t.arrived;
        let current = self.alive();
        let wanted = control::desired_workers(a, current, signal, self.queued() > 0);
        // HPA's scale-down stabilisation: shrink only to the most any look in the last
        // scale-down cooldown asked for, so one quiet moment does not empty the pool.
        self.recent.retain(|&(t, _)| t >= self.now - a.scale_down_cooldown_s);
        self.recent.push_back((self.now, wanted));
        let desired = if wanted < current { self.recent.iter().map(|r| r.1).max().unwrap_or(wanted) } else { wanted };
        let below_min = current < a.min_workers;
        if desired > current && (below_min || self.now - self.last_up >= a.scale_up_cooldown_s) {
            for _ in current..desired {
                self.add_worker(false);
            }
            self.last_up = self.now;
        } else if desired < current
            && self.now - self.last_down >= a.scale_down_cooldown_s
            && self.now - self.last_up >= a.scale_down_cooldown_s
        {
            self.remove_workers(current - desired);
            self.last_down = self.now;
        } else {
            return;
        }
        self.t.max_alive = self.t.max_alive.max(self.alive());
        self.out.scale_actions.push(ScaleAction { t_h: self.now / 3600.0, from: current, to: self.alive(), signal });
    }

    /// Removes starting workers first, then idle ones, then lets busy ones drain.
    fn remove_workers(&mut self, mut n: u32) {
        for pass in [State::Starting, State::Idle, State::Busy] {
            for w in (0..self.workers.len()).rev() {
                let worker = &mut self.workers[w];
                if n == 0 {
                    return;
                }
                if worker.state != pass || worker.draining {
                    continue;
                }
                if pass == State::Busy {
                    worker.draining = true;
                } else {
                    worker.state = State::Gone;
                    self.idle.retain(|&i| i != w);
                }
                n -= 1;
            }
        }
    }

    fn sample(&mut self) -> Sample {
        self.expire();
        let dt = self.sc.sample_every_s;
        let (busy, ready, od, spot) = self.census();
        let starting = self.workers.iter().filter(|w| w.state == State::Starting).count() as u32;
        let mut lat = std::mem::take(&mut self.sample_lat);
        let [arr, rej, tout, served] = std::mem::take(&mut self.sample_counts);
        let good = lat.iter().filter(|&&l| l <= self.sc.slo_latency_s).count();
        Sample {
            t_h: self.now / 3600.0,
            offered_rps: Self::rate(self.sc, self.now),
            arrived_rps: arr as f64 / dt,
            served_rps: served as f64 / dt,
            rejected: rej,
            timed_out: tout,
            ready,
            starting,
            busy,
            queue: self.queued(),
            p50_s: control::quantile(&mut lat, 0.50),
            p95_s: control::quantile(&mut lat, 0.95),
            p99_s: control::quantile(&mut lat, 0.99),
            within_slo: if served + tout == 0 { None } else { Some(good as f64 / (served + tout) as f64) },
            cost_per_h: od as f64 * self.sc.pool.gpu.on_demand_per_h + spot as f64 * self.sc.pool.gpu.spot_per_h,
            canary_share: self.canary_share,
            arrived_total: self.t.arrived,
            served_total: self.t.served,
            rejected_total: self.t.rejected,
            timed_out_total: self.t.timed_out,
            good_total: self.t.good,
            in_flight: self.in_flight(),
        }
    }
}
