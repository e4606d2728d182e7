//! The ring all-reduce cost model, `t = 2(N−1)/N · S / bandwidth + 2(N−1) · latency`, and the
//! link presets it is fed with to extrapolate beyond this machine. Everything here is
//! simulated: nominal link figures, not measurements.

use super::ring::SimLink;
use gpulab_core::error::{Error, Result};

/// A named interconnect with its nominal per-direction bandwidth and per-message latency.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkPreset {
    pub id: &'static str,
    pub name: &'static str,
    pub link: SimLink,
}

/// Nominal figures (vendor per-direction bandwidths; typical small-message latencies).
pub const PRESETS: [LinkPreset; 4] = [
    LinkPreset { id: "pcie4", name: "PCIe 4.0 x16", link: SimLink { bytes_per_s: 32e9, latency_s: 5e-6 } },
    LinkPreset { id: "nvlink4", name: "NVLink 4", link: SimLink { bytes_per_s: 450e9, latency_s: 2e-6 } },
    LinkPreset { id: "100gbe", name: "100 GbE", link: SimLink { bytes_per_s: 12.5e9, latency_s: 10e-6 } },
    LinkPreset { id: "10gbe", name: "10 GbE", link: SimLink { bytes_per_s: 1.25e9, latency_s: 50e-6 } },
];

/// The preset with this id; `measured` (or empty) means none.
pub fn preset(id: &str) -> Result<Option<LinkPreset>> {
    if id.is_empty() || id == "measured" {
        return Ok(None);
    }
    PRESETS.iter().find(|p| p.id == id).copied().map(Some).ok_or_else(|| {
        Error::InvalidConfig(format!(
            "link {id:?} is not a preset; use measured or one of {}",
            PRESETS.iter().map(|p| p.id).collect::<Vec<_>>().join(", ")
        ))
    })
}

/// Ring all-reduce time for `bytes` over `n` ranks.
pub fn ring_allreduce_s(n: usize, bytes: f64, link: SimLink) -> f64 {
    if n < 2 {
        return 0.0;
    }
    let steps = 2.0 * (n - 1) as f64;
    steps / n as f64 * bytes / link.bytes_per_s + steps * link.latency_s
}

/// Scaling efficiency when every step computes for `compute_s` (per replica, weak scaling)
/// and then all-reduces without overlap.
pub fn efficiency(n: usize, compute_s: f64, bytes: f64, link: SimLink) -> f64 {
    compute_s / (compute_s + ring_allreduce_s(n, bytes, link)).max(1e-15)
}

/// The replica counts the extrapolation covers.
pub const EXTRAPOLATE_TO: [usize; 7] = [8, 16, 32, 64, 128, 256, 512];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_matches_the_formula_and_tends_to_twice_s_over_bandwidth() {
        let link = SimLink { bytes_per_s: 1e9, latency_s: 1e-5 };
        assert_eq!(ring_allreduce_s(1, 1e6, link), 0.0);
        let t2 = ring_allreduce_s(2, 1e6, link);
        assert!((t2 - (1e6 / 1e9 + 2e-5)).abs() < 1e-12, "{t2}");
        let big = ring_allreduce_s(512, 1e9, SimLink { latency_s: 0.0, ..link });
        assert!((big - 2.0 * 511.0 / 512.0).abs() < 1e-9);
        assert!(efficiency(8, 0.01, 1e6, link) > efficiency(512, 0.01, 1e6, link));
    }

    #[test]
    fn presets_are_found_by_id_and_unknown_links_named() {
        assert_eq!(preset("nvlink4").expect("ok").map(|p| p.name), Some("NVLink 4"));
        assert_eq!(preset("measured").expect("ok"), None);
        assert!(preset("carrier-pigeon").expect_err("refused").to_string().contains("pcie4"));
    }
}
