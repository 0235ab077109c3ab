//! Warm-up after a takeover. When the group hands this instance partitions
//! it did not hold (a start, another instance joining or leaving), its
//! state is forgotten and reading starts at the group's committed offsets:
//! a node whose last heartbeat lies before them would never be missed, and
//! a symptom the previous owner held would never be grouped. So the
//! records of the last [`WarmUpSource::window`] below the committed offsets
//! are read again, outside the group, and applied as a warm-up round: it
//! rebuilds state and publishes nothing (the previous owner answered for
//! those records). The round names the records, so replay rebuilds the
//! same state.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use unicron_bus::BusError;
use unicron_bus::whole_topic::{PartitionReader, group_offsets};
use unicron_codec::{InboundRecord, KafkaConfig};

/// Where and how far back a warm-up reads.
pub struct WarmUpSource {
    pub kafka: KafkaConfig,
    pub brokers: String,
    /// The detectors' consumer group, whose committed offsets end the read.
    pub group: String,
    /// How far back (Kafka record time) from now.
    pub window: Duration,
    /// The most records read again per partition.
    pub max_records: i64,
}

impl WarmUpSource {
    /// The records of `assigned` in the window below the group's committed
    /// offsets (none for a partition the group never committed), and the
    /// offset each read partition ends at (its committed offset).
    pub async fn read(&self, assigned: &[(String, i32)]) -> Result<WarmUp, BusError> {
        let (kafka, brokers, group) =
            (self.kafka.clone(), self.brokers.clone(), self.group.clone());
        let assigned = assigned.to_vec();
        let since_ms = wall_ms() - self.window.as_millis() as i64;
        let max_records = self.max_records;
        tokio::task::spawn_blocking(move || {
            let committed = group_offsets(&kafka, &brokers, &group, &assigned)?;
            let reader = PartitionReader::new(&kafka, &brokers)?;
            let starts = reader.offsets_at(&assigned, since_ms)?;
            let ranges: Vec<(String, i32, i64, i64)> = assigned
                .iter()
                .zip(committed.iter().zip(&starts))
                .filter_map(|((topic, partition), (end, start))| {
                    let end = (*end)?;
                    // A broker that cannot look up times (the embedded one):
                    // the last `max_records`, trimmed by time below.
                    let start = start.unwrap_or(0).max(end - max_records).max(0);
                    Some((topic.clone(), *partition, start, end))
                })
                .collect();
            let mut records = reader.read_ranges(&ranges)?;
            records.retain(|r| r.timestamp_ms.is_none_or(|t| t >= since_ms));
            let ends = ranges
                .into_iter()
                .map(|(topic, partition, _, end)| ((topic, partition), end))
                .collect();
            Ok(WarmUp { records, ends })
        })
        .await
        .map_err(|e| BusError::Internal(format!("warm-up task failed: {e}")))?
    }
}

/// What a warm-up read.
pub struct WarmUp {
    pub records: Vec<InboundRecord>,
    /// Where each partition's read ended: the group's committed offset.
    pub ends: BTreeMap<(String, i32), i64>,
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
