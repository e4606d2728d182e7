//! Per-kernel figures from the GPU lane: count, total and mean time, achieved GFLOP/s and GB/s,
//! and where each kernel sits against this adapter's measured peaks (the roofline).

use super::peaks::Peaks;
use gpulab_core::spans::{GPU, Timeline};

#[derive(Clone, Debug, PartialEq)]
pub struct KernelRow {
    pub name: String,
    pub count: usize,
    pub total_s: f64,
    pub flops: f64,
    pub bytes: f64,
}

impl KernelRow {
    pub fn mean_s(&self) -> f64 {
        self.total_s / self.count.max(1) as f64
    }
    pub fn gflops(&self) -> f64 {
        self.flops / self.total_s.max(1e-12) / 1e9
    }
    pub fn gbps(&self) -> f64 {
        self.bytes / self.total_s.max(1e-12) / 1e9
    }
    /// FLOPs per byte moved.
    pub fn intensity(&self) -> f64 {
        self.flops / self.bytes.max(1.0)
    }
    /// Below the ridge point (peak FLOP/s ÷ peak bytes/s) a kernel is memory-bound.
    pub fn memory_bound(&self, p: &Peaks) -> bool {
        self.intensity() < p.ridge()
    }
}

/// Kernels of the GPU lane grouped by name, the most time first.
pub fn table(t: &Timeline) -> Vec<KernelRow> {
    let mut rows: Vec<KernelRow> = Vec::new();
    for s in t.lane_spans(GPU) {
        let i = match rows.iter().position(|r| r.name == s.name) {
            Some(i) => i,
            None => {
                rows.push(KernelRow { name: s.name.clone(), count: 0, total_s: 0.0, flops: 0.0, bytes: 0.0 });
                rows.len() - 1
            }
        };
        let r = &mut rows[i];
        r.count += 1;
        r.total_s += s.duration();
        r.flops += s.flops.unwrap_or(0.0);
        r.bytes += s.bytes.unwrap_or(0.0);
    }
    rows.sort_by(|a, b| b.total_s.total_cmp(&a.total_s));
    rows
}
