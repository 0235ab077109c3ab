//! Service tests on the embedded broker (docs/design.md §6, rung 2): real Kafka
//! protocol on loopback, in process.

use unicron_codec::samples;

use std::time::Duration;

use unicron_bus::admin::{TopicStatus, ensure_topics};
use unicron_bus::{Consumer, EmbeddedBroker, Producer};
use unicron_codec::schemas::AvroRecord;
use unicron_codec::{AvroCodec, KafkaConfig, Topology};
use unicron_core::LogRecord;

const WAIT: Duration = Duration::from_secs(30);

fn config() -> KafkaConfig {
    KafkaConfig::default()
}

async fn produce_and_consume<T>(broker: &EmbeddedBroker, topic: &str, records: Vec<T>)
where
    T: AvroRecord + PartialEq + std::fmt::Debug,
{
    let config = config();
    broker.create_topic(topic, 1).unwrap();
    let producer = Producer::new(&config, broker.bootstrap_servers()).unwrap();
    let codec = AvroCodec::<T>::default();
    for record in &records {
        producer.send(topic, "c1", record, &codec).await.unwrap();
    }
    let consumer =
        Consumer::new(&config, broker.bootstrap_servers(), &format!("g-{topic}")).unwrap();
    consumer.assign(&[(topic, 0, None)]).unwrap();
    for expected in &records {
        let inbound = tokio::time::timeout(WAIT, consumer.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(inbound.key.as_deref(), Some(&b"c1"[..]));
        assert_eq!(
            &codec.decode(&inbound.payload).unwrap(),
            expected,
            "{topic}"
        );
    }
}

fn both<T>(sample: fn(bool) -> T) -> Vec<T> {
    vec![sample(true), sample(false)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_type_crosses_the_embedded_broker_intact() {
    let broker = EmbeddedBroker::start(1).unwrap();
    produce_and_consume(&broker, "t.telemetry", both(samples::telemetry)).await;
    produce_and_consume(&broker, "t.logs", both(samples::log)).await;
    produce_and_consume(&broker, "t.agent", both(samples::agent)).await;
    produce_and_consume(&broker, "t.failures", both(samples::failure)).await;
    produce_and_consume(&broker, "t.cluster", both(samples::cluster)).await;
    produce_and_consume(&broker, "t.decisions", both(samples::decision)).await;
    produce_and_consume(&broker, "t.commands", both(samples::command)).await;
    produce_and_consume(&broker, "t.results", both(samples::result)).await;
    produce_and_consume(&broker, "t.dlq", both(samples::dead_letter)).await;
    produce_and_consume(&broker, "t.checkpoints", both(samples::checkpoint)).await;
    produce_and_consume(&broker, "t.rounds", both(samples::round)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_create_is_idempotent_on_the_embedded_broker() {
    let broker = EmbeddedBroker::start(1).unwrap();
    let topology = Topology::builtin();
    let config = config();

    let first = broker
        .ensure_topics(&topology, &config.topic_prefix)
        .unwrap();
    assert_eq!(first.len(), topology.topics.len());
    assert!(first.iter().all(|r| r.status == TopicStatus::Created));
    let second = broker
        .ensure_topics(&topology, &config.topic_prefix)
        .unwrap();
    assert!(second.iter().all(|r| r.status == TopicStatus::Exists));

    // The CLI's path (`unicron topics create --brokers`) reads metadata
    // first: everything exists, with the partition counts of the topology.
    let reports = ensure_topics(&config, broker.bootstrap_servers(), &topology)
        .await
        .unwrap();
    let got: Vec<(String, i32, TopicStatus)> = reports
        .into_iter()
        .map(|r| (r.name, r.partitions, r.status))
        .collect();
    let want: Vec<(String, i32, TopicStatus)> = topology
        .topics
        .iter()
        .map(|t| {
            (
                format!("unicron.{}", t.name),
                t.partitions,
                TopicStatus::Exists,
            )
        })
        .collect();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_serves_prometheus_text() {
    let broker = EmbeddedBroker::start(1).unwrap();
    broker.create_topic("m.topic", 1).unwrap();
    let server = unicron_bus::metrics::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let producer = Producer::new(&config(), broker.bootstrap_servers()).unwrap();
    producer.send_bytes("m.topic", b"k", b"v").await.unwrap();

    let body = http_get(server.addr, "/metrics").await;
    assert!(
        body.contains("unicron_records_out_total{topic=\"m.topic\"} 1"),
        "{body}"
    );
    assert!(http_get(server.addr, "/healthz").await.ends_with("ok\n"));
}

/// A bare HTTP/1.0 GET, to keep an HTTP client out of the dependencies.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).await.unwrap();
    assert!(
        body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
        "{body}"
    );
    body
}

/// A restarted group member resumes at the record after the last one
/// marked done: not at it (a duplicate), not past it (a record lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_member_resumes_right_after_the_last_record_marked_done() {
    let broker = EmbeddedBroker::start(1).unwrap();
    let mut config = config();
    // The embedded broker hands a group's partitions to a new member only
    // once the old member's session has expired.
    config.properties.insert(
        "session.timeout.ms".into(),
        unicron_codec::config::PropertyValue::Int(6000),
    );
    let topic = "t.resume";
    broker.create_topic(topic, 1).unwrap();
    let producer = Producer::new(&config, broker.bootstrap_servers()).unwrap();
    let codec = AvroCodec::<LogRecord>::default();
    for _ in 0..5 {
        producer
            .send(topic, "node-3", &samples::log(false), &codec)
            .await
            .unwrap();
    }
    {
        let consumer = Consumer::new(&config, broker.bootstrap_servers(), "g-resume").unwrap();
        consumer.subscribe(&[topic]).unwrap();
        for expected in 0..3 {
            let record = tokio::time::timeout(WAIT, consumer.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(record.offset, expected);
            consumer
                .mark_done(&record.topic, record.partition, record.offset)
                .unwrap();
        }
        consumer.commit_now().unwrap();
    } // closing commits what is stored
    let consumer = Consumer::new(&config, broker.bootstrap_servers(), "g-resume").unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let record = tokio::time::timeout(WAIT, consumer.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.offset, 3);
}
