//! Reading a topic's whole history from Kafka, for replay and explain: every
//! partition from its low watermark to the high watermark at the time of the
//! call. It reads without a consumer group, so it commits nothing and
//! disturbs no service.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::KafkaConfig;
use crate::consumer::InboundRecord;
use crate::error::BusError;

/// Longest wait for metadata, watermarks and each poll.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Every record of `topic` that exists now, in (partition, offset) order.
/// A topic that does not exist has no history.
pub fn read_topic(
    config: &KafkaConfig,
    brokers: &str,
    topic: &str,
) -> Result<Vec<InboundRecord>, BusError> {
    let consumer: BaseConsumer = config
        .client_config_with(
            brokers,
            &[
                ("group.id", "unicron-history".into()),
                ("enable.auto.commit", "false".into()),
                ("enable.partition.eof", "false".into()),
            ],
        )
        .create()?;
    let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT)?;
    let Some(partitions) = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map(|t| t.partitions().iter().map(|p| p.id()).collect::<Vec<_>>())
    else {
        return Ok(Vec::new());
    };
    let mut ends = std::collections::BTreeMap::new();
    let mut list = TopicPartitionList::new();
    for partition in partitions {
        let (low, high) = match consumer.fetch_watermarks(topic, partition, TIMEOUT) {
            Ok(marks) => marks,
            Err(_) => continue, // no such partition (yet)
        };
        if high > low {
            ends.insert(partition, high);
            list.add_partition_offset(topic, partition, Offset::Offset(low))?;
        }
    }
    let mut by_partition: std::collections::BTreeMap<i32, Vec<InboundRecord>> =
        std::collections::BTreeMap::new();
    if ends.is_empty() {
        return Ok(Vec::new());
    }
    consumer.assign(&list)?;
    let mut remaining = ends.len();
    let mut idle_since = Instant::now();
    while remaining > 0 {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            if idle_since.elapsed() > TIMEOUT {
                break; // records below the high watermark that never come (compaction)
            }
            continue;
        };
        idle_since = Instant::now();
        let message = message?;
        let partition = message.partition();
        let end = ends.get(&partition).copied().unwrap_or(0);
        if message.offset() >= end {
            continue;
        }
        by_partition
            .entry(partition)
            .or_default()
            .push(InboundRecord {
                topic: topic.to_string(),
                partition,
                offset: message.offset(),
                key: message.key().map(<[u8]>::to_vec),
                payload: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                timestamp_ms: message.timestamp().to_millis(),
                caught_up: message.offset() + 1 >= end,
            });
        if message.offset() + 1 >= end {
            remaining -= 1;
        }
    }
    Ok(by_partition.into_values().flatten().collect())
}
