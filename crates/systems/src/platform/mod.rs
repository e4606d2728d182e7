//! Exercise 10's production GPU platform as a deterministic discrete-event simulation: traffic,
//! an API gateway, an inference pool with dynamic batching, cold starts, spot reclaims and an
//! autoscaler, a canary rollout with automatic rollback, and a training job on spot capacity
//! with checkpoints. No GUI or terminal code; every figure from here is simulated.

pub mod control;
mod events;
pub mod monitoring;
pub mod result;
pub mod scenario;
pub mod serving;
pub mod traffic_csv;
pub mod training;

pub use result::{CanaryEvent, Sample, ScaleAction, ServingResult, SimTotals};
pub use scenario::Scenario;
pub use serving::simulate;
