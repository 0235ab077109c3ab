//! unicron-detector: reads `unicron.telemetry`, `unicron.logs`,
//! `unicron.agent` and the external topics named in config, applies
//! `unicron-core`'s detector, and publishes `unicron.failures`. Thin by
//! design: classification and correlation are all in `unicron-core`.
//!
//! The detector keeps no durable state. Its in-memory state (heartbeats,
//! iteration statistics, held symptoms) rebuilds from the stream after a
//! restart or rebalance, starting with a warm-up read of the records just
//! below the group's committed offsets; failure ids are derived from what was found (cluster,
//! kind, node, first-evidence time and a digest of the rest), not from the
//! record that completed it, so a failure found again after a redelivery
//! has the same id and the planner drops the repeat.

mod error;
mod holds;
pub mod metrics;
mod rules_watch;
mod service;
mod settings;
mod warm_up;

pub use self::metrics::METRICS;
pub use error::DetectorError;
pub use service::{SERVICE, run};
pub use settings::{DetectorService, DetectorSettings};
/// The node name idle ticks carry: they come from the detector, not a node.
pub use unicron_core::detector::IDLE_TICK_NODE;
