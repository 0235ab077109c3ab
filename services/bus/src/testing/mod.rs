//! Helpers for tests and benchmarks that run services on the embedded
//! broker or on Apache Kafka ([`kafka`]). They panic with a clear message
//! instead of returning errors: a test that cannot read its records has
//! failed.

pub mod kafka;

use std::path::PathBuf;
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

/// tansu, the standalone broker of the standalone-broker test group:
/// `$TANSU`, or where `./dev test` installs it (`$UNICRON_CACHE`,
/// `~/.cache/unicron`, CI's cache). `None` means skip the test, which is
/// allowed only outside CI: under CI a missing tansu fails it.
pub fn tansu_or_skip() -> Option<PathBuf> {
    let cached = |dir: Option<PathBuf>| dir.map(|d| d.join("bin/tansu"));
    let found = [
        std::env::var_os("TANSU").map(PathBuf::from),
        cached(std::env::var_os("UNICRON_CACHE").map(PathBuf::from)),
        cached(std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/unicron"))),
        cached(Some(PathBuf::from("/var/cache/unicron-tools"))),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but tansu is missing: ./dev test installs it"
        );
        eprintln!("skipped: no tansu (set TANSU; it is required when CI is set)");
    }
    found
}
