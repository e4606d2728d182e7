//! The memory ledger: wgpu cannot tell how much VRAM we use, so every allocation is recorded
//! here by what it holds. An optional budget makes an allocation that would not fit fail like a
//! real out-of-memory, naming the category that overflowed.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MemCategory {
    Parameters,
    Gradients,
    OptimizerState,
    Activations,
    Inputs,
    Staging,
    Other,
}

impl MemCategory {
    pub const ALL: [MemCategory; 7] = [
        MemCategory::Parameters,
        MemCategory::Gradients,
        MemCategory::OptimizerState,
        MemCategory::Activations,
        MemCategory::Inputs,
        MemCategory::Staging,
        MemCategory::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MemCategory::Parameters => "parameters",
            MemCategory::Gradients => "gradients",
            MemCategory::OptimizerState => "optimizer state",
            MemCategory::Activations => "activations",
            MemCategory::Inputs => "inputs",
            MemCategory::Staging => "staging",
            MemCategory::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Current and peak bytes per category, and the peak of the total.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Ledger {
    current: [u64; 7],
    peak: [u64; 7],
    total_peak: u64,
    budget: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemoryReport {
    /// (category, current bytes, peak bytes)
    pub categories: Vec<(MemCategory, u64, u64)>,
    pub total_current: u64,
    pub total_peak: u64,
    pub budget: Option<u64>,
}

impl Ledger {
    pub fn with_budget(budget: Option<u64>) -> Self {
        Ledger { budget, ..Default::default() }
    }

    pub fn total(&self) -> u64 {
        self.current.iter().sum()
    }

    /// Records an allocation, or refuses it when it would exceed the budget.
    pub fn reserve(&mut self, cat: MemCategory, bytes: u64) -> Result<()> {
        let total = self.total();
        if let Some(budget) = self.budget
            && total + bytes > budget
        {
            return Err(Error::OutOfMemory {
                category: cat.name().to_string(),
                needed: bytes,
                available: budget.saturating_sub(total),
                budget,
            });
        }
        let i = cat.index();
        self.current[i] += bytes;
        self.peak[i] = self.peak[i].max(self.current[i]);
        self.total_peak = self.total_peak.max(total + bytes);
        Ok(())
    }

    pub fn release(&mut self, cat: MemCategory, bytes: u64) {
        let i = cat.index();
        self.current[i] = self.current[i].saturating_sub(bytes);
    }

    /// The peaks now (per category, total), for `restore_peaks` after work that is not the
    /// user's, such as a kernel measurement in the middle of a run.
    pub fn peaks(&self) -> ([u64; 7], u64) {
        (self.peak, self.total_peak)
    }

    pub fn restore_peaks(&mut self, (peak, total_peak): ([u64; 7], u64)) {
        self.peak = peak;
        self.total_peak = total_peak;
    }

    /// Forgets the peaks (e.g. between the runs of a sweep) but keeps what is still allocated.
    pub fn reset_peaks(&mut self) {
        self.peak = self.current;
        self.total_peak = self.total();
    }

    pub fn report(&self) -> MemoryReport {
        MemoryReport {
            categories: MemCategory::ALL.iter().map(|&c| (c, self.current[c.index()], self.peak[c.index()])).collect(),
            total_current: self.total(),
            total_peak: self.total_peak,
            budget: self.budget,
        }
    }
}

/// The ledger is shared by a backend and every tensor it made (tensors release on drop).
pub type SharedLedger = Arc<Mutex<Ledger>>;

pub fn lock(ledger: &SharedLedger) -> std::sync::MutexGuard<'_, Ledger> {
    // A poisoned ledger only means another thread panicked mid-update of plain counters.
    ledger.lock().unwrap_or_else(|p| p.into_inner())
}
