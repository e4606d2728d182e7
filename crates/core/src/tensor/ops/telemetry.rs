use serde::{Deserialize, Serialize};

use super::BackendBase;
use crate::error::Result;
use crate::tensor::MemoryReport;

/// What a backend measures about itself, apart from the math.
pub trait Telemetry: BackendBase {
    /// GPU busy time measured by timestamp queries since the last call, in seconds;
    /// `None` where the backend cannot measure it.
    fn take_busy_seconds(&mut self) -> Result<Option<f64>>;
    /// The busy time the reads since the last take have already collected (a log window's
    /// totals carry the timestamps in their copy), without waiting for anything newer.
    fn take_collected_busy_seconds(&mut self) -> Result<Option<f64>> {
        self.take_busy_seconds()
    }
    /// Starts the busy clock from zero: all work recorded so far is left out of the next
    /// `take_busy_seconds` (a GPU waits for its timestamps here).
    fn reset_busy_clock(&mut self) -> Result<()> {
        self.take_busy_seconds().map(|_| ())
    }
    fn memory(&self) -> MemoryReport;
    /// Forgets peak memory figures, e.g. between the runs of a sweep.
    fn reset_memory_peaks(&mut self);
    /// The device work counted since the backend opened (dispatches, submissions, waits,
    /// objects created, bytes moved); `None` where the backend does not count them (the CPU).
    fn counts(&self) -> Option<DeviceCounts> {
        None
    }
    /// Starts (or stops) keeping every dispatch's kernel, workgroup size and workgroup count,
    /// up to a bound, for `take_dispatches`. Off by default: it costs a push per dispatch.
    fn log_dispatches(&mut self, _on: bool) {}
    /// The dispatches logged since the last call (empty when logging is off).
    fn take_dispatches(&mut self) -> Vec<DispatchRecord> {
        Vec::new()
    }
}

/// Device work, counted where each happens (a GPU backend's recorder, buffer pool and
/// readback). Every figure is measured: a count of events, not an estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCounts {
    /// Kernel launches.
    pub dispatches: u64,
    /// Command buffers submitted to the queue.
    pub submits: u64,
    /// Times the CPU blocked on the GPU (a map of a readback buffer, or a full sync).
    pub waits: u64,
    pub bind_groups_created: u64,
    /// Device buffers created (a pooled buffer reused is not counted).
    pub buffers_created: u64,
    /// Host → device bytes: data writes and the dispatches' parameter blocks.
    pub bytes_uploaded: u64,
    /// Device → host bytes mapped and copied out (timestamps included).
    pub bytes_read_back: u64,
    /// Workgroups launched, over every dispatch.
    pub workgroups: u64,
    /// Invocations launched (workgroups × workgroup size), over every dispatch.
    pub invocations: u64,
}

impl DeviceCounts {
    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &DeviceCounts) -> DeviceCounts {
        DeviceCounts {
            dispatches: self.dispatches.saturating_sub(earlier.dispatches),
            submits: self.submits.saturating_sub(earlier.submits),
            waits: self.waits.saturating_sub(earlier.waits),
            bind_groups_created: self.bind_groups_created.saturating_sub(earlier.bind_groups_created),
            buffers_created: self.buffers_created.saturating_sub(earlier.buffers_created),
            bytes_uploaded: self.bytes_uploaded.saturating_sub(earlier.bytes_uploaded),
            bytes_read_back: self.bytes_read_back.saturating_sub(earlier.bytes_read_back),
            workgroups: self.workgroups.saturating_sub(earlier.workgroups),
            invocations: self.invocations.saturating_sub(earlier.invocations),
        }
    }

    /// The sum of two spans of counts.
    pub fn plus(&self, o: &DeviceCounts) -> DeviceCounts {
        DeviceCounts {
            dispatches: self.dispatches + o.dispatches,
            submits: self.submits + o.submits,
            waits: self.waits + o.waits,
            bind_groups_created: self.bind_groups_created + o.bind_groups_created,
            buffers_created: self.buffers_created + o.buffers_created,
            bytes_uploaded: self.bytes_uploaded + o.bytes_uploaded,
            bytes_read_back: self.bytes_read_back + o.bytes_read_back,
            workgroups: self.workgroups + o.workgroups,
            invocations: self.invocations + o.invocations,
        }
    }

    /// Each figure divided by `n` (per step, per batch): (name, value) in a fixed order.
    pub fn per(&self, n: u64) -> [(&'static str, f64); 9] {
        let d = n.max(1) as f64;
        [
            ("dispatches", self.dispatches as f64 / d),
            ("queue submissions", self.submits as f64 / d),
            ("CPU waits on the GPU", self.waits as f64 / d),
            ("bind groups created", self.bind_groups_created as f64 / d),
            ("buffers created", self.buffers_created as f64 / d),
            ("bytes uploaded", self.bytes_uploaded as f64 / d),
            ("bytes read back", self.bytes_read_back as f64 / d),
            ("workgroups launched", self.workgroups as f64 / d),
            ("invocations launched", self.invocations as f64 / d),
        ]
    }
}

/// One logged dispatch: its kernel, workgroup size (invocations per workgroup, x·y·z of the
/// entry point's `@workgroup_size`) and the workgroups it launched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchRecord {
    pub kernel: String,
    pub workgroup_size: [u32; 3],
    pub groups: [u32; 3],
}

impl DispatchRecord {
    pub fn invocations_per_group(&self) -> u32 {
        self.workgroup_size.iter().product()
    }
    pub fn group_count(&self) -> u64 {
        self.groups.iter().map(|&g| g as u64).product()
    }
}
