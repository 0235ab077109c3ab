//! The transport's own rate, the reference every stage is measured against:
//! raw rdkafka produce → consume of 1 KB records through the embedded
//! broker (12 partitions, like the telemetry topic), no decoding, no
//! unicron code. `cargo bench -p unicron-tests --bench transport` prints
//! one table.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use unicron_bus::EmbeddedBroker;

/// 48,000 records of 1 KB over 12 partitions: 4 MB each, under the
/// embedded broker's 5 MB per partition (docs/design.md §5), so nothing is dropped.
const RECORDS: usize = 48_000;
const PARTITIONS: i32 = 12;

fn main() {
    let broker = EmbeddedBroker::start(1).unwrap();
    let brokers = broker.bootstrap_servers().to_string();
    broker.create_topic("transport", PARTITIONS).unwrap();
    let payload = vec![b'x'; 1024];

    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("linger.ms", "2")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .unwrap();
    let started = Instant::now();
    for i in 0..RECORDS {
        let key = format!("node-{}", i % 512);
        let mut record = BaseRecord::to("transport").key(&key).payload(&payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    producer.poll(Duration::from_millis(1));
                    record = back;
                }
            }
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    let produce_s = started.elapsed().as_secs_f64();

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", "transport-bench")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "5")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment
            .add_partition_offset("transport", p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let consume_started = Instant::now();
    let deadline = consume_started + Duration::from_secs(120);
    let mut seen = 0;
    while seen < RECORDS {
        assert!(Instant::now() < deadline, "saw only {seen} of {RECORDS}");
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            message.unwrap();
            seen += 1;
        }
    }
    let consume_s = consume_started.elapsed().as_secs_f64();
    let total_s = produce_s + consume_s;

    println!(
        "| transport (raw rdkafka, embedded broker, 1 KB records) | records | seconds | records/s |"
    );
    println!("|---|---:|---:|---:|");
    println!(
        "| produce (acks from the broker) | {RECORDS} | {produce_s:.2} | {:.0} |",
        RECORDS as f64 / produce_s
    );
    println!(
        "| consume | {RECORDS} | {consume_s:.2} | {:.0} |",
        RECORDS as f64 / consume_s
    );
    println!(
        "| produce → consume | {RECORDS} | {total_s:.2} | {:.0} |",
        RECORDS as f64 / total_s
    );
}
