//! unicron-bus: everything between unicron and Kafka.
//!
//! Configuration, the topic topology, the Avro codec (with optional
//! Confluent framing), a typed producer and consumer, dead-letter routing,
//! the embedded broker and the Prometheus endpoint. Nothing here decides
//! anything; decisions live in `unicron-core` (docs/design.md §2).

// One module reads librdkafka's cache through its C API; nothing else.
#![deny(unsafe_code)]

pub mod admin;
pub mod archive;
pub mod codec;
pub mod config;
pub mod consumer;
pub mod direct_decode;
pub mod dlq;
pub mod embedded;
mod error;
pub mod formats;
pub mod metrics;
pub mod planner_input;
pub mod producer;
pub mod schemas;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod topic;
pub mod topology;
#[allow(unsafe_code)]
mod watermark_cache;
pub mod whole_topic;

pub use codec::{AvroCodec, DecodeError, Framing};
pub use config::KafkaConfig;
pub use consumer::{Consumer, InboundRecord};
pub use embedded::EmbeddedBroker;
pub use error::BusError;
pub use planner_input::PlannerInputs;
pub use producer::{Outbound, Producer};
pub use topic::{Subscription, Topic, Topics};
pub use topology::{TopicSpec, Topology, check_retention_ms};
