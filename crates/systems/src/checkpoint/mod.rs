//! Checkpoints that survive a real crash: safetensors files with the whole training state,
//! written atomically, validated on load, and resumed from the newest one that validates.

mod checkpointer;
mod child;
pub mod child_process;
mod damage;
pub mod format;
mod model_state;
pub mod store;

pub use checkpointer::{Checkpointer, Policy};
pub use child::{ChildSpec, run_child};
pub use damage::{Damage, damage};
pub use format::{Checkpoint, CheckpointMeta, NamedTensor};
pub use gpulab_core::error::CheckpointError;
pub use model_state::{restore, snapshot};
