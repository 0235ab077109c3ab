//! unicron-codec: unicron's records as bytes, with no Kafka client.
//!
//! The Avro codec (with optional Confluent framing) and its direct decoder,
//! the schemas, the external formats (OTLP, Prometheus, Vector, Fluent Bit,
//! rsyslog), the topics and their topology, the `[kafka]` settings as
//! data, and the archive format. `unicron-bus` adds the Kafka I/O
//! (rdkafka); a reader of the archive needs only this crate.

pub mod archive;
pub mod codec;
pub mod config;
pub mod direct_decode;
mod error;
pub mod formats;
pub mod planner_input;
mod record;
mod record_types;
#[cfg(any(test, feature = "test-util"))]
pub mod samples;
pub mod schemas;
pub mod topic;
pub mod topology;

pub use codec::{AvroCodec, DecodeError, Framing};
pub use config::KafkaConfig;
pub use error::CodecError;
pub use planner_input::PlannerInputs;
pub use record::InboundRecord;
pub use record_types::ForRecord;
pub use topic::{Subscription, Topic, Topics, check_cluster_id};
pub use topology::{TopicSpec, Topology, check_retention_ms};
