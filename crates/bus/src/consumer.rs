//! The consumer every service reads with: a consumer group whose offsets
//! are stored only once a record is handled.

use std::collections::BTreeMap;

use dashmap::DashMap;
use rdkafka::consumer::{Consumer as _, ConsumerContext, DefaultConsumerContext, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, Timestamp};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::error::BusError;
use crate::metrics::{CONSUMER_LAG, RECORDS_IN};
use crate::watermark_cache::cached_high_watermark;
use unicron_codec::DecodeError;
pub use unicron_codec::InboundRecord;
use unicron_codec::KafkaConfig;

/// A consumer-group member. Offsets are stored explicitly with
/// [`mark_done`](Consumer::mark_done) once a record is handled (its output
/// published or the record dead-lettered), and committed by librdkafka in
/// the background: a crash re-delivers, never skips.
pub struct Consumer<C: ConsumerContext + 'static = DefaultConsumerContext> {
    inner: StreamConsumer<C>,
    max_record_bytes: usize,
    group_id: String,
    /// Per topic and partition, its metric handles: looked up without
    /// allocating or building labels, since every record updates them.
    partitions: DashMap<String, BTreeMap<i32, PartitionMetrics>>,
}

/// The metrics one partition's records update.
struct PartitionMetrics {
    lag: metrics::Gauge,
    records_in: metrics::Counter,
}

/// How soon a partition whose prefetch queue was full is fetched again.
const FETCH_QUEUE_BACKOFF_MS: &str = "20";

/// `fetch.wait.max.ms` for `brokers`: 5 ms on an embedded broker of this
/// process, 100 ms elsewhere (10 idle fetches a second per broker, not 200).
fn fetch_wait_ms(brokers: &str) -> u32 {
    if crate::embedded::hosted_here(brokers) {
        5
    } else {
        100
    }
}

impl Consumer {
    pub fn new(config: &KafkaConfig, brokers: &str, group_id: &str) -> Result<Consumer, BusError> {
        Consumer::with_context(config, brokers, group_id, DefaultConsumerContext)
    }
}

impl<C: ConsumerContext + 'static> Consumer<C> {
    /// A consumer whose rebalances `context` sees (and may steer: stateful
    /// services choose where each newly assigned partition starts).
    pub fn with_context(
        config: &KafkaConfig,
        brokers: &str,
        group_id: &str,
        context: C,
    ) -> Result<Consumer<C>, BusError> {
        let client = crate::client::client_config_with(
            config,
            brokers,
            &[
                ("group.id", group_id.to_string()),
                ("enable.auto.commit", "true".into()),
                ("enable.auto.offset.store", "false".into()),
                ("auto.offset.reset", "earliest".into()),
                // Partition p of co-partitioned topics to one member: the
                // planner needs a cluster's failures, events and results
                // together (it refuses an assignment that splits them).
                ("partition.assignment.strategy", "range".into()),
                // A dead member's partitions move after 10 s instead of
                // Kafka's default 45 s: recovery should not wait on a crash.
                ("session.timeout.ms", "10000".into()),
                // How long a broker may hold a fetch that finds nothing.
                // Apache Kafka answers it as soon as a record arrives, so
                // this only sets how often an idle consumer asks; the
                // embedded broker holds it the whole time, so there it is
                // the latency of every hop (docs/operations.md).
                ("fetch.wait.max.ms", fetch_wait_ms(brokers).to_string()),
                // librdkafka stops fetching a partition whose prefetched
                // records pass its queue thresholds and looks again only
                // after this (1 s by default): a consumer reading a backlog
                // drained its queue and read nothing for up to a second,
                // several times a minute (half of the detector's time).
                ("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS.into()),
                (
                    "fetch.message.max.bytes",
                    (config.max_record_bytes + 4096).to_string(),
                ),
            ],
        );
        Ok(Consumer {
            inner: client.create_with_context(context)?,
            max_record_bytes: config.max_record_bytes,
            group_id: group_id.to_string(),
            partitions: DashMap::new(),
        })
    }

    /// Joins the group for `topics` (full names).
    pub fn subscribe(&self, topics: &[&str]) -> Result<(), BusError> {
        self.inner.subscribe(topics)?;
        Ok(())
    }

    /// Where `record` should be dead-lettered instead of decoded, if it is
    /// too large to look at.
    pub fn oversized(&self, record: &InboundRecord) -> Option<DecodeError> {
        (record.payload.len() > self.max_record_bytes).then_some(DecodeError::Oversized {
            size: record.payload.len(),
            limit: self.max_record_bytes,
        })
    }

    /// Reads the given partitions from the given next offsets (`None`: from
    /// the beginning), outside any group rebalance. Stateful services use
    /// this to resume from the offsets committed with their state.
    pub fn assign(&self, partitions: &[(&str, i32, Option<i64>)]) -> Result<(), BusError> {
        let mut list = TopicPartitionList::new();
        for &(topic, partition, next) in partitions {
            let offset = next.map_or(Offset::Beginning, Offset::Offset);
            list.add_partition_offset(topic, partition, offset)?;
        }
        self.inner.assign(&list)?;
        Ok(())
    }

    /// Reads every partition of `topics` from its beginning, outside any
    /// group; nothing is ever committed (a reader of the whole log, like
    /// the status page). Returns the topics that exist; the others are not
    /// assigned, and the caller may try again once they are created.
    pub fn assign_all_from_start(&self, topics: &[&str]) -> Result<Vec<String>, BusError> {
        let timeout = std::time::Duration::from_secs(10);
        let mut list = TopicPartitionList::new();
        let mut found = Vec::new();
        for &topic in topics {
            let metadata = self.inner.fetch_metadata(Some(topic), timeout)?;
            let Some(partitions) = metadata
                .topics()
                .iter()
                .find(|t| t.name() == topic && t.error().is_none())
                .map(|t| t.partitions().iter().map(|p| p.id()).collect::<Vec<_>>())
                .filter(|p| !p.is_empty())
            else {
                continue;
            };
            for partition in partitions {
                list.add_partition_offset(topic, partition, Offset::Beginning)?;
            }
            found.push(topic.to_string());
        }
        self.inner.assign(&list)?;
        Ok(found)
    }

    /// The next record, whatever its content.
    pub async fn recv(&self) -> Result<InboundRecord, BusError> {
        let message = loop {
            match self.inner.recv().await {
                Ok(message) => break message,
                // A subscribed topic that does not exist (yet): librdkafka
                // reports it and goes on; so do we. Not a warning: an
                // external input nobody produces to is a normal state.
                Err(KafkaError::MessageConsumption(
                    code @ (RDKafkaErrorCode::UnknownTopicOrPartition
                    | RDKafkaErrorCode::UnknownTopic),
                )) => {
                    tracing::info!(error = %code, "subscribed topic not available yet");
                }
                // librdkafka reports lost connections (a broker restart)
                // and reconnects by itself: not a reason to stop.
                Err(KafkaError::MessageConsumption(code)) => {
                    tracing::warn!(error = %code, "consumer error; librdkafka retries");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e.into()),
            }
        };
        let (topic, partition) = (message.topic(), message.partition());
        let high = self.high_watermark(topic, partition);
        let caught_up = high.is_some_and(|high| message.offset() + 1 >= high);
        self.count_record(topic, partition, high.map(|h| h - message.offset() - 1));
        let record = InboundRecord {
            caught_up,
            topic: topic.to_string(),
            partition,
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
            timestamp_ms: match message.timestamp() {
                Timestamp::CreateTime(ms) | Timestamp::LogAppendTime(ms) => Some(ms),
                Timestamp::NotAvailable => None,
            },
        };
        Ok(record)
    }

    /// Counts a record read from `partition` of `topic` and sets the
    /// partition's lag, if known.
    fn count_record(&self, topic: &str, partition: i32, lag: Option<i64>) {
        let known = self
            .partitions
            .get(topic)
            .and_then(|p| p.get(&partition).map(|m| update(m, lag)))
            .is_some();
        if !known {
            let metrics = PartitionMetrics {
                lag: ::metrics::gauge!(
                    CONSUMER_LAG.name,
                    "group" => self.group_id.clone(),
                    "topic" => topic.to_string(),
                    "partition" => partition.to_string()
                ),
                records_in: ::metrics::counter!(RECORDS_IN.name, "topic" => topic.to_string()),
            };
            update(&metrics, lag);
            self.partitions
                .entry(topic.to_string())
                .or_default()
                .insert(partition, metrics);
        }
    }

    /// Whether `offset` was the last record of the partition at the latest
    /// fetch: a record that looked behind when it was read (the cache was
    /// empty or ahead) may be caught up by now.
    pub fn caught_up_with(&self, topic: &str, partition: i32, offset: i64) -> bool {
        self.high_watermark(topic, partition)
            .is_some_and(|high| offset + 1 >= high)
    }

    /// The partition's high watermark at the latest fetch, if known.
    pub fn high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        cached_high_watermark(self.inner.client(), topic, partition)
    }

    /// Marks the partition's records through `offset` handled: the offset
    /// after it is committed with the next commit, and a restarted member
    /// resumes there.
    pub fn mark_done(&self, topic: &str, partition: i32, offset: i64) -> Result<(), BusError> {
        // rdkafka's `store_offset` calls librdkafka's `rd_kafka_offset_store`,
        // which stores `offset + 1` itself ("Store offset offset + 1",
        // rdkafka.h): given the record's own offset, the next one is stored.
        self.inner.store_offset(topic, partition, offset)?;
        Ok(())
    }

    /// The high watermark of every assigned partition whose next record to
    /// read is below it, asked of the broker now: what a reader that stops
    /// "at the end" must still read. A partition whose watermarks cannot be
    /// had within `timeout` is left out (its broker is gone; waiting would
    /// only delay the stop).
    pub fn unread_ends(
        &self,
        timeout: std::time::Duration,
    ) -> Result<std::collections::BTreeMap<(String, i32), i64>, BusError> {
        let assignment = self.inner.assignment()?;
        let positions = self.inner.position()?;
        let committed = self
            .inner
            .committed_offsets(assignment.clone(), timeout)
            .ok();
        let mut out = std::collections::BTreeMap::new();
        for e in assignment.elements() {
            let (topic, partition) = (e.topic(), e.partition());
            let Ok((low, high)) = self.inner.fetch_watermarks(topic, partition, timeout) else {
                continue;
            };
            let known = |list: &TopicPartitionList| match list
                .find_partition(topic, partition)
                .map(|p| p.offset())
            {
                Some(Offset::Offset(n)) => Some(n),
                _ => None,
            };
            let next = known(&positions)
                .or_else(|| committed.as_ref().and_then(known))
                .unwrap_or(low);
            if next < high {
                out.insert((topic.to_string(), partition), high);
            }
        }
        Ok(out)
    }

    /// Starts a commit of the stored offsets (for a clean shutdown). It does
    /// not wait: a synchronous commit blocks forever when the broker is
    /// already gone, and closing the consumer (on drop) commits what is
    /// stored anyway, since auto-commit is on.
    pub fn commit_now(&self) -> Result<(), BusError> {
        match self
            .inner
            .commit_consumer_state(rdkafka::consumer::CommitMode::Async)
        {
            // Nothing stored since the last commit is not a failure.
            Err(rdkafka::error::KafkaError::ConsumerCommit(
                rdkafka::types::RDKafkaErrorCode::NoOffset,
            )) => Ok(()),
            other => Ok(other?),
        }
    }
}

fn update(metrics: &PartitionMetrics, lag: Option<i64>) {
    metrics.records_in.increment(1);
    if let Some(lag) = lag {
        metrics.lag.set(lag.max(0) as f64);
    }
}
