//! Mini-batch order and gathering. The shuffle is a pure function of
//! (seed, epoch) so that any worker count, or a resumed run, sees the same batches.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// Keeps batch shuffles independent of other users of the same seed (e.g. shapes generation).
const DOMAIN: u64 = 0x6261_7463_6865_7221; // "batcher!"

/// SplitMix64 finaliser: spreads nearby seeds far apart.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Shuffled mini-batches for one epoch: the order depends only on (seed, epoch), so any worker
/// count or a resumed run sees the same batches. Returns a permutation of 0..n.
pub fn epoch_order(n: usize, seed: u64, epoch: u64) -> Vec<u32> {
    assert!(n <= u32::MAX as usize + 1, "epoch_order: {n} samples do not fit u32 indices");
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed ^ DOMAIN));
    rng.set_stream(epoch); // one independent ChaCha stream per epoch
    let mut order: Vec<u32> = (0..n).map(|i| i as u32).collect();
    order.shuffle(&mut rng); // Fisher–Yates
    order
}

/// Copies the rows `idx` of `x` (row length `features`) and their labels into the batch
/// buffers (resizing them). Panics if an index is out of range (a caller bug).
pub fn gather(x: &[f32], y: &[u32], features: usize, idx: &[u32], xb: &mut Vec<f32>, yb: &mut Vec<u32>) {
    debug_assert_eq!(x.len(), y.len() * features, "x and y disagree on the sample count");
    xb.clear();
    yb.clear();
    xb.reserve(idx.len() * features);
    yb.reserve(idx.len());
    for &i in idx {
        let i = i as usize;
        xb.extend_from_slice(&x[i * features..(i + 1) * features]);
        yb.push(y[i]);
    }
}

/// Number of batches in an epoch when the last partial batch is dropped (drop_last) or kept.
/// A batch size of 0 gives 0 batches.
pub fn batches_per_epoch(n: usize, batch: usize, drop_last: bool) -> usize {
    if batch == 0 {
        0
    } else if drop_last {
        n / batch
    } else {
        n.div_ceil(batch)
    }
}
