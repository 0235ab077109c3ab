//! The detector service on the embedded broker: telemetry throughput next to
//! the raw rdkafka consume rate of the same records, and detection latency
//! (log record produced → failure event consumed).
//! `cargo bench -p unicron-tests --bench detector_pipeline` prints the tables.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use unicron_bus::{Consumer, Producer};
use unicron_codec::AvroCodec;
use unicron_core::detector::{
    Detector, DetectorConfig, DetectorInput, LogRules, Observation, SourceRecord,
};
use unicron_core::{FailureEvent, LogRecord, MetricSample, TelemetryBatch};
use unicron_detector::DetectorSettings;

const NODES: usize = 48;
// 7,200 batches of ~3.4 KB: well under the embedded broker's 5 MB per
// partition (docs/design.md §5), so nothing is dropped before it is read.
const BATCHES_PER_NODE: usize = 150;
const SAMPLES: usize = 64;
const LATENCY_ROUNDS: usize = 300;
const T0: i64 = 1_780_000_000_000;

/// A dcgm-exporter-like batch: 8 GPUs × 8 fields; the last batch of each
/// node carries an XID 79, so every node yields exactly one failure.
fn batch(node: usize, i: usize) -> TelemetryBatch {
    let fields = [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_XID_ERRORS",
    ];
    let last = i + 1 == BATCHES_PER_NODE;
    let samples = (0..SAMPLES)
        .map(|s| {
            let name = fields[s % fields.len()];
            let value = match name {
                "DCGM_FI_DEV_XID_ERRORS" if last => 79.0,
                "DCGM_FI_DEV_XID_ERRORS" | "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" => 0.0,
                "DCGM_FI_DEV_GPU_TEMP" => 60.0 + (s % 7) as f64,
                _ => 90.0 + (i % 10) as f64,
            };
            MetricSample {
                name: name.into(),
                value,
                time_ms: T0 + i as i64 * 1000,
                gpu: Some((s / fields.len()) as i32),
                job: None,
                rank: None,
                labels: BTreeMap::from([("Hostname".into(), format!("node-{node:03}"))]),
            }
        })
        .collect();
    TelemetryBatch {
        cluster: "bench".into(),
        node: format!("node-{node:03}"),
        source: "dcgm".into(),
        samples,
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    let records = NODES * BATCHES_PER_NODE;
    let samples = records * SAMPLES;
    let codec = AvroCodec::<TelemetryBatch>::default();
    let payloads: Vec<(String, Vec<u8>)> = (0..BATCHES_PER_NODE)
        .flat_map(|i| (0..NODES).map(move |n| (n, i)))
        .map(|(n, i)| {
            let b = batch(n, i);
            (b.node.clone(), codec.encode(&b).unwrap())
        })
        .collect();

    // 1. The detector's own cost on one core: Avro decode + classify.
    let started = Instant::now();
    let mut detector = Detector::new(DetectorConfig::default(), LogRules::builtin());
    let mut failures = 0;
    for (offset, (_, payload)) in payloads.iter().enumerate() {
        let batch = codec.decode(payload).unwrap();
        let input = DetectorInput {
            source: SourceRecord {
                topic: "unicron.telemetry".into(),
                partition: 0,
                offset: offset as i64,
                index: 0,
            },
            observation: Observation::Telemetry(batch),
            caught_up: true,
        };
        failures += detector.apply(&input).len();
    }
    let in_process = started.elapsed().as_secs_f64();
    assert_eq!(failures, NODES, "one XID failure per node");

    // 2. Produce everything to the embedded broker.
    let (broker, kafka) = unicron_bus::testing::embedded_with_topics();
    let brokers = broker.bootstrap_servers().to_string();
    let producer = Producer::new(&kafka, &brokers).unwrap();
    let topic = kafka.topic("telemetry");
    for chunk in payloads.chunks(2000) {
        let mut sends = tokio::task::JoinSet::new();
        for (key, payload) in chunk {
            let (producer, topic) = (producer.clone(), topic.clone());
            let (key, payload) = (key.clone(), payload.clone());
            sends.spawn(async move { producer.send_bytes(&topic, key.as_bytes(), &payload).await });
        }
        while let Some(sent) = sends.join_next().await {
            sent.unwrap().unwrap();
        }
    }

    // 3. Raw rdkafka: read the same records with a bare consumer.
    let raw: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", "raw-bench")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "5")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..12 {
        assignment
            .add_partition_offset(&topic, p, Offset::Beginning)
            .unwrap();
    }
    raw.assign(&assignment).unwrap();
    let mut seen = 0;
    let mut first = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen < records {
        assert!(
            Instant::now() < deadline,
            "raw consumer saw only {seen} of {records} records"
        );
        if let Some(message) = raw.poll(Duration::from_millis(100)) {
            message.unwrap();
            first.get_or_insert_with(Instant::now);
            seen += 1;
        }
    }
    let raw_s = first.unwrap().elapsed().as_secs_f64();
    drop(raw);

    // 4. The detector service, started on the backlog. A warm-up log record
    //    (another topic, fetched alongside) marks when consumption begins,
    //    so the group join is not counted.
    let logs = kafka.topic("logs");
    let log_codec = AvroCodec::<LogRecord>::default();
    let log = |node: String, time_ms: i64| LogRecord {
        cluster: "bench".into(),
        node,
        time_ms,
        source: "bench".into(),
        job: None,
        rank: None,
        gpu: None,
        line: "RuntimeError: CUDA error: an illegal memory access was encountered".into(),
        attributes: BTreeMap::new(),
    };
    let warm = log("warm-up".into(), T0);
    producer
        .send_bytes(&logs, b"warm-up", &log_codec.encode(&warm).unwrap())
        .await
        .unwrap();
    let failures_reader = Consumer::new(&kafka, &brokers, "bench-failures").unwrap();
    failures_reader
        .subscribe(&[&kafka.topic("failures")])
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let started = Instant::now();
    let (k, b) = (kafka.clone(), brokers.clone());
    let task = tokio::spawn(async move {
        unicron_detector::run(
            &k,
            &b,
            DetectorSettings::default().build().unwrap(),
            async {
                let _ = stopped.await;
            },
        )
        .await
        .unwrap();
    });
    let failure_codec = AvroCodec::<FailureEvent>::default();
    let mut first_failure = None;
    for _ in 0..=NODES {
        let record = tokio::time::timeout(Duration::from_secs(120), failures_reader.recv())
            .await
            .expect("the detector published every failure")
            .unwrap();
        failure_codec.decode(&record.payload).unwrap();
        first_failure.get_or_insert_with(|| started.elapsed().as_secs_f64());
    }
    let service_total = started.elapsed().as_secs_f64();

    // 5. Detection latency, one log record at a time.
    let mut latencies = Vec::new();
    for i in 0..LATENCY_ROUNDS {
        let record = log(format!("lat-{i}"), T0 + 1_000_000 + i as i64);
        let payload = log_codec.encode(&record).unwrap();
        let sent = Instant::now();
        producer
            .send_bytes(&logs, record.node.as_bytes(), &payload)
            .await
            .unwrap();
        failures_reader.recv().await.unwrap();
        latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
    }
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(20), task).await;
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];

    println!(
        "Telemetry: {records} TelemetryBatch records × {SAMPLES} samples = {samples} samples, {NODES} nodes"
    );
    println!();
    println!("| path | seconds | records/s | samples/s | target |");
    println!("|---|---:|---:|---:|---|");
    println!(
        "| raw rdkafka consume (BaseConsumer, no decoding) | {raw_s:.2} | {:.0} | {:.0} | reference |",
        records as f64 / raw_s,
        samples as f64 / raw_s
    );
    println!(
        "| detector core in-process: Avro decode + classify, one core | {in_process:.2} | {:.0} | {:.0} | |",
        records as f64 / in_process,
        samples as f64 / in_process
    );
    let first_failure = first_failure.unwrap();
    let service = service_total - first_failure.min(service_total);
    println!(
        "| detector service on the embedded broker (warm-up failure → last failure; {:.2} s of start-up and group join excluded) | {service:.2} | {:.0} | {:.0} | ≥ 500,000 samples/s |",
        first_failure,
        records as f64 / service,
        samples as f64 / service
    );
    println!();
    println!("| path | rounds | p50 | p99 | max | target |");
    println!("|---|---:|---:|---:|---:|---|");
    println!(
        "| log record produced → failure event consumed | {LATENCY_ROUNDS} | {:.2} ms | {:.2} ms | {:.2} ms | p99 < 50 ms |",
        pct(0.5),
        pct(0.99),
        latencies[latencies.len() - 1]
    );
}
