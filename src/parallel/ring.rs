//! Ring all-reduce, written by hand because it is the lesson: N ranks in a ring, each sending
//! to the next and receiving from the previous. Reduce-scatter (N − 1 steps: each rank adds
//! the partial sum it receives to its own chunk and passes it on) then all-gather (N − 1 steps:
//! the finished chunks travel once round the ring). Each rank sends 2(N − 1)/N of the vector.
//!
//! Correct for any N and any length (chunk c is `[c·len/N, (c+1)·len/N)`, so chunks differ by
//! at most one element and may be empty). The reduction order is fixed — chunk c is summed as
//! `((g_c + g_{c+1}) + …) + g_{c−1}` whatever the threads' timing — so a run is bit-exact run
//! to run. Messages travel over in-process channels (host staging); an optional simulated link
//! holds each message for `latency + bytes / bandwidth` first, to show a slower interconnect.

use std::ops::Range;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A simulated interconnect: every message waits `latency_s + bytes / bytes_per_s` before it
/// is sent. Simulated, and labelled so wherever it is used.
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

/// How long a rank polls for its neighbour's message before it sleeps. A sleeping thread takes
/// tens of µs to wake on a VM (measured 40 µs a message on our 2-core VMs: a 1-element
/// all-reduce took 81 µs), longer than most waits for a neighbour that is finishing its step.
const SPIN: Duration = Duration::from_micros(200);

/// Bytes and time this rank spent in all-reduce.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CommStats {
    pub calls: u64,
    pub bytes_sent: u64,
    pub seconds: f64,
}

/// One rank's end of the ring.
pub struct RingPeer {
    pub rank: usize,
    pub n: usize,
    to_next: Sender<Vec<f32>>,
    from_prev: Receiver<Vec<f32>>,
    link: Option<SimLink>,
    timeout: Duration,
    pub stats: CommStats,
    /// Buffers earlier calls ended with, reused for a later call's first send: a fresh
    /// megabyte-sized Vec per call costs page faults every time. A few, because the calls
    /// alternate between gradient buckets and a few host values.
    spares: Vec<Vec<f32>>,
}

/// The N ends of a ring, rank order.
pub fn ring(n: usize, link: Option<SimLink>) -> Vec<RingPeer> {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| channel::<Vec<f32>>()).unzip();
    // Rank r receives on rxs[r]; rank r − 1 holds its sender.
    rxs.into_iter()
        .enumerate()
        .map(|(rank, from_prev)| RingPeer { rank, n, to_next: txs[(rank + 1) % n].clone(), from_prev, link, timeout: PEER_TIMEOUT, stats: CommStats::default(), spares: Vec::new() })
        .collect()
}

/// Chunk `c` of a vector of `len` elements cut into `n` near-equal chunks.
pub fn chunk(len: usize, n: usize, c: usize) -> Range<usize> {
    c * len / n..(c + 1) * len / n
}

/// Calls `f(piece, at)` for each piece of `range` of the concatenation of `segs`, in order, with
/// `at` the piece's offset from `range.start`.
fn pieces(segs: &mut [&mut [f32]], range: Range<usize>, mut f: impl FnMut(&mut [f32], usize)) {
    let mut base = 0;
    for seg in segs.iter_mut() {
        let (lo, hi) = (base, base + seg.len());
        base = hi;
        let (a, b) = (range.start.max(lo), range.end.min(hi));
        if a < b {
            f(&mut seg[a - lo..b - lo], a - range.start);
        }
        if hi >= range.end {
            break;
        }
    }
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
    /// concatenation, so the sums are those of the staged vector, bit for bit.
    pub fn all_reduce_segments(&mut self, segs: &mut [&mut [f32]], scale: f32) -> Result<()> {
        if self.n > 1 {
            // The all-gather passes on the unscaled sums the reduce-scatter ended with, each
            // receiver scaling as it stores: one copy out of the data per call.
            let (sums, _) = self.reduce_scatter_with(segs, scale, |_, _, _| {})?;
            self.all_gather(segs, sums, scale)
        } else {
            let t0 = Instant::now();
            if scale != 1.0 {
                segs.iter_mut().for_each(|s| s.iter_mut().for_each(|d| *d *= scale));
            }
            self.count(t0);
            Ok(())
        }
    }

    /// The first half of an all-reduce, with a hook for ZeRO-1. Afterwards this rank's own
    /// chunk of the concatenation of `segs` (`own_chunk`) holds the finished sums times
    /// `scale`, the bits `all_reduce_segments` stores there; the other chunks hold partial
    /// sums, not to be used. Block by block, as each block of the own chunk is finished (so
    /// while it is in cache), `own(at, finished, out)` sees it: `at` its offset in the
    /// concatenation, `finished` the block in `segs`, and `out` the same block of the returned
    /// buffer, which holds the unscaled sums and may be overwritten (with the updated
    /// parameters, for ZeRO-1). Returns that buffer, the one `all_gather` sends from, and the
    /// seconds spent in `own`, which are not counted as communication.
    pub fn reduce_scatter_with(&mut self, segs: &mut [&mut [f32]], scale: f32, mut own: impl FnMut(usize, &mut [f32], &mut [f32])) -> Result<(Vec<f32>, f64)> {
        /// Elements per block of the finishing pass: a few arrays of it stay in L1/L2.
        const BLOCK: usize = 2048;
        let t0 = Instant::now();
        let finish = |sum: f32| if scale == 1.0 { sum } else { sum * scale };
        let (n, r, len) = (self.n, self.rank, segs.iter().map(|s| s.len()).sum::<usize>());
        let mut own_s = 0.0;
        let own_range = self.own_chunk(len);
        let mut carry: Option<Vec<f32>> = None;
        if n == 1 {
            // No neighbour: the own chunk is everything, and this rank's values are the sums.
            let mut v = self.spare(len);
            pieces(segs, 0..len, |part, _| v.extend_from_slice(part));
            carry = Some(v);
        }
        // After step s, rank r holds the sum of s + 2 ranks' chunk r − s − 1. The chunk a rank
        // sends is always the one it reduced (or received) the step before, so after the first
        // send each received buffer travels on as it is.
        for s in 0..n.saturating_sub(1) {
            let out = match carry.take() {
                Some(v) => v,
                None => {
                    let range = chunk(len, n, (r + n - s) % n);
                    let mut v = self.spare(range.len());
                    pieces(segs, range, |part, _| v.extend_from_slice(part));
                    v
                }
            };
            self.send(out)?;
            let range = chunk(len, n, (r + 2 * n - s - 1) % n);
            let mut got = self.recv(range.len())?;
            if s + 2 < n {
                pieces(segs, range, |part, at| got[at..][..part.len()].iter_mut().zip(part).for_each(|(g, d)| *g += *d));
            }
            carry = Some(got);
        }
        let mut got = carry.ok_or_else(|| Error::Internal("ring reduce-scatter: no chunk to pass on".into()))?;
        // The last pass: chunk r + 1 is finished, stored and shown to `own`, block by block.
        pieces(segs, own_range.clone(), |part, at| {
            let len = part.len();
            for (b, (dst, sums)) in part.chunks_mut(BLOCK).zip(got[at..][..len].chunks_mut(BLOCK)).enumerate() {
                for (g, d) in sums.iter_mut().zip(dst.iter_mut()) {
                    if n > 1 {
                        *g += *d;
                    }
                    *d = finish(*g);
                }
                let t = Instant::now();
                own(own_range.start + at + b * BLOCK, dst, sums);
                own_s += t.elapsed().as_secs_f64();
            }
        });
        self.stats.calls += 1;
        self.stats.seconds += t0.elapsed().as_secs_f64() - own_s;
        Ok((got, own_s))
    }

    /// The second half: this rank's own chunk (`own`, as `reduce_scatter_with` returned it)
    /// travels round the ring, each chunk stored times `scale` where it arrives, so every rank
    /// ends with every rank's chunk in `segs`. Its own chunk in `segs` is left as it is.
    pub fn all_gather(&mut self, segs: &mut [&mut [f32]], own: Vec<f32>, scale: f32) -> Result<()> {
        let t0 = Instant::now();
        let finish = |v: f32| if scale == 1.0 { v } else { v * scale };
        let (n, r, len) = (self.n, self.rank, segs.iter().map(|s| s.len()).sum::<usize>());
        if own.len() != self.own_chunk(len).len() {
            return Err(Error::Internal(format!("ring all-gather: replica {r} holds {} values for its chunk of {}", own.len(), self.own_chunk(len).len())));
        }
        let mut carry = own;
        for s in 0..n - 1 {
            self.send(carry)?;
            let range = chunk(len, n, (r + n - s) % n);
            let got = self.recv(range.len())?;
            pieces(segs, range, |part, at| part.iter_mut().zip(&got[at..]).for_each(|(d, &g)| *d = finish(g)));
            carry = got;
        }
        self.keep_spare(carry);
        self.count(t0);
        Ok(())
    }

    /// The chunk of a `len`-element vector this rank finishes in the reduce-scatter.
    pub fn own_chunk(&self, len: usize) -> Range<usize> {
        chunk(len, self.n, (self.rank + 1) % self.n)
    }

    /// An empty buffer of at least `len` capacity, from the spares when one is big enough.
    fn spare(&mut self, len: usize) -> Vec<f32> {
        let mut v = match self.spares.iter().position(|b| b.capacity() >= len) {
            Some(i) => self.spares.swap_remove(i),
            None => Vec::with_capacity(len),
        };
        v.clear();
        v
    }

    fn keep_spare(&mut self, v: Vec<f32>) {
        self.spares.push(v);
        if self.spares.len() > 4 {
            let smallest = (0..self.spares.len()).min_by_key(|&i| self.spares[i].capacity()).unwrap_or(0);
            self.spares.swap_remove(smallest);
        }
    }

    fn count(&mut self, t0: Instant) {
        self.stats.calls += 1;
        self.stats.seconds += t0.elapsed().as_secs_f64();
    }

    fn send(&mut self, part: Vec<f32>) -> Result<()> {
        let bytes = std::mem::size_of_val(part.as_slice());
        if let Some(link) = self.link {
            std::thread::sleep(Duration::from_secs_f64(link.message_s(bytes)));
        }
        self.stats.bytes_sent += bytes as u64;
        self.to_next.send(part).map_err(|_| self.peer_gone("next"))
    }

    fn recv(&mut self, want: usize) -> Result<Vec<f32>> {
        let spin_until = Instant::now() + SPIN;
        let polled = loop {
            match self.from_prev.try_recv() {
                Ok(v) => break Ok(v),
                Err(TryRecvError::Disconnected) => break Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) if Instant::now() < spin_until => std::hint::spin_loop(),
                Err(TryRecvError::Empty) => break self.from_prev.recv_timeout(self.timeout),
            }
        };
        let got = polled.map_err(|e| match e {
            RecvTimeoutError::Disconnected => self.peer_gone("previous"),
            RecvTimeoutError::Timeout => Error::TrainingProcess(format!(
                "replica {} waited {} s for replica {} in the all-reduce; a replica hangs or the replicas called all-reduce a different number of times",
                self.rank,
                self.timeout.as_secs(),
                (self.rank + self.n - 1) % self.n
            )),
        })?;
        if got.len() != want {
            return Err(Error::Internal(format!("ring all-reduce: replica {} expected {want} elements, got {} (the replicas disagree about the vector's length)", self.rank, got.len())));
        }
        Ok(got)
    }

    fn peer_gone(&self, which: &str) -> Error {
        Error::TrainingProcess(format!("replica {} lost its {which} neighbour in the ring all-reduce (that replica stopped with an error)", self.rank))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs one all-reduce per rank on its own thread; returns every rank's result.
    fn reduce(inputs: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        reduce_scaled(inputs, 1.0, 1)
    }

    /// `calls` scaled all-reduces per rank, each of the same inputs (the later calls reuse the
    /// ring's spare buffers); returns every rank's last result.
    fn reduce_scaled(inputs: Vec<Vec<f32>>, scale: f32, calls: usize) -> Vec<Vec<f32>> {
        let peers = ring(inputs.len(), None);
        std::thread::scope(|s| {
            let hs: Vec<_> = peers
                .into_iter()
                .zip(inputs)
                .map(|(mut p, v)| {
                    s.spawn(move || {
                        let mut out = v.clone();
                        for _ in 0..calls {
                            out.copy_from_slice(&v);
                            p.all_reduce_scaled(&mut out, scale).expect("all-reduce");
                        }
                        out
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
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
    /// also on repeated calls (which send from reused buffers).
    #[test]
    fn a_scaled_all_reduce_equals_the_sum_times_the_scale_bit_for_bit() {
        for n in 1..=4 {
            for len in [0, 1, 5, 333] {
                let inputs: Vec<Vec<f32>> = (0..n).map(|r| (0..len).map(|i| ((i * 31 + r * 7) % 97) as f32 * 0.37 - 17.0).collect()).collect();
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
            let peers = ring(n, None);
            let got: Vec<Vec<f32>> = std::thread::scope(|s| {
                let hs: Vec<_> = peers
                    .into_iter()
                    .zip(inputs)
                    .map(|(mut p, mut v)| {
                        s.spawn(move || {
                            let (a, rest) = v.split_at_mut(100);
                            let (empty, rest) = rest.split_at_mut(0);
                            let (b, c) = rest.split_at_mut(1);
                            p.all_reduce_segments(&mut [a, empty, b, c], scale).expect("all-reduce");
                            v
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
            });
            for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), w.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "n={n} rank {r}");
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
                let inputs: Vec<Vec<f32>> = (0..n).map(|r| (0..len).map(|i| ((i * 29 + r * 11) % 83) as f32 * 0.219 - 9.0).collect()).collect();
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
                                let (own, _) = p
                                    .reduce_scatter_with(&mut [a, b], scale, |at, finished, out| {
                                        for (i, (f, o)) in finished.iter_mut().zip(out.iter_mut()).enumerate() {
                                            assert_eq!(f.to_bits(), want[at + i].to_bits(), "element {} of the own chunk", at + i);
                                            seen.push(at + i);
                                            *f += 1.0;
                                            *o = *f;
                                        }
                                    })
                                    .expect("reduce-scatter");
                                let (a, b) = v.split_at_mut(cut);
                                p.all_gather(&mut [a, b], own, 1.0).expect("all-gather");
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
                    assert_eq!(gathered.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), marked, "n={n} len={len} rank {r} after the all-gather");
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
        let peers = ring(4, None);
        let stats: Vec<CommStats> = std::thread::scope(|s| {
            let hs: Vec<_> = peers
                .into_iter()
                .map(|mut p| {
                    s.spawn(move || {
                        p.all_reduce(&mut vec![1.0; 400]).expect("all-reduce");
                        p.stats
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
        });
        for st in stats {
            assert_eq!(st.bytes_sent, 2 * 3 * 100 * 4);
        }
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

