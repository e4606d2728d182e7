//! Which samples each step takes: every epoch's order (a pure function of the seed and the
//! epoch, so a loader position is the whole data-loader state) cut into batches. The training
//! loop and the pipeline's stages walk the same schedule.

use crate::data::batcher;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Training samples.
    pub samples: usize,
    /// Samples per step (a data-parallel or pipelined run's global batch).
    pub batch: usize,
    pub seed: u64,
    pub epochs: usize,
    /// Leave out an epoch's short last batch (data parallelism: every replica needs an equal
    /// shard; pipelines: every micro-batch the same rows).
    pub drop_last: bool,
}

impl Schedule {
    pub fn steps_per_epoch(&self) -> u64 {
        batcher::batches_per_epoch(self.samples, self.batch, self.drop_last) as u64
    }

    pub fn total_steps(&self) -> u64 {
        self.steps_per_epoch() * self.epochs as u64
    }

    /// Epoch `epoch`'s shuffled sample indices.
    pub fn order(&self, epoch: usize) -> Vec<u32> {
        batcher::epoch_order(self.samples, self.seed, epoch as u64)
    }

    /// An epoch's `order` cut into its steps' batches.
    pub fn batches<'o>(&self, order: &'o [u32]) -> impl Iterator<Item = &'o [u32]> {
        order.chunks(self.batch.max(1)).take(self.steps_per_epoch() as usize)
    }

    /// The rows of an epoch's short last batch, when it has one that is trained (its workspace
    /// is built and warmed before the clock starts).
    pub fn tail_rows(&self) -> Option<usize> {
        let r = self.samples % self.batch.max(1);
        (r != 0 && self.samples > self.batch && !self.drop_last).then_some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_an_epoch_and_drop_the_short_one_only_when_asked() {
        let s = Schedule { samples: 10, batch: 4, seed: 1, epochs: 2, drop_last: false };
        let order = s.order(0);
        let sizes: Vec<usize> = s.batches(&order).map(<[u32]>::len).collect();
        assert_eq!((sizes, s.tail_rows(), s.total_steps()), (vec![4, 4, 2], Some(2), 6));
        let d = Schedule { drop_last: true, ..s };
        let sizes: Vec<usize> = d.batches(&order).map(<[u32]>::len).collect();
        assert_eq!((sizes, d.tail_rows(), d.total_steps()), (vec![4, 4], None, 4));
        assert_eq!(s.order(1), batcher::epoch_order(10, 1, 1));
    }
}
