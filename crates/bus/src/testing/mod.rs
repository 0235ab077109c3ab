//! Helpers for tests and benchmarks that run services on the embedded
//! broker or on Apache Kafka ([`kafka`]). The embedded broker's helpers
//! panic with a clear message instead of returning errors: a test that
//! cannot read its records has failed. [`kafka`] returns errors, because
//! the chaos driver and the benchmarks run it too.

pub mod kafka;
mod kafka_options;

use std::time::Duration;

use crate::consumer::Consumer;
use unicron_codec::codec::AvroCodec;
use unicron_codec::schemas::AvroRecord;

/// An embedded broker with every topic of the topology, and a Kafka
/// configuration for it whose consumer-group session is short: the
/// embedded broker lets a group rebalance only after the old member's
/// session expires, even after a clean leave.
pub fn embedded_with_topics() -> (crate::EmbeddedBroker, unicron_codec::KafkaConfig) {
    let broker = crate::EmbeddedBroker::start(1).expect("start the embedded broker");
    let mut kafka = unicron_codec::KafkaConfig::default();
    kafka.properties.insert(
        "session.timeout.ms".into(),
        unicron_codec::config::PropertyValue::Int(6000),
    );
    broker
        .ensure_topics(&unicron_codec::Topology::builtin(), &kafka.topic_prefix)
        .expect("create the topics");
    (broker, kafka)
}

/// Reads and decodes the next `n` records, each within `wait`.
pub async fn read_records<T: AvroRecord>(consumer: &Consumer, n: usize, wait: Duration) -> Vec<T> {
    let codec = AvroCodec::<T>::default();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let record = tokio::time::timeout(wait, consumer.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for record {} of {n}", i + 1))
            .expect("consume");
        out.push(codec.decode(&record.payload).expect("decode"));
    }
    out
}

/// What a consumer group committed and what the topics hold, read by a
/// client that joins nothing.
pub struct GroupProgress {
    client: rdkafka::consumer::BaseConsumer,
}

impl GroupProgress {
    /// For consumer group `group` on `brokers`.
    pub fn new(config: &unicron_codec::KafkaConfig, brokers: &str, group: &str) -> GroupProgress {
        let mut client_config = crate::client::client_config(config, brokers);
        client_config.set("group.id", group);
        GroupProgress {
            client: client_config.create().expect("a client"),
        }
    }

    /// Every partition of `topics` with its high watermark now.
    fn ends(&self, topics: &[&str]) -> rdkafka::TopicPartitionList {
        use rdkafka::consumer::Consumer as _;
        let timeout = Duration::from_secs(5);
        let mut ends = rdkafka::TopicPartitionList::new();
        for topic in topics {
            let metadata = self
                .client
                .fetch_metadata(Some(topic), timeout)
                .expect("metadata");
            for partition in metadata.topics()[0].partitions() {
                let (_, high) = self
                    .client
                    .fetch_watermarks(topic, partition.id(), timeout)
                    .expect("watermarks");
                ends.add_partition_offset(topic, partition.id(), rdkafka::Offset::Offset(high))
                    .expect("a partition");
            }
        }
        ends
    }

    /// Waits, up to `within`, until the group has committed every record
    /// now on `topics`. A service marks a record done only once what it
    /// came to is published, so after this its outputs for those records
    /// are all on their topics: a check for "nothing more" that a slow
    /// machine cannot pass by being slow.
    pub async fn committed_all_of(&self, topics: &[&str], within: Duration) {
        use rdkafka::consumer::Consumer as _;
        let ends = self.ends(topics);
        let started = std::time::Instant::now();
        loop {
            let committed = self
                .client
                .committed_offsets(ends.clone(), Duration::from_secs(5))
                .expect("committed offsets");
            let behind: Vec<String> = ends
                .elements()
                .iter()
                .filter(|end| {
                    let done = committed
                        .find_partition(end.topic(), end.partition())
                        .map(|c| c.offset());
                    match (end.offset(), done) {
                        (rdkafka::Offset::Offset(0), _) => false,
                        (rdkafka::Offset::Offset(high), Some(rdkafka::Offset::Offset(next))) => {
                            next < high
                        }
                        _ => true,
                    }
                })
                .map(|end| format!("{}/{}", end.topic(), end.partition()))
                .collect();
            if behind.is_empty() {
                return;
            }
            assert!(
                started.elapsed() < within,
                "not committed within {within:?}: {behind:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Records ever written to `topic` (the sum of its high watermarks).
    pub fn written(&self, topic: &str) -> i64 {
        self.ends(&[topic])
            .elements()
            .iter()
            .map(|end| match end.offset() {
                rdkafka::Offset::Offset(high) => high,
                _ => 0,
            })
            .sum()
    }
}

/// Stops a service task started with a shutdown channel and waits for it,
/// so it finishes before the broker of the test goes away (closing a
/// consumer whose broker is gone does not return).
pub async fn stop_service(
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    wait: Duration,
) {
    let _ = stop.send(());
    tokio::time::timeout(wait, task)
        .await
        .expect("the service stops")
        .expect("the service task");
}
