//! unicron-remote-write: a Prometheus remote-write 1.0 receiver. A site's
//! Prometheus already scrapes dcgm-exporter on every GPU node; with a
//! `remote_write` block pointing here, its samples become `TelemetryBatch`
//! records on `unicron.telemetry` (keyed by node), which the detector reads
//! like any other telemetry (docs/remote-write.md).
//!
//! Each request is answered only after Kafka acknowledged what it became,
//! so a broker failure is a 5xx that Prometheus retries (at least once);
//! a body that cannot be decoded is a 400 and goes to the dead-letter topic.

mod convert;
mod error;
pub mod metrics;
pub mod proto;
mod service;
mod settings;

pub use self::metrics::METRICS;
pub use convert::{Converted, SOURCE, convert};
pub use error::RemoteWriteError;
pub use service::{DLQ_SOURCE, PATH, Receiver, SERVICE, run};
pub use settings::RemoteWriteSettings;
