//! The event queue of the simulation: a binary heap of (time, sequence, event). The sequence
//! number breaks ties in insertion order, so two events at the same instant always run in the
//! same order and a seed gives the same run every time.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ev {
    Arrival,
    BatchDone {
        worker: usize,
    },
    WorkerReady {
        worker: usize,
    },
    Preempt {
        worker: usize,
    },
    /// The oldest queued request has waited the maximum queue delay.
    BatchTimer,
    Autoscale,
    Sample,
    CanaryStart,
    CanaryCheck,
}

#[derive(Debug)]
struct Scheduled {
    t: f64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    /// Reversed: the heap pops the earliest time, then the lowest sequence number.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

#[derive(Default)]
pub struct Queue {
    heap: BinaryHeap<Scheduled>,
    seq: u64,
}

impl Queue {
    pub fn push(&mut self, t: f64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Scheduled { t, seq: self.seq, ev });
    }
    pub fn pop(&mut self) -> Option<(f64, Ev)> {
        self.heap.pop().map(|s| (s.t, s.ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_insertion_order() {
        let mut q = Queue::default();
        q.push(2.0, Ev::Sample);
        q.push(1.0, Ev::Autoscale);
        q.push(1.0, Ev::Arrival);
        q.push(0.5, Ev::BatchTimer);
        let order: Vec<Ev> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, [Ev::BatchTimer, Ev::Autoscale, Ev::Arrival, Ev::Sample]);
    }
}
