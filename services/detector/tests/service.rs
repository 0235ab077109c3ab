//! The detector service on the embedded broker: native Avro records and every
//! external format in, `unicron.failures` and `unicron.dlq` out. External
//! records are made by the real producers where one installs here: OTLP by
//! the OpenTelemetry Python SDK's encoder, JSON lines by `kcat` (both
//! installed by `./dev test`).

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;
use unicron_bus::testing::GroupProgress;
use unicron_bus::{Consumer, EmbeddedBroker, Producer};
use unicron_codec::formats::{ExternalInput, InputFormat, Signal};
use unicron_codec::{AvroCodec, KafkaConfig, Topology};
use unicron_core::*;
use unicron_detector::DetectorSettings;

const WAIT: Duration = Duration::from_secs(30);

struct Harness {
    broker: EmbeddedBroker,
    kafka: KafkaConfig,
    producer: Producer,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

impl Harness {
    fn new() -> Harness {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let broker = EmbeddedBroker::start(1).unwrap();
        let kafka = KafkaConfig::default();
        broker
            .ensure_topics(&Topology::builtin(), &kafka.topic_prefix)
            .unwrap();
        let producer = Producer::new(&kafka, broker.bootstrap_servers()).unwrap();
        Harness {
            broker,
            kafka,
            producer,
        }
    }

    fn brokers(&self) -> String {
        self.broker.bootstrap_servers().to_string()
    }

    fn start(&self, settings: DetectorSettings) -> Running {
        let (stop, stopped) = oneshot::channel::<()>();
        let (kafka, brokers) = (self.kafka.clone(), self.brokers());
        let task = tokio::spawn(async move {
            unicron_detector::run(&kafka, &brokers, settings.build().unwrap(), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Running { stop, task }
    }

    fn reader(&self, topic: &str, group: &str) -> Consumer {
        let consumer = Consumer::new(&self.kafka, &self.brokers(), group).unwrap();
        consumer.subscribe(&[&self.kafka.topic(topic)]).unwrap();
        consumer
    }

    async fn log(&self, node: &str, time_ms: i64, line: &str) {
        let record = LogRecord {
            cluster: "c1".into(),
            node: node.into(),
            time_ms,
            source: "test".into(),
            job: Some("gpt".into()),
            rank: None,
            gpu: None,
            line: line.into(),
            attributes: BTreeMap::new(),
        };
        self.producer
            .send(
                &self.kafka.topic("logs"),
                node,
                &record,
                &AvroCodec::default(),
            )
            .await
            .unwrap();
    }

    /// Produces JSON lines with kcat, one record per line.
    fn kcat(&self, topic: &str, lines: &[String]) {
        let mut child = Command::new("kcat")
            .env_remove("LD_LIBRARY_PATH") // Debian's librdkafka, not the build's
            .args(["-P", "-b", &self.brokers(), "-t", topic])
            .stdin(Stdio::piped())
            .spawn()
            .expect("kcat is needed (apt-get install kcat; ./dev test installs it)");
        let mut stdin = child.stdin.take().unwrap();
        for line in lines {
            writeln!(stdin, "{line}").unwrap();
        }
        drop(stdin);
        assert!(child.wait().unwrap().success(), "kcat failed");
    }
}

/// An OTLP request encoded by the OpenTelemetry Python SDK.
fn otlp_payload(signal: &str, encoding: &str, host: &str) -> Vec<u8> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/producers/otlp_payload.py"
    );
    let out = Command::new("python3")
        .args([script, signal, encoding, host])
        .output()
        .expect("python3 is needed");
    assert!(
        out.status.success(),
        "OTLP encoder failed (pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-common; ./dev test installs them): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A detector task; stop it before the broker goes, or closing its
/// consumer waits for a broker that is not there.
struct Running {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        unicron_bus::testing::stop_service(self.stop, self.task, WAIT).await;
    }
}

async fn read<T: unicron_codec::schemas::AvroRecord>(consumer: &Consumer, n: usize) -> Vec<T> {
    unicron_bus::testing::read_records(consumer, n, WAIT).await
}

/// Nothing came of what was sent to `inputs` but the `failures` the test
/// read: once the detector committed every input record, the failures
/// topic holds exactly those.
async fn nothing_more(h: &Harness, inputs: &[&str], failures: i64) {
    let progress = progress(h);
    progress.committed_all_of(inputs, WAIT).await;
    let written = progress.written(&h.kafka.topic("failures"));
    assert_eq!(written, failures, "failures in all");
}

fn progress(h: &Harness) -> GroupProgress {
    GroupProgress::new(
        &h.kafka,
        &h.brokers(),
        &DetectorSettings::default().group_id,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_logs_become_failures_and_bad_records_go_to_the_dlq() {
    let h = Harness::new();
    let detector = h.start(DetectorSettings::default());
    let failures = h.reader("failures", "t-failures");
    let dlq = h.reader("dlq", "t-dlq");
    let t = now_ms();
    h.log("n1", t, "NCCL INFO Channel 00/32 : 0 1 2 3").await;
    h.log(
        "n1",
        t + 1,
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    )
    .await;
    h.producer
        .send_bytes(&h.kafka.topic("logs"), b"n1", b"\x00\x01 not avro")
        .await
        .unwrap();
    // A sample the detector needs, with a value it cannot use.
    let batch = TelemetryBatch {
        cluster: "c1".into(),
        node: "n2".into(),
        source: "test".into(),
        samples: vec![MetricSample {
            name: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL".into(),
            value: f64::NAN,
            time_ms: t,
            gpu: Some(1),
            job: None,
            rank: None,
            labels: BTreeMap::new(),
        }],
    };
    h.producer
        .send(
            &h.kafka.topic("telemetry"),
            "n2",
            &batch,
            &AvroCodec::default(),
        )
        .await
        .unwrap();
    h.log(
        "n1",
        t + 2,
        "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
    )
    .await;

    let got: Vec<FailureEvent> = read(&failures, 2).await;
    assert_eq!(got[0].kind, FailureKind::IllegalMemoryAccess);
    assert_eq!(got[0].node.as_deref(), Some("n1"));
    assert_eq!(got[0].job.as_deref(), Some("gpt"));
    assert_eq!(got[0].evidence[0].topic, "unicron.logs");
    assert_eq!(got[0].evidence[0].offset, got[1].evidence[0].offset - 2);
    assert_eq!(
        (got[1].kind, got[1].severity),
        (FailureKind::GpuDriverError, Severity::Sev1)
    );
    nothing_more(&h, &["unicron.logs", "unicron.telemetry"], 2).await;

    let mut letters: Vec<DeadLetter> = read(&dlq, 2).await;
    letters.sort_by(|a, b| a.source_topic.cmp(&b.source_topic));
    assert!(
        letters[0].error.starts_with("avro LogRecord"),
        "{}",
        letters[0].error
    );
    assert_eq!(letters[0].service, "detector");
    assert!(
        letters[1].error.contains("not a finite number"),
        "{}",
        letters[1].error
    );
    assert_eq!(letters[1].source_topic, "unicron.telemetry");
    detector.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_from_the_opentelemetry_sdk_is_detected_in_proto_and_json() {
    let h = Harness::new();
    // The Collector's default topics, consumed with no configuration.
    h.broker.create_topic("otlp_metrics", 2).unwrap();
    h.broker.create_topic("otlp_logs", 2).unwrap();
    h.broker.create_topic("site.otlp.json.metrics", 1).unwrap();
    h.broker.create_topic("site.otlp.json.logs", 1).unwrap();
    let mut settings = DetectorSettings::default();
    for (topic, signal) in [
        ("site.otlp.json.metrics", Signal::Metrics),
        ("site.otlp.json.logs", Signal::Logs),
    ] {
        settings.inputs.push(ExternalInput {
            topic: topic.into(),
            format: InputFormat::OtlpJson,
            signal: Some(signal),
            labels: Default::default(),
            optional: false,
            cluster: None,
        });
    }
    let detector = h.start(settings);
    let failures = h.reader("failures", "t-failures");
    for (topic, signal, encoding) in [
        ("otlp_metrics", "metrics", "proto"),
        ("otlp_logs", "logs", "proto"),
        ("site.otlp.json.metrics", "metrics", "json"),
        ("site.otlp.json.logs", "logs", "json"),
    ] {
        h.producer
            .send_bytes(topic, b"", &otlp_payload(signal, encoding, topic))
            .await
            .unwrap();
        let got: Vec<FailureEvent> = read(&failures, 1).await;
        let f = &got[0];
        assert_eq!(f.cluster, "c9", "{topic}");
        assert_eq!(
            f.node.as_deref(),
            Some(topic),
            "the host.name resource attribute"
        );
        if signal == "metrics" {
            assert_eq!(
                (f.kind, f.method, f.gpu),
                (
                    FailureKind::GpuDriverError,
                    DetectionMethod::MetricRule,
                    Some(3)
                ),
                "{topic}"
            );
            assert!(
                f.evidence[0].excerpt.contains("UUID=\"GPU-8f3b\""),
                "{}",
                f.evidence[0].excerpt
            );
        } else {
            assert_eq!(
                (f.kind, f.method, f.gpu),
                (FailureKind::EccError, DetectionMethod::LogRule, Some(5)),
                "{topic}"
            );
        }
        assert_eq!(f.evidence[0].topic, topic);
        // Garbage on the same topic is dead-lettered, not fatal.
        h.producer
            .send_bytes(topic, b"", b"\x0a\xff\xff garbage")
            .await
            .unwrap();
    }
    let inputs = [
        "otlp_metrics",
        "otlp_logs",
        "site.otlp.json.metrics",
        "site.otlp.json.logs",
    ];
    nothing_more(&h, &inputs, 4).await;
    detector.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_formats_produced_by_kcat_are_detected_and_bad_ones_dead_lettered() {
    let h = Harness::new();
    for topic in ["prom", "vector", "fluentbit"] {
        h.broker.create_topic(topic, 1).unwrap();
    }
    let mut settings = DetectorSettings::default();
    for (topic, format) in [
        ("prom", InputFormat::PrometheusJson),
        ("vector", InputFormat::VectorJson),
        ("fluentbit", InputFormat::FluentBitJson),
    ] {
        settings.inputs.push(ExternalInput {
            topic: topic.into(),
            format,
            signal: None,
            labels: Default::default(),
            optional: false,
            cluster: None,
        });
    }
    let detector = h.start(settings);
    let failures = h.reader("failures", "t-failures");
    let dlq = h.reader("dlq", "t-dlq");
    let t = now_ms();
    let rfc3339 = |ms: i64| {
        let out = Command::new("date")
            .args([
                "-u",
                "-d",
                &format!("@{}", ms / 1000),
                "+%Y-%m-%dT%H:%M:%SZ",
            ])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    h.kcat(
        "prom",
        &[
            format!(r#"{{"timestamp":"{}","value":"NaN","name":"DCGM_FI_DEV_GPU_UTIL","labels":{{"__name__":"DCGM_FI_DEV_GPU_UTIL","Hostname":"n7","gpu":"0","job":"dcgm"}}}}"#, rfc3339(t)),
            format!(r#"{{"timestamp":"{}","value":"74","name":"DCGM_FI_DEV_XID_ERRORS","labels":{{"__name__":"DCGM_FI_DEV_XID_ERRORS","Hostname":"n7","gpu":"2","UUID":"GPU-1","job":"dcgm"}}}}"#, rfc3339(t)),
            format!(r#"{{"timestamp":"{}","value":"NaN","name":"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL","labels":{{"Hostname":"n7","gpu":"1"}}}}"#, rfc3339(t)),
            r#"{"timestamp":"not a time","value":"1","name":"x","labels":{}}"#.to_string(),
        ],
    );
    let got: Vec<FailureEvent> = read(&failures, 1).await;
    assert_eq!(
        (got[0].kind, got[0].node.as_deref(), got[0].gpu),
        (FailureKind::NvlinkError, Some("n7"), Some(2))
    );
    assert_eq!(got[0].cluster, "default");

    h.kcat(
        "vector",
        &[
            format!(r#"{{"message":"RuntimeError: CUDA error: an illegal memory access was encountered","timestamp":"{}","host":"n8","source_type":"file"}}"#, rfc3339(t)),
            format!(r#"{{"name":"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL","tags":{{"Hostname":"n8","gpu":"4"}},"timestamp":"{}","kind":"absolute","counter":{{"value":3.0}}}}"#, rfc3339(t)),
            format!(r#"{{"name":"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL","tags":{{"Hostname":"n8","gpu":"4"}},"timestamp":"{}","kind":"absolute","counter":{{"value":4.0}}}}"#, rfc3339(t + 1000)),
        ],
    );
    let got: Vec<FailureEvent> = read(&failures, 2).await;
    assert_eq!(
        (got[0].kind, got[0].node.as_deref()),
        (FailureKind::IllegalMemoryAccess, Some("n8"))
    );
    assert_eq!(
        (got[1].kind, got[1].node.as_deref(), got[1].gpu),
        (FailureKind::EccError, Some("n8"), Some(4))
    );

    h.kcat(
        "fluentbit",
        &[
            format!(r#"{{"@timestamp":{}.25,"log":"kernel: DMAR: [DMA Read NO_PASID] Request device [3b:00.0] fault addr 0xffb7e000 [fault reason 0x06] PTE Read access is not set\n","kubernetes":{{"host":"n9","pod_name":"trainer-0"}}}}"#, t / 1000),
            r#"{"log":"no timestamp here"}"#.to_string(),
        ],
    );
    let got: Vec<FailureEvent> = read(&failures, 1).await;
    assert_eq!(
        (got[0].kind, got[0].node.as_deref()),
        (FailureKind::InvalidDmaMapping, Some("n9"))
    );
    assert_eq!(got[0].first_evidence_ms, (t / 1000) * 1000 + 250);
    nothing_more(&h, &["prom", "vector", "fluentbit"], 4).await;

    let letters: Vec<DeadLetter> = read(&dlq, 3).await;
    let mut reasons: Vec<(&str, i64, &str)> = letters
        .iter()
        .map(|l| (l.source_topic.as_str(), l.offset, l.error.as_str()))
        .collect();
    reasons.sort(); // the DLQ is keyed by source topic: no order across topics
    assert!(
        reasons[0].2.contains("no numeric `@timestamp`"),
        "{reasons:?}"
    );
    assert!(reasons[1].2.contains("not a finite number"), "{reasons:?}");
    assert!(
        reasons[2].2.contains("not an RFC 3339 timestamp"),
        "{reasons:?}"
    );
    detector.stop().await;
}

/// Garbage for one input topic, drawn until its decoder refuses it: bytes,
/// text, JSON objects with the keys the formats read, and cut encodings of
/// a native record.
fn garbage(
    runner: &mut proptest::test_runner::TestRunner,
    valid: &[u8],
    bad: impl Fn(&[u8]) -> bool,
    n: usize,
) -> Vec<Vec<u8>> {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    let json_value = prop_oneof![
        Just("null".to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        Just("1.7e9".to_string()),
        Just("\"2026-03-01T10:22:01Z\"".to_string()),
        Just("\"n1\"".to_string()),
        Just("{\"value\": \"x\"}".to_string()),
        Just("[]".to_string()),
    ];
    let key = proptest::sample::select(vec![
        "timestamp",
        "@timestamp",
        "value",
        "name",
        "labels",
        "message",
        "log",
        "host",
        "counter",
        "resourceMetrics",
        "resourceLogs",
    ]);
    let valid = valid.to_vec();
    let strategy = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..96),
        ".{0,40}".prop_map(String::into_bytes),
        proptest::collection::btree_map(key, json_value, 0..4).prop_map(|fields| {
            let body: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("\"{k}\": {v}"))
                .collect();
            format!("{{{}}}", body.join(", ")).into_bytes()
        }),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 0..4)).prop_map(
            move |(cut, tail)| {
                let mut bytes = valid[..cut % valid.len()].to_vec();
                bytes.extend(tail);
                bytes
            }
        ),
    ];
    let mut out = Vec::new();
    for _ in 0..10_000 {
        if out.len() == n {
            return out;
        }
        let payload = strategy.new_tree(runner).unwrap().current();
        if bad(&payload) {
            out.push(payload);
        }
    }
    panic!("could not draw {n} bad payloads");
}

/// Every record no decoder can use ends in the DLQ exactly once,
/// with a reason and its source topic, partition and offset. The garbage is
/// drawn with a fixed seed, so the run is the same every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_undecodable_record_is_dead_lettered_once_with_a_reason() {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let h = Harness::new();
    let external = [
        (
            "fz.otlp.metrics",
            InputFormat::OtlpProto,
            Some(Signal::Metrics),
        ),
        ("fz.otlp.logs", InputFormat::OtlpJson, Some(Signal::Logs)),
        ("fz.prom", InputFormat::PrometheusJson, None),
        ("fz.vector", InputFormat::VectorJson, None),
        ("fz.fluentbit", InputFormat::FluentBitJson, None),
    ];
    let mut settings = DetectorSettings::default();
    for (topic, format, signal) in external {
        h.broker.create_topic(topic, 2).unwrap();
        settings.inputs.push(ExternalInput {
            topic: topic.into(),
            format,
            signal,
            labels: Default::default(),
            optional: false,
            cluster: None,
        });
    }
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    const PER_TOPIC: usize = 12;
    let mut batches: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    let t = now_ms();
    let log = LogRecord {
        cluster: "c1".into(),
        node: "n1".into(),
        time_ms: t,
        source: "test".into(),
        job: Some("gpt".into()),
        rank: Some(3),
        gpu: None,
        line: "NCCL WARN something".into(),
        attributes: BTreeMap::from([("k".to_string(), "v".to_string())]),
    };
    let batch = TelemetryBatch {
        cluster: "c1".into(),
        node: "n1".into(),
        source: "test".into(),
        samples: vec![MetricSample {
            name: "DCGM_FI_DEV_GPU_TEMP".into(),
            value: 40.0,
            time_ms: t,
            gpu: Some(0),
            job: None,
            rank: None,
            labels: BTreeMap::new(),
        }],
    };
    let agent = AgentEvent {
        cluster: "c1".into(),
        node: "n1".into(),
        time_ms: t,
        kind: AgentEventKind::Heartbeat,
        job: None,
        rank: None,
        exit_code: None,
        signal: None,
        iteration: None,
        iteration_time_ms: None,
        compute_ms: None,
        idle_tick: false,
        worker: None,
    };
    let log_codec = AvroCodec::<LogRecord>::default();
    let telemetry_codec = AvroCodec::<TelemetryBatch>::default();
    let agent_codec = AvroCodec::<AgentEvent>::default();
    batches.push((
        h.kafka.topic("logs"),
        garbage(
            &mut runner,
            &log_codec.encode(&log).unwrap(),
            |p| log_codec.decode(p).is_err(),
            PER_TOPIC,
        ),
    ));
    batches.push((
        h.kafka.topic("telemetry"),
        garbage(
            &mut runner,
            &telemetry_codec.encode(&batch).unwrap(),
            |p| telemetry_codec.decode(p).is_err(),
            PER_TOPIC,
        ),
    ));
    batches.push((
        h.kafka.topic("agent"),
        garbage(
            &mut runner,
            &agent_codec.encode(&agent).unwrap(),
            |p| agent_codec.decode(p).is_err(),
            PER_TOPIC,
        ),
    ));
    for input in settings
        .inputs
        .iter()
        .filter(|i| i.topic.starts_with("fz."))
    {
        let valid = b"{\"timestamp\": \"2026-03-01T10:22:01Z\", \"message\": \"m\"}";
        batches.push((
            input.topic.clone(),
            garbage(
                &mut runner,
                valid,
                |p| !unicron_codec::formats::decode(input, p).problems.is_empty(),
                PER_TOPIC,
            ),
        ));
    }

    let detector = h.start(settings);
    let dlq = h.reader("dlq", "t-dlq");
    // (topic, partition, offset) → payload of every record sent.
    let mut sent: BTreeMap<(String, i32, i64), Vec<u8>> = BTreeMap::new();
    for (topic, payloads) in &batches {
        for (i, payload) in payloads.iter().enumerate() {
            let key = format!("k{i}");
            let at = h
                .producer
                .send_bytes(topic, key.as_bytes(), payload)
                .await
                .unwrap();
            sent.insert((topic.clone(), at.partition, at.offset), payload.clone());
        }
    }
    assert_eq!(sent.len(), batches.len() * PER_TOPIC);

    let letters: Vec<DeadLetter> = read(&dlq, sent.len()).await;
    let inputs: Vec<&str> = batches.iter().map(|(topic, _)| topic.as_str()).collect();
    let progress = progress(&h);
    progress.committed_all_of(&inputs, WAIT).await;
    let written = progress.written(&h.kafka.topic("dlq"));
    assert_eq!(written, sent.len() as i64, "dead letters in all");
    let mut seen = std::collections::BTreeSet::new();
    for letter in &letters {
        let at = (letter.source_topic.clone(), letter.partition, letter.offset);
        let payload = sent
            .get(&at)
            .unwrap_or_else(|| panic!("a dead letter for a record not sent: {at:?}"));
        assert!(seen.insert(at.clone()), "two dead letters for {at:?}");
        assert!(!letter.error.trim().is_empty(), "no reason for {at:?}");
        assert_eq!(letter.service, "detector");
        assert_eq!(&letter.payload, payload, "{at:?}");
        assert_eq!(letter.payload_size, payload.len() as i64);
    }
    assert_eq!(seen.len(), sent.len());
    detector.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_topic_created_later_is_read_in_seconds_and_a_quiet_input_is_not_left_holding()
{
    let h = Harness::new();
    let detector = h.start(DetectorSettings {
        new_topic_check_s: 1.0,
        ..DetectorSettings::default()
    });
    let failures = h.reader("failures", "t-failures");
    let rounds = h.reader("detector-rounds", "t-rounds");
    // Reading (a benign line comes back as a round) while otlp_logs does
    // not exist.
    h.log("n0", now_ms(), "step 1 | loss 2.31 | lr 3e-4").await;
    let _: Vec<DetectorRound> = read(&rounds, 1).await;

    // The Collector starts after unicron: its topic appears now.
    h.broker.create_topic("otlp_logs", 1).unwrap();
    let sent = std::time::Instant::now();
    h.producer
        .send_bytes(
            "otlp_logs",
            b"",
            &otlp_payload("logs", "proto", "late-host"),
        )
        .await
        .unwrap();
    // Joined at the next 1-s refresh, then a rebalance the embedded broker
    // holds for about 9 s; a functional bound, the time itself is printed
    // (and benchmarked on Apache Kafka).
    let got: Vec<FailureEvent> =
        unicron_bus::testing::read_records(&failures, 1, Duration::from_secs(60)).await;
    eprintln!(
        "new topic: failure read {:?} after the first record",
        sent.elapsed()
    );
    assert_eq!(got[0].node.as_deref(), Some("late-host"));

    // One held symptom and then silence: an idle tick releases it.
    let t = now_ms();
    h.log(
        "n1",
        t,
        "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<5132> with error 12, opcode 0, len 0, vendor err 129 (Recv)",
    )
    .await;
    let got: Vec<FailureEvent> = read(&failures, 1).await;
    assert_eq!(
        (
            got[0].kind,
            got[0].node.as_deref(),
            got[0].first_evidence_ms
        ),
        (FailureKind::NetworkError, Some("n1"), t)
    );
    // The tick that moved the clock is in a round, there for replay, with
    // the failure it released.
    let released = loop {
        let round: Vec<DetectorRound> = read(&rounds, 1).await;
        if round[0].failures.contains(&got[0].id) {
            break round[0].clone();
        }
    };
    assert_eq!(released.ticks.len(), 1, "{released:?}");
    assert_eq!(released.ticks[0].cluster, "c1");
    assert!(
        released.ticks[0].time_ms > t,
        "{} after {t}",
        released.ticks[0].time_ms
    );
    assert_eq!(released.failures, vec![got[0].id.clone()]);
    detector.stop().await;
}

/// A detector taking over from another rebuilds what the other knew from
/// the records just below the group's committed offsets: a node whose last
/// heartbeat the first instance read and committed, silent since, is found
/// lost by the second, which never reads that heartbeat live. The warm-up
/// is a round of its own naming the records, so replay rebuilds the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detector_taking_over_learns_nodes_that_went_silent_before_it() {
    let h = Harness::new();
    let settings = DetectorSettings {
        // The embedded broker holds each rebalance for a session timeout:
        // the window must reach back past the first instance's life.
        warm_up_s: 120.0,
        ..DetectorSettings::default()
    };
    let agent = h.kafka.topic("agent");
    let first = h.start(settings.clone());
    heartbeat(&h.producer, &agent, "n1").await;
    heartbeat(&h.producer, &agent, "n2").await;
    progress(&h)
        .committed_all_of(&["unicron.agent"], Duration::from_secs(60))
        .await;
    first.stop().await;
    let committed = progress(&h).written("unicron.agent");

    // n2 goes on heartbeating; n1 has gone silent.
    let failures = h.reader("failures", "t-failures");
    let rounds = h.reader("detector-rounds", "t-rounds");
    let second = h.start(settings);
    let beating = {
        let producer = h.producer.clone();
        tokio::spawn(async move {
            loop {
                heartbeat(&producer, &agent, "n2").await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let got: Vec<FailureEvent> =
        unicron_bus::testing::read_records(&failures, 1, Duration::from_secs(90)).await;
    beating.abort();
    assert_eq!(
        (got[0].kind, got[0].node.as_deref()),
        (FailureKind::LostConnection, Some("n1"))
    );
    // The second instance's first round is the warm-up: n1's heartbeat,
    // below where the first instance committed, applied and not published.
    let mut seen: Vec<DetectorRound> = read(&rounds, 1).await;
    while !seen.iter().any(|r| r.warm) {
        seen.extend(read::<DetectorRound>(&rounds, 1).await);
    }
    let warm = seen.iter().find(|r| r.warm).unwrap();
    assert!(
        warm.reset && warm.silence_held && warm.failures.is_empty(),
        "{warm:?}"
    );
    let warm_records: i64 = warm
        .ranges
        .iter()
        .map(|r| r.last_offset - r.first_offset + 1)
        .sum();
    assert_eq!(
        warm_records, committed,
        "both heartbeats read again: {warm:?}"
    );
    // ... and never read live by the second instance.
    let live_read_below_commit = seen
        .iter()
        .filter(|r| r.detector == warm.detector && !r.warm)
        .flat_map(|r| &r.ranges)
        .any(|r| r.first_offset == 0);
    assert!(!live_read_below_commit, "{seen:?}");
    second.stop().await;
}

async fn heartbeat(producer: &Producer, topic: &str, node: &str) {
    let event = AgentEvent::new("c1", node, now_ms(), AgentEventKind::Heartbeat);
    producer
        .send(topic, node, &event, &AvroCodec::default())
        .await
        .unwrap();
}

/// `detector.rules_file` edited while the detector runs: lines after the
/// change are classified by the new rules, the round that switched carries
/// them (so replay does the same), and a file that does not compile keeps
/// the rules in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_rules_file_applies_to_the_lines_after_it_and_a_bad_one_is_refused() {
    const LINE: &str = "bmc: chassis fan 3 stopped spinning";
    const SITE: &str = "[[rule]]\nname = \"site.fan_stopped\"\nkind = \"gpu_driver_error\"\nkeywords = [\"fan\"]\npattern = 'fan \\d+ stopped'\n";
    let h = Harness::new();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.toml");
    std::fs::write(&path, "").unwrap();
    let detector = h.start(DetectorSettings {
        rules_file: Some(path.clone()),
        ..DetectorSettings::default()
    });
    let failures = h.reader("failures", "t-failures");
    let rounds = h.reader("detector-rounds", "t-rounds");
    let t = now_ms();
    h.log("n1", t, LINE).await;
    // An error no rule names: no failure, surfaced in the round instead.
    h.log("n1", t, "bmc: psu 2 failed to respond").await;
    progress(&h).committed_all_of(&["unicron.logs"], WAIT).await;
    assert_eq!(progress(&h).written(&h.kafka.topic("failures")), 0);

    std::fs::write(&path, SITE).unwrap();
    // The file is looked at every 2 s: a line a second until one counts.
    let mut sent = 1;
    let first = loop {
        h.log(&format!("n{sent}"), t + sent, LINE).await;
        sent += 1;
        if let Ok(record) = tokio::time::timeout(Duration::from_secs(1), failures.recv()).await {
            let codec = AvroCodec::<FailureEvent>::default();
            break codec.decode(&record.unwrap().payload).unwrap();
        }
        assert!(sent < 30, "the new rules never applied");
    };
    assert_eq!(first.rule.as_deref(), Some("site.fan_stopped"));

    std::fs::write(&path, "[[rule]]\nname = 3\n").unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.log("m1", t + 100, LINE).await;
    let after: Vec<FailureEvent> = read(&failures, 1).await;
    assert_eq!(after[0].node.as_deref(), Some("m1"));
    assert_eq!(after[0].rule.as_deref(), Some("site.fan_stopped"));

    let site_version = unicron_core::detector::LogRules::with_user(SITE)
        .unwrap()
        .version()
        .to_string();
    let mut carried = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    while carried
        .iter()
        .all(|r: &DetectorRound| r.rules.as_deref() != Some(SITE))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no round carried the new rules"
        );
        carried.extend(read::<DetectorRound>(&rounds, 1).await);
    }
    assert_eq!(
        carried[0].rules.as_deref(),
        Some(""),
        "the first round carries the file"
    );
    assert!(
        carried
            .iter()
            .flat_map(|r| &r.unclassified)
            .any(|u| u.template == "bmc: psu <*> failed to respond" && u.nodes == ["n1"]),
        "{carried:#?}"
    );
    let switched = carried.last().unwrap();
    assert_eq!(switched.rules_version, site_version);
    detector.stop().await;
}
