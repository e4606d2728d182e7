//! A synthetic image set: filled circles, squares, triangles and crosses at
//! random position, size and brightness, plus Gaussian noise. It needs no
//! download and its size (Batch x Channels x Height x Width) is a knob, which is
//! what the GPU exercises want to turn.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use rayon::prelude::*;

use super::{DataError, Dataset};

pub const CLASS_NAMES: [&str; 4] = ["circle", "square", "triangle", "cross"];

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ShapesConfig {
    /// Image height and width in pixels (8..=256).
    pub res: usize,
    /// Colour channels (1..=4); with more than one, each image gets a random colour.
    pub channels: usize,
    /// Total samples, train + validation (>= 10).
    pub n: usize,
    /// Standard deviation of the additive Gaussian noise (0..=1).
    pub noise: f32,
    /// Number of shape classes (2..=4), taken from the front of CLASS_NAMES.
    pub classes: usize,
}

impl Default for ShapesConfig {
    fn default() -> Self {
        ShapesConfig { res: 16, channels: 1, n: 4000, noise: 0.1, classes: 4 }
    }
}

/// Refuse to build more than this many f32 values (4 GiB) in one go.
const MAX_VALUES: usize = 1 << 30;
/// Above this many values, generate samples on all cores.
const PARALLEL_VALUES: usize = 1 << 20;
const KEYS: &str = "res, channels, n, noise, classes";

impl ShapesConfig {
    pub fn features(&self) -> usize {
        self.channels * self.res * self.res
    }

    pub fn validate(&self) -> Result<(), DataError> {
        let bad = |m: String| Err(DataError::Invalid(m));
        if !(8..=256).contains(&self.res) {
            return bad(format!("shapes res={} is outside 8..=256", self.res));
        }
        if !(1..=4).contains(&self.channels) {
            return bad(format!("shapes channels={} is outside 1..=4", self.channels));
        }
        if self.n < 10 {
            return bad(format!("shapes n={} is too small; use at least 10", self.n));
        }
        if !(0.0..=1.0).contains(&self.noise) {
            return bad(format!("shapes noise={} is outside 0..=1", self.noise));
        }
        if !(2..=4).contains(&self.classes) {
            return bad(format!("shapes classes={} is outside 2..=4", self.classes));
        }
        match self.n.checked_mul(self.features()) {
            Some(v) if v <= MAX_VALUES => Ok(()),
            _ => bad(format!(
                "shapes n={} x {} values per image is more than {MAX_VALUES} values (4 GiB); \
                 lower n or res",
                self.n,
                self.features()
            )),
        }
    }

    /// Parses "res=32,channels=3,..." (any subset, any order) over the defaults, then validates.
    pub fn parse_options(opts: &str) -> Result<Self, DataError> {
        let mut cfg = ShapesConfig::default();
        let mut seen: Vec<&str> = Vec::new();
        for item in opts.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                return Err(DataError::Spec(format!("shapes option \"{item}\" should look like key=value (keys: {KEYS})")));
            };
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(DataError::Spec(format!("shapes option \"{key}\" given twice")));
            }
            let num_err = |what: &str| DataError::Spec(format!("shapes {key}=\"{value}\" is not {what}"));
            match key {
                "res" => cfg.res = value.parse().map_err(|_| num_err("a whole number"))?,
                "channels" => cfg.channels = value.parse().map_err(|_| num_err("a whole number"))?,
                "n" => cfg.n = value.parse().map_err(|_| num_err("a whole number"))?,
                "classes" => cfg.classes = value.parse().map_err(|_| num_err("a whole number"))?,
                "noise" => cfg.noise = value.parse().map_err(|_| num_err("a number"))?,
                _ => {
                    return Err(DataError::Spec(format!("unknown shapes option \"{key}\" (keys: {KEYS})")));
                }
            }
            seen.push(key);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// The options that differ from the defaults, as parse_options reads them
    /// ("" for the defaults). f32 Display is shortest-round-trip, so noise survives.
    pub fn options_string(&self) -> String {
        let d = ShapesConfig::default();
        let mut parts = Vec::new();
        if self.res != d.res {
            parts.push(format!("res={}", self.res))
        }
        if self.channels != d.channels {
            parts.push(format!("channels={}", self.channels))
        }
        if self.n != d.n {
            parts.push(format!("n={}", self.n))
        }
        if self.noise != d.noise {
            parts.push(format!("noise={}", self.noise))
        }
        if self.classes != d.classes {
            parts.push(format!("classes={}", self.classes))
        }
        parts.join(",")
    }
}

/// Generates the set. Sample `i` is drawn from its own ChaCha8 stream (seed, i),
/// so the data is identical whatever the thread count. First 80% is train.
pub fn generate(cfg: &ShapesConfig, seed: u64) -> Result<Dataset, DataError> {
    cfg.validate()?;
    let n_train = cfg.n * 4 / 5;
    let n_val = cfg.n - n_train;

    // Labels: exactly balanced (to within one) inside each split, in random order.
    let mut label_rng = ChaCha8Rng::seed_from_u64(seed);
    label_rng.set_stream(u64::MAX); // a stream no sample uses
    let mut labels = Vec::with_capacity(cfg.n);
    for len in [n_train, n_val] {
        let mut part: Vec<u32> = (0..len).map(|i| (i % cfg.classes) as u32).collect();
        part.shuffle(&mut label_rng);
        labels.extend(part);
    }

    let f = cfg.features();
    let mut x = vec![0f32; cfg.n * f];
    let draw = |(i, img): (usize, &mut [f32])| draw_sample(cfg, seed, i as u64, labels[i], img);
    if cfg.n * f >= PARALLEL_VALUES {
        x.par_chunks_mut(f).enumerate().for_each(draw);
    } else {
        x.chunks_mut(f).enumerate().for_each(draw);
    }

    let val_x = x.split_off(n_train * f);
    let val_y = labels.split_off(n_train);
    Ok(Dataset {
        name: format!("shapes {}x{}x{} n={}", cfg.res, cfg.res, cfg.channels, cfg.n),
        source: format!("generated (seed {seed})"),
        features: f,
        shape: [cfg.channels, cfg.res, cfg.res],
        classes: cfg.classes,
        class_names: CLASS_NAMES[..cfg.classes].iter().map(|s| s.to_string()).collect(),
        train_x: x,
        train_y: labels,
        val_x,
        val_y,
    })
}

/// Is the point (u, v), in units of the shape's half-size around its centre, inside?
fn inside(class: u32, u: f32, v: f32) -> bool {
    match class {
        0 => u * u + v * v <= 1.0,                                    // disc
        1 => u.abs() <= 0.8 && v.abs() <= 0.8,                        // square, about the disc's area
        2 => (-0.9..=0.9).contains(&v) && u.abs() <= (v + 0.9) / 1.8, // apex up
        _ => (u.abs() <= 0.3 && v.abs() <= 1.0) || (v.abs() <= 0.3 && u.abs() <= 1.0),
    }
}

/// Draws one image (channel-major: C x H x W) into `img`, which arrives zeroed.
fn draw_sample(cfg: &ShapesConfig, seed: u64, index: u64, class: u32, img: &mut [f32]) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(index);
    let res = cfg.res as f32;
    let half = rng.random_range(0.22..=0.42) * res;
    let cx = rng.random_range(half..=res - half);
    let cy = rng.random_range(half..=res - half);
    let intensity: f32 = rng.random_range(0.6..=1.0);
    // A random colour whose brightest channel is `intensity`.
    let mut colour = [intensity; 4];
    if cfg.channels > 1 {
        for c in colour.iter_mut().take(cfg.channels) {
            *c = rng.random_range(0.0..=1.0);
        }
        let max = colour[..cfg.channels].iter().cloned().fold(1e-3, f32::max);
        for c in colour.iter_mut() {
            *c *= intensity / max;
        }
    }

    let plane = cfg.res * cfg.res;
    for py in 0..cfg.res {
        let v = (py as f32 + 0.5 - cy) / half;
        for px in 0..cfg.res {
            let u = (px as f32 + 0.5 - cx) / half;
            if inside(class, u, v) {
                for c in 0..cfg.channels {
                    img[c * plane + py * cfg.res + px] = colour[c];
                }
            }
        }
    }
    if cfg.noise > 0.0 {
        let normal = Normal::new(0.0f32, cfg.noise).expect("noise validated to 0..=1");
        for p in img.iter_mut() {
            *p = (*p + normal.sample(&mut rng)).clamp(0.0, 1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_and_serial_paths_agree() {
        // Big enough to take the rayon path; compare against a serial redraw.
        let cfg = ShapesConfig { res: 32, n: 1100, ..Default::default() };
        assert!(cfg.n * cfg.features() >= PARALLEL_VALUES);
        let d = generate(&cfg, 7).unwrap();
        let f = cfg.features();
        for i in [0usize, 1, 500, 879] {
            let mut img = vec![0f32; f];
            draw_sample(&cfg, 7, i as u64, d.train_y[i], &mut img);
            assert_eq!(img, d.train_x[i * f..(i + 1) * f]);
        }
    }
}
