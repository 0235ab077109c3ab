//! Reading a topic's whole history from Kafka, for replay and explain: every
//! partition from its low watermark to the high watermark at the time of the
//! call. It reads without a consumer group, so it commits nothing and
//! disturbs no service.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::consumer::InboundRecord;
use crate::error::BusError;
use unicron_codec::config::KafkaConfig;

/// Longest wait for metadata, watermarks and each poll.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait through errors a broker restart or a leader election
/// causes (Kafka fences a dead broker after its 9 s session, then elects).
const OUTAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// `call`, again while it fails with an error a broker restart or a
/// leader election ends, for up to [`OUTAGE_TIMEOUT`].
fn through_outage<T>(
    mut call: impl FnMut() -> Result<T, rdkafka::error::KafkaError>,
) -> Result<T, rdkafka::error::KafkaError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        match call() {
            Err(e) if transient(&e) && started.elapsed() < OUTAGE_TIMEOUT => {
                tracing::debug!(error = %e, "history read waits for the cluster");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// Errors of a fetch that a broker restart or a new leader ends.
fn transient(error: &rdkafka::error::KafkaError) -> bool {
    use RDKafkaErrorCode as Code;
    matches!(
        error.rdkafka_error_code(),
        Some(
            Code::BrokerTransportFailure
                | Code::AllBrokersDown
                | Code::Resolve
                | Code::RequestTimedOut
                | Code::OperationTimedOut
                | Code::NetworkException
                | Code::NotLeaderForPartition
                | Code::LeaderNotAvailable
                | Code::NotCoordinator
                | Code::CoordinatorLoadInProgress
                | Code::FencedLeaderEpoch
                | Code::UnknownLeaderEpoch
        )
    )
}

/// Every record of `topic` that exists now, in (partition, offset) order.
/// A topic that does not exist has no history.
pub fn read_topic(
    config: &KafkaConfig,
    brokers: &str,
    topic: &str,
) -> Result<Vec<InboundRecord>, BusError> {
    let reader = PartitionReader::new(config, brokers)?;
    let mut out = Vec::new();
    for partition in reader.partitions(topic)? {
        let (low, high) = reader.watermarks(topic, partition)?;
        out.extend(reader.read(topic, partition, low, high)?);
    }
    Ok(out)
}

/// The group id a [`PartitionReader`] carries. It never joins it, but
/// librdkafka looks its coordinator up, so under ACLs its users need Read
/// on it (`unicron acls`).
pub const READER_GROUP: &str = "unicron-history";

/// Reads ranges of single partitions with one client: a planner taking
/// over partitions reads its checkpoint, then the decisions and inputs
/// after it, without a consumer group.
pub struct PartitionReader {
    consumer: BaseConsumer,
}

impl PartitionReader {
    pub fn new(config: &KafkaConfig, brokers: &str) -> Result<PartitionReader, BusError> {
        let consumer: BaseConsumer = crate::client::client_config_with(
            config,
            brokers,
            &[
                ("group.id", READER_GROUP.into()),
                ("enable.auto.commit", "false".into()),
                ("enable.partition.eof", "false".into()),
                // A range starting below the low watermark (retention
                // removed its head) reads from the oldest record left,
                // not from the end.
                ("auto.offset.reset", "earliest".into()),
                // Never joins the group, but librdkafka still checks
                // it against a site's max.poll.interval.ms: the
                // services' consumers' value, not its 45 s default.
                ("session.timeout.ms", "10000".into()),
            ],
        )
        .create()?;
        Ok(PartitionReader { consumer })
    }

    /// The partitions of `topic`; none if it does not exist.
    pub fn partitions(&self, topic: &str) -> Result<Vec<i32>, BusError> {
        let metadata = through_outage(|| self.consumer.fetch_metadata(Some(topic), TIMEOUT))?;
        Ok(metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .map(|t| t.partitions().iter().map(|p| p.id()).collect())
            .unwrap_or_default())
    }

    /// The partition's low and high watermarks: records exist at offsets
    /// `low..high`. A partition that does not exist (yet) is empty.
    pub fn watermarks(&self, topic: &str, partition: i32) -> Result<(i64, i64), BusError> {
        match through_outage(|| self.consumer.fetch_watermarks(topic, partition, TIMEOUT)) {
            Ok(marks) => Ok(marks),
            Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::UnknownPartition) => {
                Ok((0, 0))
            }
            Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::UnknownTopicOrPartition) => {
                Ok((0, 0))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The records at offsets `from..to` that exist, in offset order
    /// (`from` below the low watermark reads from there).
    pub fn read(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        to: i64,
    ) -> Result<Vec<InboundRecord>, BusError> {
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(topic, partition, Offset::Offset(from))?;
        self.consumer.assign(&list)?;
        let mut idle_since = Instant::now();
        // A broker that is down or a partition between leaders shows as
        // errors here while the client reconnects: waited out, longer.
        let mut outage: Option<rdkafka::error::KafkaError> = None;
        loop {
            let message = match self.consumer.poll(Duration::from_millis(200)) {
                Some(Ok(message)) => message,
                Some(Err(e)) if transient(&e) => {
                    tracing::debug!(%topic, partition, error = %e, "history read waits");
                    outage = Some(e);
                    continue;
                }
                Some(Err(e)) => return Err(e.into()),
                None => {
                    match &outage {
                        Some(e) if idle_since.elapsed() > OUTAGE_TIMEOUT => {
                            return Err(e.clone().into());
                        }
                        Some(_) => {}
                        // Records below `to` that never come (compaction).
                        None if idle_since.elapsed() > TIMEOUT => break,
                        None => {}
                    }
                    continue;
                }
            };
            idle_since = Instant::now();
            outage = None;
            if message.offset() >= to {
                break;
            }
            out.push(InboundRecord {
                topic: topic.to_string(),
                partition,
                offset: message.offset(),
                key: message.key().map(<[u8]>::to_vec),
                payload: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                timestamp_ms: message.timestamp().to_millis(),
                caught_up: message.offset() + 1 >= to,
            });
            if message.offset() + 1 >= to {
                break;
            }
        }
        self.consumer.unassign()?;
        Ok(out)
    }

    /// The first offset of each partition whose records have a timestamp
    /// at or after `time_ms`; `None` where the broker cannot say (no such
    /// record, or a broker without timestamp lookups, like the embedded one).
    pub fn offsets_at(
        &self,
        partitions: &[(String, i32)],
        time_ms: i64,
    ) -> Result<Vec<Option<i64>>, BusError> {
        let mut list = TopicPartitionList::new();
        for (topic, partition) in partitions {
            list.add_partition_offset(topic, *partition, Offset::Offset(time_ms))?;
        }
        let found = through_outage(|| self.consumer.offsets_for_times(list.clone(), TIMEOUT))?;
        Ok(partitions
            .iter()
            .map(
                |(topic, partition)| match found.find_partition(topic, *partition) {
                    Some(e) if e.error().is_ok() => match e.offset() {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    },
                    _ => None,
                },
            )
            .collect())
    }

    /// The records of several partition ranges `(topic, partition, from,
    /// to)` (offsets `from..to`) read together, each partition in offset
    /// order; partitions interleave.
    pub fn read_ranges(
        &self,
        ranges: &[(String, i32, i64, i64)],
    ) -> Result<Vec<InboundRecord>, BusError> {
        let mut list = TopicPartitionList::new();
        let mut open = std::collections::BTreeMap::new();
        for (topic, partition, from, to) in ranges {
            if from < to {
                list.add_partition_offset(topic, *partition, Offset::Offset(*from))?;
                open.insert((topic.clone(), *partition), *to);
            }
        }
        let mut out = Vec::new();
        if open.is_empty() {
            return Ok(out);
        }
        self.consumer.assign(&list)?;
        let mut idle_since = Instant::now();
        while !open.is_empty() && idle_since.elapsed() < TIMEOUT {
            let message = match self.consumer.poll(Duration::from_millis(200)) {
                Some(Ok(message)) => message,
                Some(Err(e)) if transient(&e) => continue,
                Some(Err(e)) => {
                    self.consumer.unassign()?;
                    return Err(e.into());
                }
                None => continue,
            };
            idle_since = Instant::now();
            let key = (message.topic().to_string(), message.partition());
            let Some(&to) = open.get(&key) else {
                continue;
            };
            if message.offset() < to {
                out.push(InboundRecord {
                    topic: key.0.clone(),
                    partition: key.1,
                    offset: message.offset(),
                    key: message.key().map(<[u8]>::to_vec),
                    payload: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                    timestamp_ms: message.timestamp().to_millis(),
                    caught_up: false,
                });
            }
            if message.offset() + 1 >= to {
                open.remove(&key);
            }
        }
        self.consumer.unassign()?;
        Ok(out)
    }
}

/// Where `group` has committed each of `partitions` (the next offset it
/// reads), `None` where it has not. Asks without joining the group.
pub fn group_offsets(
    config: &KafkaConfig,
    brokers: &str,
    group: &str,
    partitions: &[(String, i32)],
) -> Result<Vec<Option<i64>>, BusError> {
    let consumer: BaseConsumer = crate::client::client_config_with(
        config,
        brokers,
        &[
            ("group.id", group.to_string()),
            ("enable.auto.commit", "false".into()),
        ],
    )
    .create()?;
    let mut list = TopicPartitionList::new();
    for (topic, partition) in partitions {
        list.add_partition(topic, *partition);
    }
    let committed = through_outage(|| consumer.committed_offsets(list.clone(), TIMEOUT))?;
    Ok(partitions
        .iter()
        .map(
            |(topic, partition)| match committed.find_partition(topic, *partition) {
                Some(e) => match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                },
                None => None,
            },
        )
        .collect())
}
