//! The model: a multi-layer perceptron, optionally behind convolutions (a small CNN, cnn.rs),
//! with explicit forward and backward passes per layer (the forward through `dense`, the one dense
//! forward pass of every precision),
//! softmax cross-entropy, and SGD-momentum or AdamW — written once against `Backend`.

pub mod amp;
pub mod cnn;
pub mod dense;
mod init;
mod mlp;
mod optim;
pub mod pass;
mod totals;

pub use amp::{AmpConfig, GradScaler, GradScalerConfig, GradScalerState, Precision, ScalerStep};
pub use cnn::{CNN_CHANNELS, ConvConfig, ModelKind};
pub use dense::{Dense, DenseStack, HostLayer, LayerKind};
pub use init::he_normal;
pub use mlp::{GradWrite, Mlp, MlpConfig, Param, Workspace};
pub use optim::{Optimizer, OptimizerKind};
pub use totals::{Accumulators, Totals, take_totals, take_totals_with};
