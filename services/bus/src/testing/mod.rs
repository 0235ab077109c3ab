//! Helpers for tests and benchmarks that run services on the embedded
//! broker or on Apache Kafka ([`kafka`]). The embedded broker's helpers
//! panic with a clear message instead of returning errors: a test that
//! cannot read its records has failed. [`kafka`] returns errors, because
//! the chaos driver and the benchmarks run it too.

pub mod kafka;

use std::time::Duration;

use crate::codec::AvroCodec;
use crate::consumer::Consumer;
use crate::schemas::AvroRecord;

/// An embedded broker with every topic of the topology, and a Kafka
/// configuration for it whose consumer-group session is short: the
/// embedded broker lets a group rebalance only after the old member's
/// session expires, even after a clean leave.
pub fn embedded_with_topics() -> (crate::EmbeddedBroker, crate::KafkaConfig) {
    let broker = crate::EmbeddedBroker::start(1).expect("start the embedded broker");
    let mut kafka = crate::KafkaConfig::default();
    kafka.properties.insert(
        "session.timeout.ms".into(),
        crate::config::PropertyValue::Int(6000),
    );
    broker
        .ensure_topics(&crate::Topology::builtin(), &kafka.topic_prefix)
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

/// Asserts that nothing more arrives within `quiet`.
pub async fn assert_quiet(consumer: &Consumer, quiet: Duration) {
    let extra = tokio::time::timeout(quiet, consumer.recv()).await;
    assert!(extra.is_err(), "unexpected extra record");
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
