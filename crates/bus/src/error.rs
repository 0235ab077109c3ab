use rdkafka::error::KafkaError;

/// Errors of the Kafka layer. Decode failures of single records are not
/// errors here: they go to the dead-letter topic (see [`crate::dlq`]).
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("kafka: topic {topic}: {reason}")]
    Topic { topic: String, reason: String },
    #[error("embedded broker: {0}")]
    Embedded(String),
    /// A setting that cannot work with the cluster; names the field.
    #[error("{field}: {reason}")]
    Setting { field: &'static str, reason: String },
    #[error(transparent)]
    Codec(#[from] unicron_codec::CodecError),
    #[error("internal: {0}")]
    Internal(String),
    #[error("metrics: {0}")]
    Metrics(String),
}
