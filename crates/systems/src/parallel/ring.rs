//! Ring all-reduce, written by hand because it is the lesson: N ranks in a ring, each taking
//! from the previous rank. Reduce-scatter (N − 1 steps: each rank adds the partial sum its
//! neighbour holds to its own copy of that chunk) then all-gather (N − 1 steps: the finished
//! chunks travel once round the ring). Each rank moves 2(N − 1)/N of the vector.
//!
//! Correct for any N and any length (chunk c is `[c·len/N, (c+1)·len/N)`, so chunks differ by
//! at most one element and may be empty). The reduction order is fixed — chunk c is summed as
//! `((g_c + g_{c+1}) + …) + g_{c−1}` whatever the threads' timing — so a run is bit-exact run
//! to run.
//!
//! The transport is shared memory, as NCCL's on one machine: the replicas are threads of one
//! process, so a rank reads its neighbour's chunk where it lies (the gradient tensors on the
//! CPU, the staged host buffer of a GPU replica) instead of receiving a copy — no buffer is
//! filled, sent or copied back. Each rank publishes where its vector lies and how many steps
//! it has finished; ranks move in lockstep with both neighbours, which is what keeps a chunk
//! from being overwritten while the next rank still reads it (see `RingPeer::step`). An
//! optional simulated link holds each step for `latency + bytes / bandwidth` first, to show a
//! slower interconnect.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpulab_core::error::{Error, Result};

/// A simulated interconnect: every message (a step's chunk) waits `latency_s + bytes /
/// bytes_per_s` before its receiver reads it. Simulated, and labelled so wherever it is used.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimLink {
    pub bytes_per_s: f64,
    pub latency_s: f64,
}

impl SimLink {
    pub fn message_s(&self, bytes: usize) -> f64 {
        self.latency_s + bytes as f64 / self.bytes_per_s
    }
}

/// How long a rank waits for its neighbour before it gives up (a replica that failed or hangs).
pub const PEER_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a rank spins on its neighbour's progress before it yields the core, and how long
/// it yields before it sleeps between looks. A sleeping thread takes tens of µs to wake on a
/// VM (40 µs a message on our 2-core VMs), longer than most waits for a neighbour that is
/// finishing its step; a replica stuck for longer should not hold a core.
const SPIN: Duration = Duration::from_micros(200);
const YIELD: Duration = Duration::from_millis(5);
const NAP: Duration = Duration::from_micros(200);

/// Bytes and time this rank spent in all-reduce.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CommStats {
    pub calls: u64,
    /// Bytes this rank took from its previous neighbour, what a link would carry; in a ring
    /// every rank moves the same, so it is also what each rank's neighbour took from it.
    pub bytes_sent: u64,
    pub seconds: f64,
}

/// One segment of a rank's vector: its address and length, as the neighbour reads it.
#[derive(Clone, Copy, Debug)]
struct Seg {
    addr: usize,
    len: usize,
}

/// Which collective a call is. Each runs its own number of steps and reads its neighbour's
/// memory in them, so two ranks in different collectives would read memory the other has
/// already handed back to its caller: the kind is part of each call's handshake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    AllReduce,
    ReduceScatter,
    AllGather,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all_reduce",
            Kind::ReduceScatter => "reduce_scatter",
            Kind::AllGather => "all_gather",
        }
    }
}

/// What a rank publishes for the call in progress: where its vector lies, and what it is.
#[derive(Default)]
struct Call {
    segs: Vec<Seg>,
    kind: Kind,
    /// The sum of the segments' lengths.
    len: usize,
}

/// What a rank shows its neighbours.
#[derive(Default)]
struct Slot {
    /// Steps this rank has finished, over all its calls (each call's first step publishes).
    done: AtomicU64,
    /// The rank is reading its previous neighbour's memory now.
    reading: AtomicBool,
    /// The rank has left the ring (an error, or its end dropped): its memory must not be read.
    gone: AtomicBool,
    /// The call in progress.
    call: Mutex<Call>,
}

/// One rank's end of the ring.
pub struct RingPeer {
    pub rank: usize,
    pub n: usize,
    slots: Arc<[Slot]>,
    link: Option<SimLink>,
    timeout: Duration,
    pub stats: CommStats,
    /// This call's segments, and the previous rank's (buffers reused call to call).
    mine: Vec<Seg>,
    theirs: Vec<Seg>,
}

/// The N ends of a ring, rank order.
pub fn ring(n: usize, link: Option<SimLink>) -> Vec<RingPeer> {
    let slots: Arc<[Slot]> = (0..n).map(|_| Slot::default()).collect();
    (0..n)
        .map(|rank| RingPeer {
            rank,
            n,
            slots: slots.clone(),
            link,
            timeout: PEER_TIMEOUT,
            stats: CommStats::default(),
            mine: Vec::new(),
            theirs: Vec::new(),
        })
        .collect()
}

/// Chunk `c` of a vector of `len` elements cut into `n` near-equal chunks.
pub fn chunk(len: usize, n: usize, c: usize) -> Range<usize> {
    c * len / n..(c + 1) * len / n
}

/// Calls `f(mine, theirs, len, at)` for each piece of `range` of two concatenations of
/// segments, cut wherever a segment of either ends, `at` the piece's offset in the
/// concatenation. Both must hold at least `range.end` elements.
fn spans(mine: &[Seg], theirs: &[Seg], range: Range<usize>, mut f: impl FnMut(usize, usize, usize, usize)) {
    let (mut a, mut b) = (Cursor::at(mine, range.start), Cursor::at(theirs, range.start));
    let mut at = range.start;
    while at < range.end {
        let (Some(ma), Some(ta)) = (a.skip_empty(mine), b.skip_empty(theirs)) else { break };
        let len = (mine[a.seg].len - a.off).min(theirs[b.seg].len - b.off).min(range.end - at);
        f(ma, ta, len, at);
        a.off += len;
        b.off += len;
        at += len;
    }
}

/// A position in a concatenation of segments.
struct Cursor {
    seg: usize,
    off: usize,
}

impl Cursor {
    fn at(segs: &[Seg], pos: usize) -> Self {
        let mut base = 0;
        for (seg, s) in segs.iter().enumerate() {
            if pos < base + s.len {
                return Cursor { seg, off: pos - base };
            }
            base += s.len;
        }
        Cursor { seg: segs.len(), off: 0 }
    }

    /// The address of the element here, past any segment already used up.
    fn skip_empty(&mut self, segs: &[Seg]) -> Option<usize> {
        while self.seg < segs.len() && self.off == segs[self.seg].len {
            self.seg += 1;
            self.off = 0;
        }
        segs.get(self.seg).map(|s| s.addr + self.off * std::mem::size_of::<f32>())
    }
}

/// Elements per block of the reduce-scatter's finishing pass: a few arrays of it stay in L1/L2.
const BLOCK: usize = 2048;

/// Leaves the ring cleanly when a call ends early (an error, or a panic unwinding): marks this
/// rank gone, then waits until the next rank is not reading its memory, which the caller may
/// free or overwrite as soon as the call returns.
struct Leaving<'a> {
    slots: &'a [Slot],
    rank: usize,
    armed: bool,
}

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        if self.armed {
            leave(self.slots, self.rank);
        }
    }
}

fn leave(slots: &[Slot], rank: usize) {
    // A panic in the middle of a read (in `reduce_scatter`'s hook, say) leaves no reader.
    slots[rank].reading.store(false, Ordering::SeqCst);
    slots[rank].gone.store(true, Ordering::SeqCst);
    let next = &slots[(rank + 1) % slots.len()];
    // The next rank checks `gone` after it says it is reading (both SeqCst), so either it
    // saw `gone` and reads nothing, or this sees it reading and waits for the read to end.
    while next.reading.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
}

impl Drop for RingPeer {
    fn drop(&mut self) {
        leave(&self.slots, self.rank);
    }
}

/// `addr..addr + len` elements of a published segment as a slice.
///
/// SAFETY: the range lies inside a segment published for the call in progress (`RingPeer::call`
/// keeps its owner's borrow alive until every reader is done) and no rank writes it during
/// this step (`RingPeer::step`'s lockstep).
unsafe fn read_only<'a>(addr: usize, len: usize) -> &'a [f32] {
    unsafe { std::slice::from_raw_parts(addr as *const f32, len) }
}

/// SAFETY: as `read_only`, and no other rank reads the range during this step either.
unsafe fn writable<'a>(addr: usize, len: usize) -> &'a mut [f32] {
    unsafe { std::slice::from_raw_parts_mut(addr as *mut f32, len) }
}

impl RingPeer {
    /// Shortens how long this rank waits for a neighbour (tests of a failing peer).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sums `data` element-wise over every rank, in place; every rank must call it with the same
    /// length, in the same order of calls.
    pub fn all_reduce(&mut self, data: &mut [f32]) -> Result<()> {
        self.all_reduce_scaled(data, 1.0)
    }

    /// `all_reduce`, each finished sum multiplied by `scale` as it is stored (1/N gives the
    /// mean): the same product per element as scaling afterwards, without a pass of its own.
    pub fn all_reduce_scaled(&mut self, data: &mut [f32], scale: f32) -> Result<()> {
        self.all_reduce_segments(&mut [data], scale)
    }

    /// `all_reduce_scaled` of the concatenation of `segs`, in place in each: a replica's
    /// gradient tensors, without staging them into one vector. The chunks are cut from the
    /// concatenation, so the sums are those of the one vector, bit for bit.
    pub fn all_reduce_segments(&mut self, segs: &mut [&mut [f32]], scale: f32) -> Result<()> {
        let t0 = Instant::now();
        self.call(Kind::AllReduce, segs, |p, len| {
            p.reduce_scatter_steps(len, scale, &mut |_, _| {})?;
            p.all_gather_steps(len)
        })?;
        self.count(t0, 0.0);
        Ok(())
    }

    /// The first half of an all-reduce, with a hook for ZeRO-1. Afterwards this rank's own
    /// chunk of the concatenation of `segs` (`own_chunk`) holds the finished sums times
    /// `scale`, the bits `all_reduce_segments` stores there; the other chunks hold partial
    /// sums, not to be used. Block by block, as each block of the own chunk is finished (so
    /// while it is in cache), `own(at, finished)` sees it, `at` its offset in the
    /// concatenation; a block never spans two segments. Returns the seconds spent in `own`,
    /// which are not counted as communication.
    pub fn reduce_scatter(&mut self, segs: &mut [&mut [f32]], scale: f32, mut own: impl FnMut(usize, &mut [f32])) -> Result<f64> {
        let t0 = Instant::now();
        let own_s = self.call(Kind::ReduceScatter, segs, |p, len| p.reduce_scatter_steps(len, scale, &mut own))?;
        self.count(t0, own_s);
        Ok(own_s)
    }

    /// The second half: each rank's own chunk of `segs` (as it left it after `reduce_scatter`)
    /// travels round the ring, so every rank ends with every rank's chunk.
    pub fn all_gather(&mut self, segs: &mut [&mut [f32]]) -> Result<()> {
        let t0 = Instant::now();
        self.call(Kind::AllGather, segs, |p, len| p.all_gather_steps(len))?;
        self.count(t0, 0.0);
        Ok(())
    }

    /// The chunk of a `len`-element vector this rank finishes in the reduce-scatter.
    pub fn own_chunk(&self, len: usize) -> Range<usize> {
        chunk(len, self.n, (self.rank + 1) % self.n)
    }

    /// After step s, rank r holds the sum of s + 2 ranks' chunk r − s − 1, in place: it added
    /// its own values to the partial sum the previous rank made of that chunk the step before.
    /// The last step finishes chunk r + 1, block by block, each shown to `own`.
    fn reduce_scatter_steps(&mut self, len: usize, scale: f32, own: &mut dyn FnMut(usize, &mut [f32])) -> Result<f64> {
        let (n, r) = (self.n, self.rank);
        let finish = |sum: f32| if scale == 1.0 { sum } else { sum * scale };
        let mut own_s = 0.0;
        let mut finishing = |m: &mut [f32], t: Option<&[f32]>, at: usize| {
            for (b, block) in m.chunks_mut(BLOCK).enumerate() {
                match t {
                    Some(t) => block.iter_mut().zip(&t[b * BLOCK..]).for_each(|(m, t)| *m = finish(*t + *m)),
                    None => block.iter_mut().for_each(|m| *m = finish(*m)),
                }
                let t0 = Instant::now();
                own(at + b * BLOCK, block);
                own_s += t0.elapsed().as_secs_f64();
            }
        };
        if n == 1 {
            // No neighbour: the own chunk is everything, and this rank's values are the sums.
            // SAFETY: one rank, so no other thread sees its segments.
            spans(&self.mine, &self.mine, 0..len, |m, _, l, at| finishing(unsafe { writable(m, l) }, None, at));
            return Ok(own_s);
        }
        for s in 0..n - 1 {
            let range = chunk(len, n, (r + 2 * n - s - 1) % n);
            let last = s + 2 == n;
            self.step(range.len(), |mine, theirs| {
                spans(mine, theirs, range, |m, t, l, at| {
                    // SAFETY: chunk r − s − 1: the previous rank finished writing it the step
                    // before and writes another now; the next rank reads another now.
                    let (m, t) = unsafe { (writable(m, l), read_only(t, l)) };
                    if last {
                        finishing(m, Some(t), at);
                    } else {
                        m.iter_mut().zip(t).for_each(|(m, t)| *m += *t);
                    }
                })
            })?;
        }
        Ok(own_s)
    }

    /// Step s: rank r copies chunk r − s, which the previous rank finished (s = 0) or copied
    /// the step before.
    fn all_gather_steps(&mut self, len: usize) -> Result<()> {
        let (n, r) = (self.n, self.rank);
        for s in 0..n.saturating_sub(1) {
            let range = chunk(len, n, (r + n - s) % n);
            self.step(range.len(), |mine, theirs| {
                // SAFETY: as in the reduce-scatter: each rank writes one chunk per step, and
                // never the one its next rank reads in that step.
                spans(mine, theirs, range, |m, t, l, _| unsafe { writable(m, l).copy_from_slice(read_only(t, l)) })
            })?;
        }
        Ok(())
    }

    /// Runs one collective over `segs`: publishes where they lie and which collective this is
    /// (a step of its own), checks that both neighbours publish the same collective over the
    /// same length before anything is read, runs `body`, then waits until the next rank has
    /// taken all it needs from them, since the caller may change or free them once this
    /// returns. On an error, or a panic, this rank leaves the ring (`Leaving`).
    ///
    /// Why the handshake makes a mismatch an error on both sides and never a read of freed
    /// memory: every call of a kind runs the same number of steps, so while every earlier call
    /// matched, all ranks' step counts agree at a call's start; each rank compares its call
    /// with both neighbours' right after publishing, so a pair that differs is seen by both
    /// of them before either reads the other, and each fails and leaves the ring.
    fn call<R>(&mut self, kind: Kind, segs: &mut [&mut [f32]], body: impl FnOnce(&mut Self, usize) -> Result<R>) -> Result<R> {
        self.mine.clear();
        self.mine.extend(segs.iter_mut().map(|s| Seg { addr: s.as_mut_ptr() as usize, len: s.len() }));
        let len = self.mine.iter().map(|s| s.len).sum();
        if self.n == 1 {
            return body(self, len);
        }
        let slots = self.slots.clone();
        let mut leaving = Leaving { slots: &slots, rank: self.rank, armed: true };
        {
            // The next rank finished the last call (this rank waited for it), so it no longer
            // looks at this slot.
            let mut published = slots[self.rank].call.lock().unwrap_or_else(|e| e.into_inner());
            published.segs.clear();
            published.segs.extend_from_slice(&self.mine);
            (published.kind, published.len) = (kind, len);
        }
        self.finish_step();
        self.handshake(kind, len)?;
        let out = body(self, len)?;
        self.wait((self.rank + 1) % self.n, self.steps_done())?;
        leaving.armed = false;
        Ok(out)
    }

    /// Waits for both neighbours to publish this call, then compares theirs with this one. A
    /// neighbour cannot publish its next call before this rank has finished a step of this one
    /// (each of its steps waits for this rank), so what is read here is this call's.
    fn handshake(&self, kind: Kind, len: usize) -> Result<()> {
        let (prev, next) = ((self.rank + self.n - 1) % self.n, (self.rank + 1) % self.n);
        let t = self.steps_done();
        for who in [prev, next] {
            self.wait(who, t)?;
            let theirs = self.slots[who].call.lock().unwrap_or_else(|e| e.into_inner());
            if theirs.kind != kind {
                return Err(Error::Internal(format!(
                    "ring: replica {} called {} but replica {who} called {} (every replica must make the same collective calls in the same order)",
                    self.rank,
                    kind.name(),
                    theirs.kind.name()
                )));
            }
            if theirs.len != len {
                return Err(Error::Internal(format!(
                    "ring {}: replica {} holds {len} elements, replica {who} {} (the replicas disagree about the vector's length)",
                    kind.name(),
                    self.rank,
                    theirs.len
                )));
            }
        }
        Ok(())
    }

    /// One step of a call, moving `elements` from the previous rank: waits until both
    /// neighbours have finished the step before — the previous rank's data for this step is
    /// ready, and the next rank has taken what this step overwrites (each step writes a chunk
    /// the next rank read in an earlier step, never the one it reads in this one) — then runs
    /// `f(mine, theirs)` while this rank says it is reading.
    fn step(&mut self, elements: usize, f: impl FnOnce(&[Seg], &[Seg])) -> Result<()> {
        let (prev, next) = ((self.rank + self.n - 1) % self.n, (self.rank + 1) % self.n);
        let t = self.steps_done();
        self.wait(prev, t)?;
        self.wait(next, t)?;
        let bytes = elements * std::mem::size_of::<f32>();
        if let Some(link) = self.link {
            std::thread::sleep(Duration::from_secs_f64(link.message_s(bytes)));
        }
        let me = &self.slots[self.rank];
        me.reading.store(true, Ordering::SeqCst);
        if self.slots[prev].gone.load(Ordering::SeqCst) {
            me.reading.store(false, Ordering::SeqCst);
            return Err(self.peer_gone("previous"));
        }
        self.theirs.clear();
        self.theirs.extend_from_slice(&self.slots[prev].call.lock().unwrap_or_else(|e| e.into_inner()).segs);
        // The handshake compared the lengths; `spans` relies on it.
        debug_assert_eq!(self.mine.iter().map(|s| s.len).sum::<usize>(), self.theirs.iter().map(|s| s.len).sum::<usize>());
        f(&self.mine, &self.theirs);
        me.reading.store(false, Ordering::SeqCst);
        self.stats.bytes_sent += bytes as u64;
        self.finish_step();
        Ok(())
    }

    /// Steps this rank has finished (only this rank's thread writes its count).
    fn steps_done(&self) -> u64 {
        self.slots[self.rank].done.load(Ordering::Relaxed)
    }

    fn finish_step(&self) {
        self.slots[self.rank].done.fetch_add(1, Ordering::Release);
    }

    /// Waits until rank `who` has finished `target` steps: spinning, then yielding, then
    /// napping; an error when it left the ring or took longer than the timeout.
    fn wait(&self, who: usize, target: u64) -> Result<()> {
        let slot = &self.slots[who];
        let t0 = Instant::now();
        loop {
            if slot.done.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            // A neighbour may finish its last step and leave between the two loads: it stores
            // `done` before `gone`, so looking at `done` again after seeing `gone` tells a
            // neighbour that left when done from one that failed.
            if slot.gone.load(Ordering::Acquire) && slot.done.load(Ordering::Acquire) < target {
                return Err(self.peer_gone(if who == (self.rank + 1) % self.n { "next" } else { "previous" }));
            }
            let waited = t0.elapsed();
            if waited > self.timeout {
                return Err(Error::TrainingProcess(format!(
                    "replica {} waited {} s for replica {who} in the all-reduce; a replica hangs or the replicas called all-reduce a different number of times",
                    self.rank,
                    self.timeout.as_secs()
                )));
            }
            if waited < SPIN {
                std::hint::spin_loop();
            } else if waited < YIELD {
                std::thread::yield_now();
            } else {
                std::thread::sleep(NAP);
            }
        }
    }

    fn count(&mut self, t0: Instant, not_comm_s: f64) {
        self.stats.calls += 1;
        self.stats.seconds += t0.elapsed().as_secs_f64() - not_comm_s;
    }

    fn peer_gone(&self, which: &str) -> Error {
        Error::PeerLost(format!(
            "replica {} lost its {which} neighbour in the ring all-reduce (that replica stopped with an error)",
            self.rank
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f(peer, input)` for every rank of a ring on its own thread; returns every rank's
    /// result, rank order.
    fn on_ranks<I: Send, T: Send>(inputs: Vec<I>, f: impl Fn(RingPeer, I) -> T + Sync) -> Vec<T> {
        on_linked_ranks(None, inputs, f)
    }

    /// `on_ranks` over a ring with a simulated link.
    fn on_linked_ranks<I: Send, T: Send>(link: Option<SimLink>, inputs: Vec<I>, f: impl Fn(RingPeer, I) -> T + Sync) -> Vec<T> {
        let f = &f;
        std::thread::scope(|s| {
            let hs: Vec<_> = ring(inputs.len(), link).into_iter().zip(inputs).map(|(p, v)| s.spawn(move || f(p, v))).collect();
            hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
        })
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Runs one all-reduce per rank on its own thread; returns every rank's result.
    fn reduce(inputs: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        reduce_scaled(inputs, 1.0, 1)
    }

    /// `calls` scaled all-reduces per rank, each of the same inputs (each call publishes the
    /// vector anew); returns every rank's last result.
    fn reduce_scaled(inputs: Vec<Vec<f32>>, scale: f32, calls: usize) -> Vec<Vec<f32>> {
        on_ranks(inputs, |mut p, v| {
            let mut out = v.clone();
            for _ in 0..calls {
                out.copy_from_slice(&v);
                p.all_reduce_scaled(&mut out, scale).expect("all-reduce");
            }
            out
        })
    }

    #[test]
    fn equals_a_plain_sum_for_every_n_and_uneven_lengths() {
        for n in 1..=5 {
            for len in [0, 1, 2, 3, 5, 7, 64, 1001] {
                // Small integers: every order of addition gives the exact sum.
                let inputs: Vec<Vec<f32>> = (0..n).map(|r| (0..len).map(|i| ((i * 7 + r * 13) % 23) as f32 - 11.0).collect()).collect();
                let want: Vec<f32> = (0..len).map(|i| inputs.iter().map(|v| v[i]).sum()).collect();
                for (r, got) in reduce(inputs).into_iter().enumerate() {
                    assert_eq!(got, want, "n={n} len={len} rank {r}");
                }
            }
        }
    }

    /// The mean formed inside the ring is the plain sum times 1/N bit for bit, on every rank,
    /// also on repeated calls.
    #[test]
    fn a_scaled_all_reduce_equals_the_sum_times_the_scale_bit_for_bit() {
        for n in 1..=4 {
            for len in [0, 1, 5, 333] {
                let inputs: Vec<Vec<f32>> =
                    (0..n).map(|r| (0..len).map(|i| ((i * 31 + r * 7) % 97) as f32 * 0.37 - 17.0).collect()).collect();
                let scale = 1.0 / n as f32;
                let sums = reduce(inputs.clone());
                for calls in [1, 3] {
                    for (r, got) in reduce_scaled(inputs.clone(), scale, calls).into_iter().enumerate() {
                        let want: Vec<u32> = sums[r].iter().map(|s| (s * scale).to_bits()).collect();
                        assert_eq!(got.iter().map(|g| g.to_bits()).collect::<Vec<_>>(), want, "n={n} len={len} rank {r} calls {calls}");
                    }
                }
            }
        }
    }

    /// The concatenation of segments (empty ones included) is reduced exactly as the one
    /// vector would be: the same bits on every rank, for every N.
    #[test]
    fn segments_reduce_as_their_concatenation_bit_for_bit() {
        for n in 1..=4 {
            let len = 301;
            let inputs: Vec<Vec<f32>> = (0..n).map(|r| (0..len).map(|i| ((i * 13 + r * 5) % 89) as f32 * 0.173 - 7.0).collect()).collect();
            let scale = 1.0 / n as f32;
            let want = reduce_scaled(inputs.clone(), scale, 1);
            let got = on_ranks(inputs, |mut p, mut v| {
                let (a, rest) = v.split_at_mut(100);
                let (empty, rest) = rest.split_at_mut(0);
                let (b, c) = rest.split_at_mut(1);
                p.all_reduce_segments(&mut [a, empty, b, c], scale).expect("all-reduce");
                v
            });
            for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(bits(g), bits(w), "n={n} rank {r}");
            }
        }
    }

    /// ZeRO-1's halves: the reduce-scatter shows each rank its own chunk, block by block, with
    /// the bits the all-reduce stores there; the own chunks tile the vector; and the all-gather
    /// hands every rank every chunk as its owner left it (here: the mean plus one, what an
    /// update would write).
    #[test]
    fn reduce_scatter_then_all_gather_is_the_all_reduce_bit_for_bit() {
        for n in 1..=5 {
            for len in [0, 1, 4, 7, 301, 5000] {
                let inputs: Vec<Vec<f32>> =
                    (0..n).map(|r| (0..len).map(|i| ((i * 29 + r * 11) % 83) as f32 * 0.219 - 9.0).collect()).collect();
                let scale = 1.0 / n as f32;
                let want = reduce_scaled(inputs.clone(), scale, 1);
                let peers = ring(n, None);
                let got: Vec<(Vec<usize>, Vec<f32>)> = std::thread::scope(|s| {
                    let hs: Vec<_> = peers
                        .into_iter()
                        .zip(inputs)
                        .zip(&want)
                        .map(|((mut p, mut v), want)| {
                            s.spawn(move || {
                                let cut = v.len() / 3;
                                let (a, b) = v.split_at_mut(cut);
                                let mut seen = Vec::new();
                                p.reduce_scatter(&mut [a, b], scale, |at, finished| {
                                    for (i, f) in finished.iter_mut().enumerate() {
                                        assert_eq!(f.to_bits(), want[at + i].to_bits(), "element {} of the own chunk", at + i);
                                        seen.push(at + i);
                                        *f += 1.0;
                                    }
                                })
                                .expect("reduce-scatter");
                                let (a, b) = v.split_at_mut(cut);
                                p.all_gather(&mut [a, b]).expect("all-gather");
                                (seen, v)
                            })
                        })
                        .collect();
                    hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
                });
                let mut covered = vec![0; len];
                got.iter().flat_map(|g| &g.0).for_each(|&i| covered[i] += 1);
                assert!(covered.iter().all(|&c| c == 1), "n={n} len={len}: the own chunks do not tile the vector");
                let marked: Vec<u32> = want[0].iter().map(|x| (x + 1.0).to_bits()).collect();
                for (r, (_, gathered)) in got.iter().enumerate() {
                    assert_eq!(
                        gathered.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        marked,
                        "n={n} len={len} rank {r} after the all-gather"
                    );
                }
            }
        }
    }

    #[test]
    fn random_floats_agree_with_a_plain_sum_and_between_ranks() {
        let mut seed = 0x9e37_79b9u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed as f32 / u32::MAX as f32 - 0.5
        };
        for n in 2..=5 {
            let inputs: Vec<Vec<f32>> = (0..n).map(|_| (0..333).map(|_| next()).collect()).collect();
            let want: Vec<f32> = (0..333).map(|i| inputs.iter().map(|v| v[i]).sum()).collect();
            let out = reduce(inputs);
            for got in &out {
                assert_eq!(got, &out[0], "every rank ends with the same bits");
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-5, "n={n}: {g} vs {w}");
                }
            }
        }
    }

    #[test]
    fn each_rank_sends_two_n_minus_one_over_n_of_the_vector() {
        let stats = on_ranks(vec![(); 4], |mut p, ()| {
            p.all_reduce(&mut vec![1.0; 400]).expect("all-reduce");
            p.stats
        });
        for st in stats {
            assert_eq!(st.bytes_sent, 2 * 3 * 100 * 4);
        }
    }

    /// Hundreds of back-to-back calls, each rank rewriting its vector as soon as a call
    /// returns: a rank that wrote a chunk before its neighbour had read it, or returned before
    /// its neighbour was done with its memory, would leave a wrong sum somewhere.
    #[test]
    fn back_to_back_calls_never_read_a_rewritten_chunk() {
        for n in 2..=4 {
            let len = 4099;
            let sums = on_ranks(vec![(); n], |mut p, ()| {
                let mut v = vec![0.0f32; len];
                (0..300).all(|call| {
                    let value = |r: usize, j: usize| ((call * 7 + r * 3 + j) % 11) as f32;
                    v.iter_mut().enumerate().for_each(|(j, x)| *x = value(p.rank, j));
                    p.all_reduce(&mut v).expect("all-reduce");
                    v.iter().enumerate().all(|(j, &x)| x == (0..n).map(|r| value(r, j)).sum::<f32>())
                })
            });
            assert!(sums.iter().all(|&ok| ok), "n={n}: a call ended with a wrong sum on some rank: {sums:?}");
        }
    }

    /// A rank that finishes its last call and drops its end at once is done, not failed: the
    /// neighbour still waiting for that rank's last step must not take it for a lost one.
    #[test]
    fn a_rank_that_leaves_right_after_its_last_call_is_not_a_failure() {
        for trial in 0..2000 {
            let n = 2 + trial % 2;
            let got = on_ranks(vec![(); n], |mut p, ()| {
                let mut v = [p.rank as f32, 1.0, 2.0];
                p.all_reduce(&mut v).map(|_| v)
            });
            for (r, g) in got.iter().enumerate() {
                let want = [(n * (n - 1) / 2) as f32, n as f32, 2.0 * n as f32];
                assert_eq!(g.as_ref().map_err(|e| e.to_string()), Ok(&want), "trial {trial}, n={n}, rank {r}");
            }
        }
    }

    /// A rank whose reduce-scatter hook panics mid-read leaves the ring as it unwinds: its
    /// neighbour gets an error and can drop its own end, instead of waiting forever for a
    /// read that will never end.
    #[test]
    fn a_panic_inside_a_read_fails_the_neighbour_without_a_hang() {
        // Threads of their own, not scoped ones, so that a hang fails the test by its deadline.
        let (tx, rx) = std::sync::mpsc::channel();
        for mut p in ring(2, None) {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut v = vec![1.0f32; 5000];
                let out = if p.rank == 0 {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        p.reduce_scatter(&mut [&mut v], 1.0, |_, _| panic!("the update failed"))
                    }));
                    format!("unwound: {}", r.is_err())
                } else {
                    p.reduce_scatter(&mut [&mut v], 1.0, |_, _| {}).map_or_else(|e| e.to_string(), |_| "no error".into())
                };
                drop(p);
                let _ = tx.send(out);
            });
        }
        let mut got: Vec<String> =
            (0..2).map(|_| rx.recv_timeout(Duration::from_secs(60)).expect("a rank hung leaving the ring")).collect();
        got.sort();
        assert!(got[0].contains("replica 1") && got[0].contains("neighbour"), "{got:?}");
        assert_eq!(got[1], "unwound: true", "{got:?}");
    }

    /// Ranks may cut the same vector into different segments: each reads its neighbour's
    /// chunk across the neighbour's own cuts, and the sums stay the one vector's, bit for bit.
    #[test]
    fn ranks_with_different_cuts_reduce_as_the_one_vector() {
        for n in 2..=4 {
            let len = 97;
            let inputs: Vec<Vec<f32>> = (0..n).map(|r| (0..len).map(|i| ((i * 17 + r * 3) % 61) as f32 * 0.311 - 9.0).collect()).collect();
            let scale = 1.0 / n as f32;
            let want = reduce_scaled(inputs.clone(), scale, 1);
            let got = on_ranks(inputs, |mut p, mut v| {
                // Rank r cuts at 1 + 13·r and 40 + r, so no two ranks cut alike.
                let r = p.rank;
                let (a, rest) = v.split_at_mut(1 + 13 * r);
                let (b, c) = rest.split_at_mut(39 - 12 * r);
                p.all_reduce_segments(&mut [a, b, c], scale).expect("all-reduce");
                v
            });
            for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(bits(g), bits(w), "n={n} rank {r}");
            }
        }
    }

    /// A rank whose vector is longer than its neighbour's gets an error naming both lengths;
    /// the neighbour, whose own check fails too or who loses the rank, does not hang.
    #[test]
    fn ranks_that_disagree_about_the_length_fail_without_hanging() {
        let errors = on_ranks(vec![10, 11], |p, len| {
            let mut p = p.with_timeout(Duration::from_secs(10));
            p.all_reduce(&mut vec![1.0; len]).expect_err("the lengths differ").to_string()
        });
        assert!(errors.iter().any(|e| e.contains("10") && e.contains("11") && e.contains("length")), "{errors:?}");
    }

    /// Ranks in different collectives (every pair of kinds, rank 0 the odd one out) all fail,
    /// each error naming both calls, and none reads another's vector after its call returned:
    /// each rank frees its vector as soon as its call ends, so a read after that shows under
    /// AddressSanitizer (.ci/run) as a use after free.
    #[test]
    fn ranks_in_different_collectives_fail_on_both_sides() {
        let names = ["all_reduce", "reduce_scatter", "all_gather"];
        for a in 0..3 {
            for b in (0..3).filter(|&b| b != a) {
                for n in [2, 3] {
                    // A link's latency holds every step 5 ms before it reads: without the
                    // handshake, the rank still in its collective then read the vector its
                    // neighbour had freed (AddressSanitizer: heap-use-after-free).
                    let link = SimLink { bytes_per_s: 1e12, latency_s: 0.005 };
                    let results = on_linked_ranks(Some(link), (0..n).collect(), |p, rank: usize| {
                        let mut p = p.with_timeout(Duration::from_secs(20));
                        let mut v = vec![1.0f32; 4099];
                        let res = match if rank == 0 { a } else { b } {
                            0 => p.all_reduce(&mut v),
                            1 => p.reduce_scatter(&mut [&mut v], 1.0, |_, _| {}).map(drop),
                            _ => p.all_gather(&mut [&mut v]),
                        };
                        drop(v);
                        // This rank stays in the ring a moment: its end does not say it left.
                        std::thread::sleep(Duration::from_millis(50));
                        res.map_err(|e| e.to_string())
                    });
                    for (r, res) in results.iter().enumerate() {
                        let e = res.as_ref().expect_err("a mismatched call must fail");
                        assert!(e.contains(names[a]) && e.contains(names[b]), "{} vs {}, n={n}, rank {r}: {e}", names[a], names[b]);
                    }
                }
            }
        }
    }

    /// A rank that leaves between calls makes both its neighbours fail at once, not wait out
    /// their timeout: its end says it is gone.
    #[test]
    fn a_rank_that_leaves_between_calls_stops_its_neighbours() {
        let t0 = Instant::now();
        let results = on_ranks(vec![(); 3], |p, ()| {
            let mut p = p.with_timeout(Duration::from_secs(60));
            let mut v = vec![1.0; 300];
            p.all_reduce(&mut v)?;
            assert_eq!(v, vec![3.0; 300]);
            if p.rank == 2 {
                return Ok(()); // drops its end
            }
            p.all_reduce(&mut v)
        });
        assert!(results[2].is_ok());
        for r in 0..2 {
            let e = results[r].as_ref().expect_err("its neighbour left").to_string();
            assert!(e.contains(&format!("replica {r}")) && e.contains("neighbour"), "{e}");
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "the neighbours waited out their timeout");
    }

    #[test]
    fn a_vanished_peer_is_an_error_not_a_hang() {
        let mut peers = ring(2, None);
        let p1 = peers.pop().expect("two peers");
        let mut p0 = peers.pop().expect("two peers").with_timeout(Duration::from_secs(5));
        drop(p1);
        let e = p0.all_reduce(&mut [1.0, 2.0]).expect_err("the neighbour is gone");
        assert!(e.to_string().contains("replica 0"), "{e}");
    }
}
