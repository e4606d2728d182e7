//! How far a quantized model is from its f32 original: signal-to-quantization-noise ratio,
//! the worst weight error against half a quantization step, accuracy and argmax agreement.
//! Pure host arithmetic over values read back from a backend.

use super::{HostLayer, QuantizedLayer};

/// 10·log10(Σ ref² / Σ (ref − test)²) in dB; None when the two are identical (no noise) or
/// the lengths differ or the reference is all zero.
pub fn sqnr_db(reference: &[f32], test: &[f32]) -> Option<f64> {
    if reference.len() != test.len() || reference.is_empty() {
        return None;
    }
    let (signal, noise) = reference.iter().zip(test).fold((0.0f64, 0.0f64), |(s, n), (&r, &t)| {
        let d = r as f64 - t as f64;
        (s + r as f64 * r as f64, n + d * d)
    });
    (noise > 0.0 && signal > 0.0).then(|| 10.0 * (signal / noise).log10())
}

/// The worst |w − q·s| of a layer's weight, and that error divided by its own channel's half
/// step s/2: a ratio ≤ 1 means every weight rounded to its nearest step (none saturated).
pub fn weight_error(f: &HostLayer, q: &QuantizedLayer) -> (f64, f64) {
    let n = f.shape[1];
    let mut worst = (0.0f64, 0.0f64);
    for (i, (&w, &qi)) in f.weight.iter().zip(&q.weight).enumerate() {
        let s = q.weight_scales[i % n];
        let err = (w as f64 - qi as f64 * s as f64).abs();
        worst = (worst.0.max(err), worst.1.max(err / (s as f64 / 2.0)));
    }
    worst
}

/// The dequantized weight of a layer, row-major like the f32 one.
pub fn dequantized(q: &QuantizedLayer) -> Vec<f32> {
    let n = q.shape[1];
    q.weight.iter().enumerate().map(|(i, &v)| v as f32 * q.weight_scales[i % n]).collect()
}

pub fn argmax(row: &[f32]) -> usize {
    row.iter().enumerate().fold(0, |best, (i, &v)| if v > row[best] { i } else { best })
}

/// Fraction of rows whose argmax is the label.
pub fn accuracy(logits: &[f32], labels: &[u32]) -> f64 {
    if labels.is_empty() {
        return 0.0;
    }
    let classes = logits.len() / labels.len();
    logits.chunks_exact(classes).zip(labels).filter(|(row, l)| argmax(row) == **l as usize).count() as f64 / labels.len() as f64
}

/// Fraction of rows where two models pick the same class.
pub fn agreement(a: &[f32], b: &[f32], classes: usize) -> f64 {
    let rows = a.len() / classes.max(1);
    if rows == 0 || a.len() != b.len() {
        return 0.0;
    }
    a.chunks_exact(classes).zip(b.chunks_exact(classes)).filter(|(x, y)| argmax(x) == argmax(y)).count() as f64 / rows as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqnr_is_ten_log_signal_over_noise() {
        assert_eq!(sqnr_db(&[1.0, 2.0], &[1.0, 2.0]), None);
        // signal 1 + 4 = 5, noise 0.01 + 0.04 = 0.05: 10·log10(100) = 20 dB.
        let db = sqnr_db(&[1.0, 2.0], &[1.1, 1.8]).unwrap();
        assert!((db - 20.0).abs() < 1e-4, "{db}");
    }

    #[test]
    fn weight_error_is_measured_against_each_channels_half_step() {
        let f = HostLayer { weight: vec![0.5, 1.0, 0.26, -2.0], shape: [2, 2], bias: vec![0.0; 2] };
        let q = QuantizedLayer {
            weight: vec![1, 1, 1, -2],
            shape: [2, 2],
            weight_scales: vec![0.5, 1.0],
            input_scale: None,
            bias: vec![0.0; 2],
        };
        let (abs, ratio) = weight_error(&f, &q);
        assert!((abs - 0.24).abs() < 1e-6 && (ratio - 0.96).abs() < 1e-5, "{abs} {ratio}");
        assert_eq!(dequantized(&q), vec![0.5, 1.0, 0.5, -2.0]);
        assert_eq!(agreement(&[1.0, 0.0, 0.0, 1.0], &[2.0, 1.0, 1.0, 0.0], 2), 0.5);
        assert_eq!(accuracy(&[1.0, 0.0, 0.0, 1.0], &[0, 0]), 0.5);
    }
}
