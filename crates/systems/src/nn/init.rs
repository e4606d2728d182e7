use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

/// He (Kaiming) normal initialisation, N(0, √(2 / fan_in)), drawn on the host from a seeded
/// ChaCha8 stream in a fixed order, so every backend starts from the same weights.
pub fn he_normal(fan_in: usize, fan_out: usize, seed: u64, layer: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(layer as u64 + 1)));
    let std = (2.0 / fan_in.max(1) as f64).sqrt();
    let normal = Normal::new(0.0, std).expect("std is finite and positive");
    (0..fan_in * fan_out).map(|_| normal.sample(&mut rng) as f32).collect()
}
