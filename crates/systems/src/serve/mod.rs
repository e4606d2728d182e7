//! Exercise 8's inference server: a dynamic batcher with Triton's knobs over a bounded queue
//! (batcher.rs), a dedicated inference thread that owns the backend and reuses a forward
//! workspace per batch size (engine.rs), HTTP with axum on loopback (http.rs), Prometheus
//! metrics (metrics.rs), the served model and where it comes from (model.rs), and a load
//! generator, open- and closed-loop, in-process or over HTTP (loadgen/).

pub mod batcher;
pub mod engine;
pub mod guard;
pub mod http;
pub mod limits;
pub mod loadgen;
pub mod metrics;
pub mod model;
pub mod parse;
pub mod workspaces;

pub use batcher::{BatchPolicy, Prediction, Queue, SubmitError};
pub use engine::{EngineHealth, EngineReady, EngineStats, Fault, InferenceEngine, InferenceTotals};
pub use http::{ServeConfig, Server};
pub use limits::Limits;
pub use model::{DeviceModel, HostModel, ModelSource, load_model};
