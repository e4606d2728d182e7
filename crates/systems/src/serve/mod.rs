//! Exercise 8's inference server: a dynamic batcher with Triton's knobs over a bounded queue
//! (batcher.rs), a dedicated inference thread that owns the backend and reuses a few forward
//! workspaces (engine.rs, workspaces.rs), HTTP with axum on loopback (http.rs) behind bounds on
//! every client (limits.rs, listen.rs, body.rs, parse.rs, guard.rs, signals.rs), Prometheus
//! metrics (metrics.rs), the served model and where it comes from (model.rs), and a load
//! generator, open- and closed-loop, in-process or over HTTP (loadgen.rs).

pub mod batcher;
mod body;
pub mod engine;
pub mod guard;
pub mod http;
pub mod limits;
mod listen;
pub mod loadgen;
pub mod metrics;
pub mod model;
pub mod parse;
mod signals;
pub mod workspaces;

pub use batcher::{BatchPolicy, Prediction, Queue, SubmitError};
pub use engine::{EngineHealth, EngineReady, EngineStats, Fault, InferenceEngine, InferenceTotals};
pub use http::{ServeConfig, Server, Stopped};
pub use limits::Limits;
pub use model::{DeviceModel, HostModel, ModelSource, load_model};
