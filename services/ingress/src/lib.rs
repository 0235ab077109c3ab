//! unicron-ingress: with `kafka.cluster_topics`, each cluster's writers
//! (agents, executors, watchers) write to a topic of their own,
//! `<prefix>in.<cluster>`, each key marked with the shared topic its
//! record belongs on (`logs/node-7`), which Kafka lets only that cluster's
//! principals write. The ingress reads every cluster's, passes on to the
//! shared topic (`<prefix><name>`) each record that speaks for the topic's
//! cluster, byte for byte and with its own key, and dead-letters the rest
//! as `foreign_cluster`. Detector, planner, archiver and replay read the
//! shared topics as before: what they see is what the ingress passed, so
//! replay agrees with the live run without knowing of the check.

mod check;
mod error;
pub mod metrics;
mod service;
mod settings;

pub use check::{Checked, Verdict, check};
pub use error::IngressError;
pub use metrics::METRICS;
pub use service::{SERVICE, run};
pub use settings::IngressSettings;
