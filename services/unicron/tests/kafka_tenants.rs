//! Tenants on Apache Kafka with its KRaft `StandardAuthorizer`: every
//! service and each cluster's writers as SCRAM principals of their own,
//! under exactly the ACLs `unicron acls` prints (applied with Kafka's own
//! `kafka-acls` tool), with `kafka.cluster_topics`. Cluster a's agent
//! tries to speak for cluster b; Kafka refuses what its ACLs cover, the
//! ingress dead-letters the rest, and b's real failure is decided and
//! carried out as usual. Needs `UNICRON_KAFKA_LIBS` (./dev test) and
//! openssl; run alone with `cargo test -p unicron --test kafka_tenants`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Running, wait_for};
use unicron_bus::testing::kafka::{KafkaCluster, KafkaOptions, SaslSsl, kafka_or_skip};
use unicron_codec::config::PropertyValue;
use unicron_codec::{AvroCodec, KafkaConfig, Topic, Topics};
use unicron_core::{
    ClusterEvent, ClusterEventKind, Command as UnicronCommand, CommandResult, DeadLetter, Decision,
    LogRecord,
};

const ADMIN: &str = "admin";
const PRINCIPALS: [&str; 7] = [
    "unicron-ingress",
    "unicron-detector",
    "unicron-planner",
    "unicron-archiver",
    "unicron-executor-b",
    "unicron-agent-a",
    "unicron-agent-b",
];

fn password(user: &str) -> String {
    format!("pw-{user}-0123456789")
}

/// What a client of `user` connects with.
fn kafka_as(user: &str, addr: &str, ca: &Path) -> KafkaConfig {
    let mut kafka = KafkaConfig {
        brokers: Some(addr.into()),
        cluster_topics: true,
        replication_factor: 1,
        ..KafkaConfig::default()
    };
    for (key, value) in [
        ("security.protocol", "SASL_SSL".to_string()),
        ("ssl.ca.location", ca.display().to_string()),
        ("sasl.mechanism", "SCRAM-SHA-512".into()),
        ("sasl.username", user.into()),
        ("sasl.password", password(user)),
    ] {
        kafka
            .properties
            .insert(key.into(), PropertyValue::Text(value));
    }
    kafka
}

/// The configuration file of `user`'s service.
fn config_file(dir: &Path, user: &str, addr: &str, ca: &Path, key: &Path, public: &str) -> PathBuf {
    let path = dir.join(format!("{user}.toml"));
    std::fs::write(
        &path,
        format!(
            r#"[kafka]
brokers = "{addr}"
cluster_topics = true
replication_factor = 1
security.protocol = "SASL_SSL"
ssl.ca.location = "{ca}"
sasl.mechanism = "SCRAM-SHA-512"
sasl.username = "{user}"
sasl.password = "{password}"
session.timeout.ms = 6000
heartbeat.interval.ms = 1000
[metrics]
enabled = false
[status]
enabled = false
[planner]
key_id = "t"
signing_key_file = "{key}"
state_dir = "{dir}/planner"
[planner.tuning]
max_isolations_per_hour = 100
[executor]
cluster = "b"
name = "executor-b"
state_dir = "{dir}/executor"
public_keys = {{ t = "{public}" }}
[executor.backend]
kind = "exec"
program = "true"
[archiver]
dir = "{dir}/archive"
"#,
            ca = ca.display(),
            password = password(user),
            key = key.display(),
            dir = dir.display(),
        ),
    )
    .unwrap();
    path
}

fn spawn(dir: &Path, config: &Path, service: &str) -> Running {
    let log = std::fs::File::create(dir.join(format!("{service}.log"))).unwrap();
    Running(
        Command::new(env!("CARGO_BIN_EXE_unicron"))
            .arg("--config")
            .arg(config)
            .arg(service)
            .env("RUST_LOG", "info")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

fn logs(dir: &Path) -> String {
    ["ingress", "detector", "planner", "executor", "archiver"]
        .iter()
        .map(|s| {
            let log = std::fs::read_to_string(dir.join(format!("{s}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            format!(
                "--- {s}\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect()
}

fn read<T: unicron_codec::schemas::AvroRecord>(
    admin: &KafkaConfig,
    addr: &str,
    topic: &str,
) -> Vec<T> {
    let codec = AvroCodec::<T>::default();
    unicron_bus::whole_topic::read_topic(admin, addr, topic)
        .unwrap_or_default()
        .iter()
        .filter_map(|r| codec.decode(&r.payload).ok())
        .collect()
}

/// `unicron acls` applied line by line with Kafka's `kafka-acls` (the
/// tool's own class, from the test cluster's jars).
fn apply_acls(
    cluster: &KafkaCluster,
    dir: &Path,
    admin_config: &Path,
    addr: &str,
    ca: &Path,
) -> usize {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    cluster
        .tool_script(
            "org.apache.kafka.tools.AclCommand",
            &bin.join("kafka-acls.sh"),
        )
        .unwrap();
    let properties = dir.join("admin.properties");
    std::fs::write(
        &properties,
        format!(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{ADMIN}\" password=\"{}\";\n\
             ssl.truststore.type=PEM\nssl.truststore.location={}\n",
            password(ADMIN),
            ca.display()
        ),
    )
    .unwrap();
    let printed = Command::new(env!("CARGO_BIN_EXE_unicron"))
        .arg("--config")
        .arg(admin_config)
        .args(["acls", "--cluster", "a", "--cluster", "b"])
        .output()
        .unwrap();
    assert!(printed.status.success(), "{printed:?}");
    let lines: Vec<String> = String::from_utf8(printed.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    // Two at a time: each is a JVM.
    for pair in lines.chunks(2) {
        let children: Vec<_> = pair
            .iter()
            .map(|line| {
                Command::new("sh")
                    .args(["-c", line])
                    .env(
                        "PATH",
                        format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
                    )
                    .env("BOOTSTRAP", addr)
                    .env("ADMIN_CONFIG", &properties)
                    .output()
            })
            .collect();
        for (line, out) in pair.iter().zip(children) {
            let out = out.unwrap();
            assert!(
                out.status.success(),
                "{line}\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    lines.len()
}

#[test]
fn no_cluster_can_speak_for_another_under_generated_acls() {
    let Some(libs) = kafka_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (cert, key) = common::certificate(dir);
    let options = KafkaOptions {
        brokers: 1,
        sasl_ssl: Some(SaslSsl {
            keystore_pem: common::keystore(dir, &cert, &key),
            user: ADMIN.into(),
            password: password(ADMIN),
            more_users: PRINCIPALS
                .iter()
                .map(|u| (u.to_string(), password(u)))
                .collect(),
            authorizer: true,
        }),
        ..KafkaOptions::default()
    };
    let cluster = KafkaCluster::start(&libs, Some(&dir.join("kafka")), &options)
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = cluster.bootstrap_servers();
    let unicron = env!("CARGO_BIN_EXE_unicron");
    let signing_key = dir.join("planner.key");
    let generated = Command::new(unicron)
        .args(["keys", "generate", "--out"])
        .arg(&signing_key)
        .output()
        .unwrap();
    assert!(generated.status.success(), "{generated:?}");
    let public = String::from_utf8(generated.stdout).unwrap();
    let public = public
        .split_whitespace()
        .find(|w| w.len() == 64 && w.chars().all(|c| c.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("no public key in {public:?}"))
        .to_string();
    let config = |user: &str| config_file(dir, user, &addr, &cert, &signing_key, &public);
    let admin_config = config(ADMIN);
    let created = Command::new(unicron)
        .arg("--config")
        .arg(&admin_config)
        .args(["topics", "create"])
        .output()
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    let started = Instant::now();
    let applied = apply_acls(&cluster, dir, &admin_config, &addr, &cert);
    println!(
        "{applied} kafka-acls lines applied in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let _services: Vec<Running> = [
        ("unicron-ingress", "ingress"),
        ("unicron-detector", "detector"),
        ("unicron-planner", "planner"),
        ("unicron-executor-b", "executor"),
        ("unicron-archiver", "archiver"),
    ]
    .iter()
    .map(|(user, service)| spawn(dir, &config(user), service))
    .collect();

    let admin = kafka_as(ADMIN, &addr, &cert);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let agent_a = kafka_as("unicron-agent-a", &addr, &cert);
    let agent_b = kafka_as("unicron-agent-b", &addr, &cert);
    let t0 = common::now_ms();
    let events = AvroCodec::<ClusterEvent>::default();
    let lines = AvroCodec::<LogRecord>::default();
    let log = |cluster: &str, node: &str, time_ms: i64| LogRecord {
        cluster: cluster.into(),
        node: node.into(),
        time_ms,
        source: "kernel".into(),
        job: None,
        rank: None,
        gpu: None,
        line: "NVRM: Xid (PCI:0000:3b:00): 79, pid=1943, GPU has fallen off the bus.".into(),
        attributes: Default::default(),
    };
    let (refused_foreign_topic, refused_shared_topic) = runtime.block_on(async {
        // Each writer makes its cluster's own topics (Create on its prefix).
        for (kafka, cluster) in [(&agent_a, "a"), (&agent_b, "b")] {
            unicron_bus::admin::ensure_cluster_topics(kafka, &addr, cluster)
                .await
                .unwrap_or_else(|e| panic!("{cluster}'s writer makes its topics: {e}"));
        }
        let (a, b) = (Topics::bound(&agent_a, "a"), Topics::bound(&agent_b, "b"));
        let producer_a = unicron_bus::Producer::new(&agent_a, &addr).unwrap();
        let producer_b = unicron_bus::Producer::new(&agent_b, &addr).unwrap();
        // Cluster b as its agents announce it: 4 nodes, one job.
        let mut time_ms = t0;
        for n in 1..=4 {
            time_ms += 10;
            let joined = unicron_core::testing::node_joined("b", &format!("n{n}"), 8, time_ms);
            producer_b
                .send_bytes(
                    b.of::<ClusterEvent>(),
                    &b.key(Topic::Cluster, b"b"),
                    &events.encode(&joined).unwrap(),
                )
                .await
                .unwrap();
        }
        let job = unicron_core::testing::job_spec(8, 32, 4, &[(8, 1e15), (32, 3.8e15)]);
        let submitted = unicron_core::testing::job_submitted("b", "gpt", job, time_ms + 10);
        producer_b
            .send_bytes(
                b.of::<ClusterEvent>(),
                &b.key(Topic::Cluster, b"b"),
                &events.encode(&submitted).unwrap(),
            )
            .await
            .unwrap();

        // Forged by a's agent on a's own topics, which Kafka lets it write:
        // b's n2 down, and an Xid "from" b's n3.
        let mut down = ClusterEvent::new("b", t0 + 1_000, ClusterEventKind::NodeDown);
        down.node = Some("n2".into());
        producer_a
            .send_bytes(
                a.of::<ClusterEvent>(),
                &a.key(Topic::Cluster, b"b"),
                &events.encode(&down).unwrap(),
            )
            .await
            .unwrap();
        producer_a
            .send_bytes(
                a.of::<LogRecord>(),
                &a.key(Topic::Logs, b"n3"),
                &lines.encode(&log("b", "n3", t0 + 1_000)).unwrap(),
            )
            .await
            .unwrap();
        // And on topics Kafka does not let it write: b's own, and the
        // shared one the ingress fills.
        let refused_foreign_topic = producer_a
            .send_bytes(
                b.of::<LogRecord>(),
                &b.key(Topic::Logs, b"n3"),
                &lines.encode(&log("b", "n3", t0 + 1_001)).unwrap(),
            )
            .await
            .map(|_| ())
            .unwrap_err()
            .to_string();
        let refused_shared_topic = producer_a
            .send_bytes("unicron.cluster", b"b", &events.encode(&down).unwrap())
            .await
            .map(|_| ())
            .unwrap_err()
            .to_string();
        // Then b's real failure, from b's own agent.
        producer_b
            .send_bytes(
                b.of::<LogRecord>(),
                &b.key(Topic::Logs, b"n1"),
                &lines.encode(&log("b", "n1", t0 + 2_000)).unwrap(),
            )
            .await
            .unwrap();
        (refused_foreign_topic, refused_shared_topic)
    });
    for (what, error) in [
        ("a writing b's topic", &refused_foreign_topic),
        ("a writing the shared cluster topic", &refused_shared_topic),
    ] {
        assert!(error.to_lowercase().contains("authoriz"), "{what}: {error}");
    }

    // b's failure is decided, commanded, carried out by b's executor and
    // its result passed back by the ingress.
    let decided = wait_for(
        "b's Xid on n1 decided and its commands carried out",
        Duration::from_secs(180),
        || {
            let decisions: Vec<Decision> = read(&admin, &addr, "unicron.decisions");
            let results: Vec<CommandResult> = read(&admin, &addr, "unicron.command-results");
            let decision = decisions
                .into_iter()
                .find(|d| d.cluster == "b" && d.reason.contains("n1"))?;
            let commands: Vec<UnicronCommand> = read(&admin, &addr, "unicron.commands");
            let carried_out = commands
                .iter()
                .filter(|c| c.decision_id == decision.id)
                .any(|c| results.iter().any(|r| r.command_id == c.id));
            carried_out.then_some(decision)
        },
    );
    let decisions: Vec<Decision> = read(&admin, &addr, "unicron.decisions");
    let commands: Vec<UnicronCommand> = read(&admin, &addr, "unicron.commands");
    let letters: Vec<DeadLetter> = read(&admin, &addr, "unicron.dlq");
    let context = || format!("{decisions:#?}\n{letters:#?}\n{}", logs(dir));
    // n1 is isolated; n2 and n3, which a's forgeries named, are not, and
    // the job is placed on them.
    use unicron_core::CommandAction;
    let isolated: Vec<&str> = commands
        .iter()
        .filter(|c| c.cluster == "b" && c.action == CommandAction::IsolateNode)
        .flat_map(|c| c.nodes.iter().map(String::as_str))
        .collect();
    assert_eq!(isolated, ["n1"], "{}", context());
    let placed = commands
        .iter()
        .rev()
        .find(|c| c.cluster == "b" && c.action == CommandAction::Resume)
        .unwrap_or_else(|| panic!("no resume for b\n{}", context()));
    for node in ["n2", "n3"] {
        assert!(
            placed.nodes.iter().any(|n| n == node),
            "{placed:?}\n{}",
            context()
        );
    }
    let failures: Vec<unicron_core::FailureEvent> = read(&admin, &addr, "unicron.failures");
    assert!(
        failures
            .iter()
            .all(|f| f.cluster == "b" && f.node.as_deref() == Some("n1")),
        "{failures:#?}\n{}",
        context()
    );
    let foreign: Vec<&DeadLetter> = letters
        .iter()
        .filter(|l| l.service == "ingress" && l.error.starts_with("foreign_cluster: "))
        .collect();
    let mut sources: Vec<&str> = foreign.iter().map(|l| l.source_topic.as_str()).collect();
    sources.sort();
    assert_eq!(sources, ["unicron.in.a", "unicron.in.a"], "{}", context());
    // Reading: a's agent sees no decision and b's executor no failure
    // (Kafka hides a topic a principal may not describe, or refuses it),
    // while they are there.
    assert!(!decisions.is_empty());
    for (who, kafka, topic) in [
        ("a's agent", &agent_a, "unicron.decisions"),
        (
            "b's executor",
            &kafka_as("unicron-executor-b", &addr, &cert),
            "unicron.failures",
        ),
    ] {
        let seen = unicron_bus::whole_topic::read_topic(kafka, &addr, topic);
        assert!(
            seen.as_ref().map_or(true, |records| records.is_empty()),
            "{who} read {} records of {topic}",
            seen.map(|r| r.len()).unwrap_or_default()
        );
    }
    assert!(!read::<unicron_core::FailureEvent>(&admin, &addr, "unicron.failures").is_empty());
    println!(
        "b decided: {}; refused by Kafka: {refused_foreign_topic} / {refused_shared_topic}",
        decided.reason
    );

    // No service was refused anything it needs.
    for service in ["ingress", "detector", "planner", "executor", "archiver"] {
        let log = std::fs::read_to_string(dir.join(format!("{service}.log"))).unwrap();
        assert!(
            !log.to_lowercase().contains("authorization failed"),
            "{service} was refused:\n{log}"
        );
    }

    // What every service did is in the log: replay reproduces it.
    let report = dir.join("replay.json");
    let replay = Command::new(unicron)
        .arg("--config")
        .arg(&admin_config)
        .args(["replay", "--from-kafka", "--json"])
        .arg(&report)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("{e}: {replay:?}")),
    )
    .unwrap();
    assert_eq!(json["decisions"]["diverged"], 0, "{json:#}");
    assert!(replay.status.success(), "{json:#}\n{replay:?}");
}
