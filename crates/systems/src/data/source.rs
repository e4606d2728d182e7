//! Where a loader's samples come from, and what reading one costs: a simulated storage latency
//! (a sleep, labelled simulated) and a real decode on the CPU (resample up and back down, several
//! passes), so a learner can build a deliberately slow pipeline. Augmentation (a small random
//! rotation plus noise) runs on every read, cached or not, seeded per batch.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use super::{DataError, Dataset};

/// The cost of producing one sample.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SourceCost {
    /// Simulated storage read per sample, milliseconds (a sleep: no real disk is touched).
    pub storage_latency_ms: f64,
    /// Real CPU decode work: passes of a 2x bilinear upsample and box downsample per sample.
    pub decode_passes: u32,
    /// Augmentation: largest random rotation in degrees (0 turns it off).
    pub rotate_deg: f32,
    /// Augmentation: standard deviation of added Gaussian noise (0 turns it off).
    pub noise: f32,
}

impl Default for SourceCost {
    fn default() -> Self {
        SourceCost { storage_latency_ms: 0.0, decode_passes: 0, rotate_deg: 0.0, noise: 0.0 }
    }
}

/// A set of samples a loader can read by index, from any thread.
pub trait SampleSource: Send + Sync {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Values per sample.
    fn features(&self) -> usize;
    /// Reads and decodes sample `index` into `out` (replacing its contents); returns its label.
    fn read(&self, index: u32, out: &mut Vec<f32>) -> Result<u32, DataError>;
    /// Augments a decoded sample in place; `rng` is seeded per batch, so results do not depend
    /// on which worker ran it.
    fn augment(&self, x: &mut [f32], rng: &mut ChaCha8Rng);
}

/// The training split of an in-memory data set, read at a configurable cost.
pub struct CostlySource {
    data: Arc<Dataset>,
    cost: SourceCost,
}

impl CostlySource {
    pub fn new(data: Arc<Dataset>, cost: SourceCost) -> Result<Self, DataError> {
        if !cost.storage_latency_ms.is_finite() || !(0.0..=1000.0).contains(&cost.storage_latency_ms) {
            return Err(DataError::Invalid(format!("storage latency {} ms is outside 0..=1000", cost.storage_latency_ms)));
        }
        if !(0.0..=1.0).contains(&cost.noise) || !(0.0..=180.0).contains(&cost.rotate_deg) {
            return Err(DataError::Invalid(format!(
                "augmentation noise {} (0..=1) or rotation {} (0..=180°) out of range",
                cost.noise, cost.rotate_deg
            )));
        }
        Ok(CostlySource { data, cost })
    }
}

impl SampleSource for CostlySource {
    fn len(&self) -> usize {
        self.data.train_len()
    }
    fn features(&self) -> usize {
        self.data.features
    }
    fn read(&self, index: u32, out: &mut Vec<f32>) -> Result<u32, DataError> {
        let i = index as usize;
        let f = self.data.features;
        let label =
            *self.data.train_y.get(i).ok_or_else(|| DataError::Invalid(format!("sample {i} is past the end ({} samples)", self.len())))?;
        if self.cost.storage_latency_ms > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(self.cost.storage_latency_ms * 1e-3));
        }
        out.clear();
        out.extend_from_slice(&self.data.train_x[i * f..(i + 1) * f]);
        let [c, h, w] = self.data.shape;
        for _ in 0..self.cost.decode_passes {
            for plane in out.chunks_exact_mut(h * w).take(c) {
                resample_round_trip(plane, h, w);
            }
        }
        Ok(label)
    }
    fn augment(&self, x: &mut [f32], rng: &mut ChaCha8Rng) {
        let [c, h, w] = self.data.shape;
        if self.cost.rotate_deg > 0.0 {
            let angle = rng.random_range(-self.cost.rotate_deg..=self.cost.rotate_deg).to_radians();
            for plane in x.chunks_exact_mut(h * w).take(c) {
                rotate(plane, h, w, angle);
            }
        }
        if self.cost.noise > 0.0 {
            let n = Normal::new(0.0f32, self.cost.noise).expect("noise checked in new");
            for v in x.iter_mut() {
                *v = (*v + n.sample(rng)).clamp(0.0, 1.0);
            }
        }
    }
}

fn at(p: &[f32], h: usize, w: usize, y: f32, x: f32) -> f32 {
    let (y0, x0) = (y.floor(), x.floor());
    let (fy, fx) = (y - y0, x - x0);
    let px =
        |yy: f32, xx: f32| if yy < 0.0 || xx < 0.0 || yy >= h as f32 || xx >= w as f32 { 0.0 } else { p[yy as usize * w + xx as usize] };
    let top = px(y0, x0) * (1.0 - fx) + px(y0, x0 + 1.0) * fx;
    let bottom = px(y0 + 1.0, x0) * (1.0 - fx) + px(y0 + 1.0, x0 + 1.0) * fx;
    top * (1.0 - fy) + bottom * fy
}

/// Bilinear 2x upsample then 2x2 box downsample: real decode-like work that leaves the image
/// nearly as it was (slightly smoothed).
fn resample_round_trip(p: &mut [f32], h: usize, w: usize) {
    let (h2, w2) = (h * 2, w * 2);
    let mut up = vec![0.0f32; h2 * w2];
    for y in 0..h2 {
        for x in 0..w2 {
            up[y * w2 + x] = at(p, h, w, (y as f32 + 0.5) / 2.0 - 0.5, (x as f32 + 0.5) / 2.0 - 0.5);
        }
    }
    for y in 0..h {
        for x in 0..w {
            let s = up[2 * y * w2 + 2 * x] + up[2 * y * w2 + 2 * x + 1] + up[(2 * y + 1) * w2 + 2 * x] + up[(2 * y + 1) * w2 + 2 * x + 1];
            p[y * w + x] = s * 0.25;
        }
    }
}

/// Rotates a plane about its centre (bilinear, zero outside).
fn rotate(p: &mut [f32], h: usize, w: usize, angle: f32) {
    let src = p.to_vec();
    let (s, c) = angle.sin_cos();
    let (cy, cx) = ((h as f32 - 1.0) / 2.0, (w as f32 - 1.0) / 2.0);
    for y in 0..h {
        for x in 0..w {
            let (dy, dx) = (y as f32 - cy, x as f32 - cx);
            p[y * w + x] = at(&src, h, w, cy + c * dy - s * dx, cx + s * dy + c * dx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resample_round_trip_keeps_a_flat_image_flat_inside() {
        let mut p = vec![0.5f32; 64];
        resample_round_trip(&mut p, 8, 8);
        // Away from the zero-padded border the image is unchanged.
        assert!((p[3 * 8 + 3] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn rotation_by_zero_is_identity() {
        let mut p: Vec<f32> = (0..36).map(|i| i as f32 / 36.0).collect();
        let want = p.clone();
        rotate(&mut p, 6, 6, 0.0);
        for (a, b) in p.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5);
        }
    }
}
