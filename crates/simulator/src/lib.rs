//! unicron-simulator: a GPU training cluster in software. It emits what a
//! real cluster ships to Kafka (DCGM telemetry, logs, agent events, cluster
//! events), injects failures from a trace or the taxonomy's mix, obeys
//! executor actions over HTTP with modelled transition times, and keeps the
//! ground truth the control plane is measured against.
//!
//! `model` is the pure, seeded state machine (no I/O, no clock); `service`
//! drives it in real time on a broker. See `docs/simulator.md`.

pub mod config;
pub mod evaluate;
pub mod faults;
pub mod model;
pub mod offline;
pub mod profiles;
pub mod real_trace;
pub mod service;
pub mod truth;

pub use config::{Arrivals, SimConfig, Transitions};
pub use model::{Emission, Sim};
pub use service::{Progress, Running, SimError, start};
pub use truth::{DelayStats, Fault, Summary, Truth};
