//! unicron-bus: everything between unicron and Kafka.
//!
//! A typed producer and consumer, topic administration, dead-letter
//! routing, the embedded broker and the Prometheus endpoint, on rdkafka.
//! The records' bytes, the topics and the archive format are
//! `unicron-codec`'s; callers use that crate directly. Nothing here decides
//! anything; decisions live in `unicron-core` (docs/design.md §2).

// One module reads librdkafka's cache through its C API; nothing else.
#![deny(unsafe_code)]

pub mod admin;
pub mod client;
pub mod consumer;
pub mod dlq;
pub mod embedded;
mod error;
pub mod metrics;
pub mod producer;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
#[allow(unsafe_code)]
mod watermark_cache;
pub mod whole_topic;

pub use consumer::Consumer;
pub use embedded::EmbeddedBroker;
pub use error::BusError;
pub use producer::{Outbound, Producer};
