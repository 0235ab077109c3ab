//! Debian's rsyslog (with omkafka) in front of the detector, running the
//! configuration shipped in `deploy/rsyslog/`: lines appended to a
//! training log become failures of the node rsyslog names. On the embedded
//! broker and on Apache Kafka 4 (a single broker of the pinned version),
//! because rsyslog's omkafka links Debian's librdkafka 2.0.2, not the one
//! unicron builds.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use unicron_bus::testing::kafka::{KafkaCluster, KafkaOptions, kafka_or_skip};
use unicron_bus::{Consumer, EmbeddedBroker};
use unicron_codec::formats::{ExternalInput, InputFormat, LabelMap};
use unicron_codec::{KafkaConfig, Topology};
use unicron_core::{DetectorRound, FailureEvent, FailureKind};
use unicron_detector::DetectorSettings;

const TOPIC: &str = "rsyslog";
/// The cluster the topic is bound to: its rsyslog's lines are this
/// cluster's, and a record claiming another is refused.
const CLUSTER: &str = "site-a";
/// The node rsyslog reports (its `localHostname`).
const NODE: &str = "gpu-node-17";

/// Real lines (from the corpus in crates/core/tests/corpus/) a rank or
/// the launcher writes, and the kind each must become.
const LINES: [(&str, FailureKind); 5] = [
    (
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        FailureKind::IllegalMemoryAccess,
    ),
    (
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 bytes.",
        FailureKind::OutOfMemory,
    ),
    (
        "Failed to initialize NVML: Unknown Error",
        FailureKind::GpuDriverError,
    ),
    (
        "Nov 26 09:36:22 mo-srv-128 kernel: {7}[Hardware Error]:   error_type: 3, multi-bit ECC",
        FailureKind::EccError,
    ),
    (
        "Job for nvidia-fabricmanager.service failed because the control process exited with error code.",
        FailureKind::NvlinkError,
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsyslog_ships_appended_training_lines_as_failures_on_the_embedded_broker() {
    let broker = EmbeddedBroker::start(1).unwrap();
    let kafka = KafkaConfig::default();
    broker
        .ensure_topics(&Topology::builtin(), &kafka.topic_prefix)
        .unwrap();
    broker.create_topic(TOPIC, 3).unwrap();
    through_rsyslog("embedded broker", &kafka, broker.bootstrap_servers()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsyslog_ships_appended_training_lines_as_failures_on_apache_kafka() {
    let Some(libs) = kafka_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let options = KafkaOptions {
        brokers: 1,
        ..KafkaOptions::default()
    };
    let cluster =
        KafkaCluster::start(&libs, Some(dir.path()), &options).unwrap_or_else(|e| panic!("{e}"));
    let kafka = KafkaConfig {
        replication_factor: 1,
        min_insync_replicas: Some(1),
        ..KafkaConfig::default()
    };
    let brokers = cluster.bootstrap_servers();
    unicron_bus::admin::ensure_topics(&kafka, &brokers, &Topology::builtin())
        .await
        .unwrap();
    create_topic(&brokers, TOPIC).await;
    through_rsyslog("Apache Kafka", &kafka, &brokers).await;
}

async fn create_topic(brokers: &str, name: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let created = admin
        .create_topics(
            &[NewTopic::new(name, 3, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    assert!(created.iter().all(Result::is_ok), "{created:?}");
}

/// Starts the detector reading `rsyslog` and rsyslogd with the deploy
/// configuration, appends each line to a watched file, and checks the
/// failure it becomes.
async fn through_rsyslog(broker: &str, kafka: &KafkaConfig, brokers: &str) {
    let dir = tempfile::tempdir().unwrap();
    let settings = DetectorSettings {
        inputs: vec![ExternalInput {
            topic: TOPIC.into(),
            format: InputFormat::RsyslogJson,
            signal: None,
            labels: LabelMap::default(),
            optional: true,
            cluster: Some(CLUSTER.into()),
        }],
        ..DetectorSettings::default()
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = {
        let (kafka, brokers) = (kafka.clone(), brokers.to_string());
        tokio::spawn(async move {
            unicron_detector::run(&kafka, &brokers, settings.build().unwrap(), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        })
    };
    let failures = Consumer::new(kafka, brokers, "t-failures").unwrap();
    failures.subscribe(&[&kafka.topic("failures")]).unwrap();
    let rounds = Consumer::new(kafka, brokers, "t-rounds").unwrap();
    rounds
        .subscribe(&[&kafka.topic("detector-rounds")])
        .unwrap();

    let logs = dir.path().join("training");
    std::fs::create_dir(&logs).unwrap();
    let log = logs.join("rank0.log");
    std::fs::write(&log, "").unwrap();
    let _rsyslog = Rsyslogd::start(dir.path(), &logs, brokers);

    // A benign line first: once it is on the topic, rsyslog is shipping.
    let shipped = Consumer::new(kafka, brokers, "t-shipped").unwrap();
    shipped.subscribe(&[TOPIC]).unwrap();
    append(
        &log,
        "node-0:301602:301602 [1] NCCL INFO NVLS multicast support is not available on dev 1 (NVLS_NCHANNELS 0)",
    );
    let first = tokio::time::timeout(Duration::from_secs(60), shipped.recv())
        .await
        .expect("rsyslog shipped nothing within 60 s")
        .unwrap();
    let record: serde_json::Value = serde_json::from_slice(&first.payload).unwrap();
    assert_eq!(record["host"], NODE, "{record}");
    assert!(
        record["message"].as_str().unwrap().contains("NCCL INFO"),
        "{record}"
    );
    // ... and once a detector round has read it, the detector is too: the
    // times below are rsyslog's and the detector's, not start-up.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let round: Vec<DetectorRound> =
            unicron_bus::testing::read_records(&rounds, 1, Duration::from_secs(60)).await;
        if round[0].ranges.iter().any(|r| r.topic == TOPIC) {
            break;
        }
        assert!(Instant::now() < deadline, "the detector never read {TOPIC}");
    }
    // A writer of the topic claims another cluster's node (an Xid there):
    // dead-lettered with the reason. Nothing of it becomes a failure: each
    // failure read below is the next line's, of this topic's cluster.
    let dlq = Consumer::new(kafka, brokers, "t-dlq").unwrap();
    dlq.subscribe(&[&kafka.topic("dlq")]).unwrap();
    let forged = br#"{"@timestamp":"2026-12-04T16:50:06Z","host":"gpu-node-3","cluster":"site-b","message":"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."}"#;
    unicron_bus::Producer::new(kafka, brokers)
        .unwrap()
        .send_bytes(TOPIC, b"gpu-node-3", forged)
        .await
        .unwrap();
    let letters: Vec<unicron_core::DeadLetter> =
        unicron_bus::testing::read_records(&dlq, 1, Duration::from_secs(60)).await;
    assert!(
        letters[0]
            .error
            .starts_with(r#"foreign_cluster: 1 observations of cluster "site-b""#),
        "{:?}",
        letters[0]
    );
    for (line, kind) in LINES {
        let appended = Instant::now();
        append(&log, line);
        let got: Vec<FailureEvent> =
            unicron_bus::testing::read_records(&failures, 1, Duration::from_secs(60)).await;
        eprintln!(
            "rsyslog: {broker}: {kind:?} read {:.3} s after the line was appended",
            appended.elapsed().as_secs_f64()
        );
        assert_eq!(
            (got[0].kind, got[0].node.as_deref(), got[0].cluster.as_str()),
            (kind, Some(NODE), CLUSTER),
            "{:?}",
            got[0]
        );
        assert!(
            got[0]
                .evidence
                .iter()
                .any(|e| e.topic == TOPIC && line.contains(e.excerpt.trim_end_matches('…'))),
            "{:?}",
            got[0].evidence
        );
    }

    unicron_bus::testing::stop_service(stop, task, Duration::from_secs(30)).await;
}

fn append(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    writeln!(file, "{line}").unwrap();
}

/// rsyslogd in the foreground on the shipped configuration, pointed at
/// this test's broker, files and host name; killed on drop.
struct Rsyslogd(Child);

impl Rsyslogd {
    fn start(dir: &Path, logs: &Path, brokers: &str) -> Rsyslogd {
        let shipped = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/rsyslog/60-unicron.conf"
        ))
        .unwrap();
        let brokers_list = brokers
            .split(',')
            .map(|b| format!("\"{b}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let config = shipped
            .replace(
                r#"broker=["kafka-1:9092", "kafka-2:9092", "kafka-3:9092"]"#,
                &format!("broker=[{brokers_list}]"),
            )
            .replace(
                "/var/log/training/*.log",
                &format!("{}/*.log", logs.display()),
            );
        assert_ne!(config, shipped, "the shipped configuration changed shape");
        let work = dir.join("rsyslog-work");
        std::fs::create_dir(&work).unwrap();
        let path = dir.join("rsyslog.conf");
        std::fs::write(
            &path,
            format!(
                "global(workDirectory=\"{}\" localHostname=\"{NODE}\")\n{config}",
                work.display()
            ),
        )
        .unwrap();
        let rsyslogd = which("rsyslogd").unwrap_or_else(|| {
            panic!("rsyslogd is needed (apt-get install rsyslog rsyslog-kafka; ./dev test installs them)")
        });
        let child = Command::new(rsyslogd)
            .env_remove("LD_LIBRARY_PATH") // Debian's librdkafka, not the build's
            .arg("-n")
            .arg("-f")
            .arg(&path)
            .arg("-i")
            .arg(dir.join("rsyslogd.pid"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        Rsyslogd(child)
    }
}

impl Drop for Rsyslogd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn which(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/sbin", "/usr/bin", "/usr/local/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}
