//! What a checkpointed training process reports, one JSON object per line on stdout, so a
//! parent can follow it, kill it and resume it (`gpulab train --checkpoint-dir … --jsonl`).

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ChildEvent {
    /// The backend the process trains on.
    Backend {
        info: gpulab_core::tensor::BackendInfo,
    },
    Started {
        total_steps: u64,
        steps_per_epoch: u64,
    },
    /// A checkpoint that failed validation on resume, and why.
    Skipped {
        path: String,
        kind: String,
        reason: String,
    },
    /// Training continues from this checkpoint.
    Resumed {
        path: String,
        step: u64,
        epoch: usize,
        batch: usize,
    },
    /// No checkpoint to resume from (or none asked for): training starts at step 0.
    Fresh,
    /// The mean loss of the steps since the last one (one step with --log-every 1). Measured.
    /// Also the window's wall seconds, GPU busy seconds (timestamps; None without them) and the
    /// ledger's current bytes per category (empty categories left out), for the live device
    /// charts; older lines without them read as zero/none/empty.
    Step {
        step: u64,
        epoch: usize,
        loss: f64,
        #[serde(default)]
        window_s: f64,
        #[serde(default)]
        busy_s: Option<f64>,
        #[serde(default)]
        memory: Vec<(gpulab_core::tensor::MemCategory, u64)>,
    },
    /// A checkpoint write is starting.
    Saving {
        step: u64,
    },
    /// A checkpoint is on disk. `write_s` covers encode, write, fsyncs and rename. Measured.
    Saved {
        step: u64,
        path: String,
        bytes: u64,
        write_s: f64,
    },
    Epoch {
        epoch: usize,
        val_loss: f64,
        val_accuracy: f64,
    },
    /// Also the model trained ("CNN 1x8x8 …" or "MLP 64-32-10") and its parameter count; older
    /// lines without them read as empty.
    Finished {
        steps: u64,
        val_accuracy: f64,
        train_wall_s: f64,
        #[serde(default)]
        model: String,
        #[serde(default)]
        parameters: u64,
    },
    Failed {
        message: String,
    },
}

impl ChildEvent {
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("child events serialise")
    }

    /// Parses one line; anything else is the caller's "unexpected output".
    pub fn parse(line: &str) -> Option<ChildEvent> {
        serde_json::from_str(line.trim()).ok()
    }
}
