//! unicron-bus: everything between unicron and Kafka.
//!
//! A typed producer and consumer, topic administration, dead-letter
//! routing, the embedded broker and the Prometheus endpoint, on rdkafka;
//! the codec, topics and archive format are `unicron-codec`'s, re-exported
//! here. Nothing here decides
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

// The codec crate's modules, under the paths services have always used.
pub use unicron_codec::{
    AvroCodec, CodecError, DecodeError, Framing, InboundRecord, KafkaConfig, PlannerInputs,
    Subscription, Topic, TopicSpec, Topics, Topology, check_retention_ms,
};
pub use unicron_codec::{
    archive, codec, config, direct_decode, formats, planner_input, schemas, topic, topology,
};

pub use consumer::Consumer;
pub use embedded::EmbeddedBroker;
pub use error::BusError;
pub use producer::{Outbound, Producer};
