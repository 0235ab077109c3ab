//! Reading a topic's whole history from Kafka: the `kafka` feature (on by
//! default). Without it the crate reads archives only and links no Kafka
//! client. Both answers are compiled in every build (only the one-line
//! choice between them is not), so the archive-only build needs no build
//! of its own to stay correct; `./dev test` checks with `cargo tree` that
//! it links no Kafka client.

use unicron_codec::{InboundRecord, KafkaConfig};

/// Why a topic could not be read from Kafka.
pub type KafkaReadError = Box<dyn std::error::Error + Send + Sync>;

/// Every record of `topic`, each partition from its low to its high
/// watermark at the time of the call.
pub(crate) fn read_topic(
    config: &KafkaConfig,
    brokers: &str,
    topic: &str,
) -> Result<Vec<InboundRecord>, KafkaReadError> {
    #[cfg(feature = "kafka")]
    return Ok(unicron_bus::whole_topic::read_topic(
        config, brokers, topic,
    )?);
    #[cfg(not(feature = "kafka"))]
    return archives_only(config, brokers, topic);
}

/// The answer of a build without the `kafka` feature.
#[cfg_attr(feature = "kafka", allow(dead_code))]
fn archives_only(
    _: &KafkaConfig,
    _: &str,
    topic: &str,
) -> Result<Vec<InboundRecord>, KafkaReadError> {
    Err(format!(
        "cannot read {topic}: this build reads archives only (unicron-history without its `kafka` feature)"
    )
    .into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_archive_only_build_says_why_it_reads_no_topic() {
        let err = super::archives_only(&Default::default(), "b:9092", "unicron.failures")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unicron.failures") && err.contains("archives only"),
            "{err}"
        );
    }
}
