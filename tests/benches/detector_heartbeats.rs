//! Heartbeats, most of the detector's volume, read from a backlog: the
//! detector service against a plain rdkafka consumer of the same records
//! on the same broker, and the detector's core alone in-process.
//! `cargo bench -p unicron-tests --bench detector_heartbeats [-- --kafka]`
//! prints the table; `--kafka` reads from a three-broker Apache Kafka
//! cluster (the jars `./dev setup test` fetches) instead of the embedded
//! broker.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use unicron_bus::Producer;
use unicron_bus::testing::kafka::{KafkaCluster, KafkaOptions};
use unicron_codec::{AvroCodec, KafkaConfig, Topology};
use unicron_core::detector::{
    Detector, DetectorConfig, DetectorInput, LogRules, Observation, SourceRecord,
};
use unicron_core::{AgentEvent, AgentEventKind, DetectorRound, RoundRange};
use unicron_detector::DetectorSettings;

const CLUSTERS: usize = 50;
const NODES: usize = 128;
const SECONDS: usize = 40;
const T0: i64 = 1_780_000_000_000;
/// The detector's default round bound (`detector.round_max_records`).
const ROUND: usize = 4096;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

/// Every node's heartbeat for every second, in time order: (key, payload).
fn heartbeats() -> Vec<(String, Vec<u8>)> {
    let codec = AvroCodec::<AgentEvent>::default();
    let mut out = Vec::with_capacity(CLUSTERS * NODES * SECONDS);
    for s in 0..SECONDS {
        for c in 0..CLUSTERS {
            for n in 0..NODES {
                let node = format!("node-{n:04}");
                let mut beat = AgentEvent::new(
                    &format!("cluster-{c:03}"),
                    &node,
                    T0 + s as i64 * 1000,
                    AgentEventKind::Heartbeat,
                );
                beat.job = Some(format!("job-{}", n / 8));
                out.push((node, codec.encode(&beat).unwrap()));
            }
        }
    }
    out
}

async fn run() {
    let kafka_cluster = std::env::args().any(|a| a == "--kafka");
    let began = Instant::now();
    let beats = heartbeats();
    let records = beats.len();

    // 1. The core alone: decode, then rounds of the service's size.
    let codec = AvroCodec::<AgentEvent>::default();
    let started = Instant::now();
    let mut detector = Detector::new(DetectorConfig::default(), LogRules::builtin());
    let mut outputs = 0;
    // Spread over the agent topic's 12 partitions as a key hash would,
    // each partition's offsets counting up.
    let mut next_offset = [0i64; 12];
    for (r, chunk) in beats.chunks(ROUND).enumerate() {
        let mut ranges: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
        let inputs: Vec<DetectorInput> = chunk
            .iter()
            .enumerate()
            .map(|(i, (_, payload))| {
                let partition = ((r * ROUND + i) % NODES % 12) as i32;
                let offset = next_offset[partition as usize];
                next_offset[partition as usize] += 1;
                let range = ranges.entry(partition).or_insert((offset, offset));
                range.1 = offset;
                DetectorInput {
                    source: SourceRecord {
                        topic: "unicron.agent".into(),
                        partition,
                        offset,
                        index: 0,
                    },
                    observation: Observation::Agent(codec.decode(payload).unwrap()),
                    caught_up: false,
                }
            })
            .collect();
        let round = DetectorRound {
            detector: "bench".into(),
            seq: r as i64,
            ranges: ranges
                .into_iter()
                .map(|(partition, (first, last))| RoundRange {
                    topic: "unicron.agent".into(),
                    partition,
                    first_offset: first,
                    last_offset: last,
                    last_caught_up: false,
                })
                .collect(),
            ..DetectorRound::default()
        };
        outputs += detector.apply_round(&round, inputs).len();
    }
    let core_s = started.elapsed().as_secs_f64();
    assert_eq!(outputs, 0, "every node heartbeats every second");

    // 2. The records on a broker.
    let cluster = kafka_cluster.then(|| {
        let libs = unicron_bus::testing::kafka::kafka_libs()
            .expect("--kafka: no Apache Kafka jars (./dev setup test fetches them)");
        KafkaCluster::start(&libs, None, &KafkaOptions::default()).expect("a Kafka cluster")
    });
    let (_embedded, kafka, brokers) = match &cluster {
        Some(c) => {
            let brokers = c.bootstrap_servers();
            let kafka = KafkaConfig::default();
            unicron_bus::admin::ensure_topics(&kafka, &brokers, &Topology::builtin())
                .await
                .unwrap();
            (None, kafka, brokers)
        }
        None => {
            let (broker, kafka) = unicron_bus::testing::embedded_with_topics();
            let brokers = broker.bootstrap_servers().to_string();
            (Some(broker), kafka, brokers)
        }
    };
    let metrics = unicron_bus::metrics::install().expect("the metrics recorder");
    let producer = Producer::new(&kafka, &brokers).unwrap();
    let topic = kafka.topic("agent");
    for chunk in beats.chunks(5000) {
        let sends = chunk
            .iter()
            .map(|(key, payload)| producer.send_bytes(&topic, key.as_bytes(), payload));
        for sent in futures::future::join_all(sends).await {
            sent.unwrap();
        }
    }

    // 3. A plain consumer of the same records.
    eprintln!(
        "{:.1} s: a plain consumer reads them",
        began.elapsed().as_secs_f64()
    );
    let raw_s = raw_consume(&brokers, &topic, records);

    eprintln!(
        "{:.1} s: the detector service reads them",
        began.elapsed().as_secs_f64()
    );
    // 4. The detector service, started on the backlog: timed from a tenth
    //    of the records read to the last.
    let (k, b) = (kafka.clone(), brokers.clone());
    tokio::spawn(async move {
        unicron_detector::run(
            &k,
            &b,
            DetectorSettings::default().build().unwrap(),
            std::future::pending(),
        )
        .await
        .unwrap();
    });
    let sum = |name: &str, label: &str| {
        let text = metrics.render();
        text.lines()
            .filter(|l| l.starts_with(name) && l.contains(label))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum::<f64>() as usize
    };
    let read = || sum("unicron_records_in_total{", &topic);
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut first = None;
    loop {
        let n = read();
        // Timed from a tenth of the way in: the group join and the
        // start-up warm-up read are not the reading rate.
        if n >= records / 10 && first.is_none() {
            first = Some((
                Instant::now(),
                n,
                cpu_s(),
                sum("unicron_detector_rounds_total", ""),
            ));
        }
        if n >= records || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (began, at_start, cpu_at_start, rounds_at_start) =
        first.expect("the detector read the backlog");
    let service_s = began.elapsed().as_secs_f64();
    let service_cpu_s = cpu_s() - cpu_at_start;
    let rounds = sum("unicron_detector_rounds_total", "") - rounds_at_start;
    let service_read = read() - at_start;
    assert!(
        read() >= records,
        "the detector read {} of {records}",
        read()
    );

    let broker = if kafka_cluster {
        "Apache Kafka × 3"
    } else {
        "embedded"
    };
    let raw_rate = records as f64 / raw_s;
    println!(
        "{CLUSTERS} clusters × {NODES} nodes × {SECONDS} s of heartbeats ({records} records), {broker} broker"
    );
    println!();
    println!("| path | records | seconds | records/s | of raw |");
    println!("|---|---:|---:|---:|---:|");
    let row = |path: &str, n: usize, s: f64| {
        println!(
            "| {path} | {n} | {s:.2} | {:.0} | {:.2} |",
            n as f64 / s,
            n as f64 / s / raw_rate
        )
    };
    row(
        "plain rdkafka consumer (BaseConsumer, no decoding)",
        records,
        raw_s,
    );
    row(
        "detector service (from a tenth read to the last)",
        service_read,
        service_s,
    );
    row(
        "detector core in-process: decode + rounds of 4,096",
        records,
        core_s,
    );
    println!();
    println!(
        "detector service: {rounds} rounds ({:.0} records each), process CPU {service_cpu_s:.2} s over {service_s:.2} s",
        service_read as f64 / rounds.max(1) as f64
    );
    println!();
}

/// Seconds a bare consumer takes from its first record to `records`.
fn raw_consume(brokers: &str, topic: &str, records: usize) -> f64 {
    let raw: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "raw-bench")
        .set("enable.auto.commit", "false")
        // As the services' consumers: no 1-s pause once the prefetch
        // queue fills.
        .set("fetch.queue.backoff.ms", "20")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    let metadata = raw
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    for t in metadata.topics() {
        for p in t.partitions() {
            assignment
                .add_partition_offset(topic, p.id(), Offset::Beginning)
                .unwrap();
        }
    }
    raw.assign(&assignment).unwrap();
    let (mut seen, mut first) = (0, None);
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen < records {
        assert!(
            Instant::now() < deadline,
            "raw consumer saw {seen} of {records}"
        );
        if let Some(message) = raw.poll(Duration::from_millis(100)) {
            message.unwrap();
            first.get_or_insert_with(Instant::now);
            seen += 1;
        }
    }
    first.unwrap().elapsed().as_secs_f64()
}

/// CPU seconds this process has used (user + system), from /proc.
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after ')'.
    (ticks(11) + ticks(12)) / 100.0
}
