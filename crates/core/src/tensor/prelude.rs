//! `use gpulab::tensor::prelude::*;` brings every op family into scope, for code that calls ops
//! on a concrete backend type (tests, benches, the CLI). Generic code written against
//! `B: Backend` needs only `Backend`: its bound brings the families along.

pub use super::ops::{AmpOps, Backend, BackendBase, ConvOps, CoreOps, QuantOps, Telemetry, TensorMeta};
