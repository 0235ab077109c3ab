//! unicron's Kafka layer on Apache Kafka itself: a three-broker KRaft
//! cluster (`unicron_bus::testing::kafka`), with the replication
//! `unicron topics create` sets up, a crash of a partition's leader under
//! the idempotent producer, and Debian's kcat (librdkafka 2.0.2, what
//! rsyslog's omkafka links) writing and reading unicron's topics.
//!
//! `./dev test` fetches Kafka's jars; under CI missing jars fail the tests,
//! elsewhere they are skipped with a message.

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use unicron_bus::Producer;
use unicron_bus::testing::kafka::{KafkaCluster, KafkaOptions, kafka_or_skip};
use unicron_codec::{KafkaConfig, Topology};

/// One cluster at a time: three JVMs each already fill two cores.
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

fn cluster() -> Option<(std::sync::MutexGuard<'static, ()>, KafkaCluster)> {
    let libs = kafka_or_skip()?;
    let guard = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = KafkaCluster::start(&libs, None, &KafkaOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    Some((guard, cluster))
}

fn payloads(kafka: &KafkaConfig, brokers: &str, topic: &str, partition: i32) -> Vec<Vec<u8>> {
    unicron_bus::whole_topic::read_topic(kafka, brokers, topic)
        .unwrap()
        .into_iter()
        .filter(|r| r.partition == partition)
        .map(|r| r.payload)
        .collect()
}

/// `topics create` gives every topic three replicas and
/// `min.insync.replicas=2`; the idempotent producer (acks=all) keeps
/// sending while the leader of its partition is SIGKILLed: every
/// acknowledged record is in the log once and in order.
#[test]
fn acknowledged_records_survive_a_crash_of_their_partitions_leader() {
    let Some((_one, mut cluster)) = cluster() else {
        return;
    };
    let brokers = cluster.bootstrap_servers();
    let kafka = KafkaConfig::default();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let topology = Topology::builtin();
    let created = runtime
        .block_on(unicron_bus::admin::ensure_topics(
            &kafka, &brokers, &topology,
        ))
        .unwrap();
    assert_eq!(created.len(), topology.topics.len());
    assert!(created.iter().all(|r| r.replicas == 3), "{created:?}");
    let again = runtime
        .block_on(unicron_bus::admin::ensure_topics(
            &kafka, &brokers, &topology,
        ))
        .unwrap();
    assert!(
        again
            .iter()
            .all(|r| r.status == unicron_bus::admin::TopicStatus::Exists && r.replicas == 3),
        "{again:?}"
    );

    let topic = kafka.topic("failures");
    let producer = Producer::new(&kafka, &brokers).unwrap();
    let send = |from: u32, to: u32| {
        runtime.block_on(async {
            for i in from..to {
                producer
                    .send_bytes_to(&topic, Some(0), b"c1", format!("record {i}").as_bytes())
                    .await
                    .unwrap_or_else(|e| panic!("record {i}: {e}"));
            }
        })
    };
    send(0, 100);
    let leader = cluster.leader(&topic, 0).expect("partition 0 has a leader");
    cluster.kill(leader);
    send(100, 200);
    let after = cluster.leader(&topic, 0).expect("a new leader");
    assert_ne!(after, leader, "leadership moved off the killed broker");

    let want: Vec<Vec<u8>> = (0..200)
        .map(|i| format!("record {i}").into_bytes())
        .collect();
    assert_eq!(payloads(&kafka, &brokers, &topic, 0), want);

    // The killed broker comes back and catches up; nothing changes.
    cluster.start_node(leader).unwrap();
    cluster.wait_in_sync(Duration::from_secs(120)).unwrap();
    assert_eq!(payloads(&kafka, &brokers, &topic, 0), want);
}

/// Debian's kcat, without cargo's library path: cargo points
/// `LD_LIBRARY_PATH` at the build's own librdkafka, which kcat would load
/// instead of Debian's.
fn kcat() -> Command {
    let mut command = Command::new("kcat");
    command.env_remove("LD_LIBRARY_PATH");
    command
}

/// Debian's kcat links Debian's librdkafka (2.0.2 on bookworm, the one
/// rsyslog's omkafka uses): it produces to a unicron topic with acks=all
/// and idempotence, unicron reads those records, and kcat reads unicron's.
#[test]
fn debian_kcat_writes_and_reads_unicron_topics() {
    let Some((_one, cluster)) = cluster() else {
        return;
    };
    let version = kcat()
        .arg("-V")
        .output()
        .expect("kcat (./dev test installs it)");
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    // `Version 1.7.1 (JSON, ..., librdkafka 2.0.2 builtin.features=...)`
    let librdkafka = version
        .split_once("librdkafka ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map(str::to_string)
        .unwrap_or_else(|| panic!("kcat -V names no librdkafka:\n{version}"));
    let (_, ours) = rdkafka::util::get_rdkafka_version();
    assert_ne!(
        librdkafka, ours,
        "kcat runs the build's librdkafka, not the system's"
    );
    eprintln!("kcat with librdkafka {librdkafka} (unicron's: {ours})");

    let brokers = cluster.bootstrap_servers();
    let kafka = KafkaConfig::default();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(unicron_bus::admin::ensure_topics(
            &kafka,
            &brokers,
            &Topology::builtin(),
        ))
        .unwrap();

    let logs = kafka.topic("logs");
    let lines: Vec<String> = (0..20).map(|i| format!("node-{i:03}:line {i}")).collect();
    let mut child = kcat()
        .args(["-P", "-b", &brokers, "-t", &logs, "-K", ":"])
        .args(["-X", "acks=all", "-X", "enable.idempotence=true"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{}", lines.join("\n")).unwrap();
    }
    assert!(child.wait().unwrap().success(), "kcat -P failed");
    let mut read: Vec<String> = unicron_bus::whole_topic::read_topic(&kafka, &brokers, &logs)
        .unwrap()
        .into_iter()
        .map(|r| {
            format!(
                "{}:{}",
                String::from_utf8_lossy(&r.key.unwrap_or_default()),
                String::from_utf8_lossy(&r.payload)
            )
        })
        .collect();
    read.sort();
    let mut want = lines.clone();
    want.sort();
    assert_eq!(read, want, "what kcat produced, as unicron reads it");

    let decisions = kafka.topic("decisions");
    let producer = Producer::new(&kafka, &brokers).unwrap();
    runtime.block_on(async {
        for i in 0..10 {
            producer
                .send_bytes(
                    &decisions,
                    format!("c{i}").as_bytes(),
                    format!("d{i}").as_bytes(),
                )
                .await
                .unwrap();
        }
    });
    let out = kcat()
        .args(["-C", "-b", &brokers, "-t", &decisions, "-e", "-q"])
        .args(["-f", "%k=%s\n"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    got.sort();
    let want: Vec<String> = (0..10).map(|i| format!("c{i}=d{i}")).collect();
    assert_eq!(got, want, "what unicron produced, as kcat reads it");
}
