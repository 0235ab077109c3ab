//! Reading a topic's whole history from Kafka: the `kafka` feature (on by
//! default). Without it the crate reads archives only and links no Kafka
//! client.

use unicron_codec::{InboundRecord, KafkaConfig};

/// Why a topic could not be read from Kafka.
pub type KafkaReadError = Box<dyn std::error::Error + Send + Sync>;

/// Every record of `topic`, each partition from its low to its high
/// watermark at the time of the call.
#[cfg(feature = "kafka")]
pub(crate) fn read_topic(
    config: &KafkaConfig,
    brokers: &str,
    topic: &str,
) -> Result<Vec<InboundRecord>, KafkaReadError> {
    Ok(unicron_bus::whole_topic::read_topic(
        config, brokers, topic,
    )?)
}

#[cfg(not(feature = "kafka"))]
pub(crate) fn read_topic(
    _: &KafkaConfig,
    _: &str,
    _: &str,
) -> Result<Vec<InboundRecord>, KafkaReadError> {
    Err("this build reads archives only (unicron-history without its `kafka` feature)".into())
}
