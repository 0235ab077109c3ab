//! The standalone-broker group: unicron's services as separate processes
//! on tansu 0.6.0 (a Kafka-protocol broker, not the embedded one). Here
//! TLS and SASL; the chaos scenario, with the services killed while they
//! work, is tools/chaos/tests/standalone.rs (docs/chaos.md).
//!
//! `./dev test` installs tansu and sets `TANSU`; under CI a missing tansu
//! fails the test, elsewhere it is skipped with a message. Run the group
//! alone with `cargo test --workspace --test standalone`.

mod common;

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Running, spawn_listening};

/// A tansu process on loopback with SQLite storage in `dir`, advertising
/// `advertised` to clients.
fn start_tansu(
    tansu: &Path,
    dir: &Path,
    addr: SocketAddr,
    advertised: SocketAddr,
    extra: &[&str],
) -> Running {
    let log = std::fs::File::create(dir.join("tansu.log")).unwrap();
    let mut command = Command::new(tansu);
    command
        .args(["broker", "--listener-url", &format!("tcp://{addr}")])
        .args(["--advertised-listener-url", &format!("tcp://{advertised}")])
        .args(["--storage-engine", "sqlite://tansu.db"])
        .args(extra)
        .current_dir(dir)
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    spawn_listening(&mut command, addr, Duration::from_secs(30))
}

/// Runs `command` to its end and asserts it succeeded; its output.
fn run_ok(command: &mut Command) -> std::process::Output {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{:?}:\n{}\n{}",
        command.get_program(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn sasl_ssl_config(path: &Path, addr: SocketAddr, password: &str, ca: &Path) {
    std::fs::write(
        path,
        format!(
            r#"[kafka]
brokers = "{addr}"
security.protocol = "SASL_SSL"
ssl.ca.location = "{ca}"
sasl.mechanism = "SCRAM-SHA-512"
sasl.username = "unicron"
sasl.password = "{password}"
[metrics]
enabled = false
[status]
enabled = false
# The loop below runs the simulator at 20x: the default 1 s of lateness
# would be 50 ms of real jitter between partitions, which a broker behind a
# TLS terminator exceeds (heartbeats then look late). 2 s of real jitter:
[detector.tuning]
allowed_lateness_s = 40.0
"#,
            ca = ca.display()
        ),
    )
    .unwrap();
}

/// A TLS terminator (socat) in front of a plaintext port, so clients speak
/// TLS to the broker: tansu 0.6.0 cannot start its own TLS listener (its
/// command line refuses `--cert` with `--key`).
fn start_tls_front(listen: SocketAddr, to: SocketAddr, cert: &Path, key: &Path) -> Running {
    let log = std::fs::File::create(cert.with_file_name("socat.log")).unwrap();
    let mut command = Command::new("socat");
    command
        .arg(format!(
            "OPENSSL-LISTEN:{},bind=127.0.0.1,reuseaddr,fork,cert={},key={},verify=0",
            listen.port(),
            cert.display(),
            key.display()
        ))
        .arg(format!("TCP:{to}"))
        .stderr(log);
    spawn_listening(&mut command, listen, Duration::from_secs(10))
}

/// A self-signed certificate for 127.0.0.1: (cert, key).
fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    run_ok(
        Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args(["-subj", "/CN=127.0.0.1"])
            .args(["-addext", "subjectAltName=IP:127.0.0.1"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert),
    );
    (cert, key)
}

/// TLS and SASL/SCRAM settings are librdkafka properties passed through
/// `[kafka]`: against a broker that requires SCRAM behind TLS, the whole
/// loop runs with the right CA and password; a wrong password or an
/// unknown CA stops `topics create` with one line.
#[test]
fn tls_and_sasl_settings_pass_through_to_the_broker() {
    let Some(tansu) = unicron_bus::testing::tansu_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (plain, tls) = (free_addr(), free_addr());
    let (cert, key) = certificate(dir.path());
    // tansu creates users through its own Kafka API, so the user is made
    // before authentication is switched on, on the same storage.
    {
        let _open = start_tansu(&tansu, dir.path(), plain, plain, &[]);
        run_ok(
            Command::new(&tansu)
                .args(["user", "create", "--broker", &format!("tcp://{plain}")])
                .args(["--mechanism", "scram512", "unicron", "s3cret-pass"]),
        );
    }
    // Clients are sent to the TLS port by the broker's metadata.
    let _broker = start_tansu(&tansu, dir.path(), plain, tls, &["--authentication"]);
    let _front = start_tls_front(tls, plain, &cert, &key);
    let addr = tls;
    let good = dir.path().join("good.toml");
    sasl_ssl_config(&good, addr, "s3cret-pass", &cert);
    let unicron = env!("CARGO_BIN_EXE_unicron");

    let created = run_ok(
        Command::new(unicron)
            .arg("--config")
            .arg(&good)
            .args(["topics", "create"]),
    );
    let stdout = String::from_utf8_lossy(&created.stdout);
    assert!(stdout.contains("unicron.failures"), "{stdout}");

    // The whole loop through the authenticated broker: one failure is
    // detected and acted on.
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, "time_s,node,kind\n200,node-001,nccl_timeout\n").unwrap();
    let summary = dir.path().join("summary.json");
    run_ok(
        Command::new(unicron)
            .arg("--config")
            .arg(&good)
            .args(["up", "--no-archive", "--no-status", "--duration", "40s"])
            .args(["--speed", "20", "--trace"])
            .arg(&trace)
            .arg("--summary-json")
            .arg(&summary),
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["failures_detected"], 1, "{s:#}");
    assert_eq!(s["faults"][0]["resolved_by"], "reattempt", "{s:#}");

    // tansu closes the connection on a failed SCRAM exchange (Apache Kafka
    // answers with an authentication error instead), and a certificate
    // that does not verify ends the TLS handshake: either way one line
    // names the broker.
    let other_ca = tempfile::tempdir().unwrap();
    let (stranger, _) = certificate(other_ca.path());
    for (name, password, ca) in [
        ("wrong password", "wrong-pass", cert.as_path()),
        ("unknown CA", "s3cret-pass", stranger.as_path()),
    ] {
        let bad = dir.path().join("bad.toml");
        sasl_ssl_config(&bad, addr, password, ca);
        let refused = Command::new(unicron)
            .arg("--config")
            .arg(&bad)
            .args(["topics", "create"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{name} was accepted");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with(&format!("error: creating topics on {addr}: kafka:")),
            "{name}: {stderr}"
        );
    }
}

/// The planner's test cluster: 4 nodes of 8 GPUs and one elastic job.
fn cluster_setup(cluster: &str, time_ms: &mut i64) -> Vec<unicron_core::ClusterEvent> {
    use unicron_core::*;
    let event = |time_ms: i64, kind, node: Option<String>, job: Option<JobSpec>| ClusterEvent {
        cluster: cluster.into(),
        time_ms,
        kind,
        gpus: node.as_ref().map(|_| 8),
        node,
        job_id: job.as_ref().map(|_| "gpt".to_string()),
        job,
        address: None,
        launch: None,
        reason: None,
    };
    let mut events = Vec::new();
    for n in 1..=4 {
        *time_ms += 1000;
        events.push(event(
            *time_ms,
            ClusterEventKind::NodeJoined,
            Some(format!("n{n}")),
            None,
        ));
    }
    *time_ms += 1000;
    let job = JobSpec {
        weight: 1.0,
        min_gpus: 8,
        max_gpus: 32,
        unit_gpus: 8,
        dp_degree: 4,
        checkpoint_interval_s: 1800,
        throughput: vec![
            ThroughputPoint {
                gpus: 8,
                flops: 1e15,
            },
            ThroughputPoint {
                gpus: 32,
                flops: 3.8e15,
            },
        ],
    };
    events.push(event(
        *time_ms,
        ClusterEventKind::JobSubmitted,
        None,
        Some(job),
    ));
    events
}

fn failure(
    cluster: &str,
    node: &str,
    kind: unicron_core::FailureKind,
    time_ms: i64,
) -> unicron_core::FailureEvent {
    unicron_core::FailureEvent {
        id: format!("f-{cluster}-{time_ms}"),
        cluster: cluster.into(),
        node: Some(node.into()),
        gpu: None,
        job: None,
        rank: None,
        kind,
        severity: kind.default_severity(),
        method: unicron_core::DetectionMethod::LogRule,
        rule: None,
        evidence: vec![],
        first_evidence_ms: time_ms - 100,
        detected_ms: time_ms,
    }
}

/// Three planner processes in one consumer group share twelve clusters on
/// tansu; one is SIGKILLed between two rounds of failures and restarted.
/// Partitions move; their new owners take them over from checkpoints: every
/// failure is decided once, each cluster's decisions stay in input order,
/// the decisions after the kill follow from the killed planner's state, and
/// replaying the whole log finds no divergence.
#[test]
fn planners_share_clusters_and_take_over_from_a_killed_one() {
    use unicron_core::{Decision, FailureKind};
    let Some(tansu) = unicron_bus::testing::tansu_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let _broker = start_tansu(&tansu, dir.path(), addr, addr, &[]);
    let unicron = env!("CARGO_BIN_EXE_unicron");
    let key = dir.path().join("planner.key");
    run_ok(
        Command::new(unicron)
            .args(["keys", "generate", "--out"])
            .arg(&key),
    );
    let config = dir.path().join("unicron.toml");
    std::fs::write(
        &config,
        format!(
            r#"[kafka]
brokers = "{addr}"
# tansu 0.6.0: see tools/chaos/src/main.rs for why each of these is set.
enable.idempotence = false
max.in.flight.requests.per.connection = 1
max.poll.interval.ms = 20000
session.timeout.ms = 6000
heartbeat.interval.ms = 1000
[kafka.retention_ms]
cluster = 3153600000000
[metrics]
enabled = false
[status]
enabled = false
[planner]
key_id = "t"
signing_key_file = "{key}"
checkpoint_every_decisions = 4
[planner.tuning]
max_isolations_per_hour = 100
"#,
            key = key.display()
        ),
    )
    .unwrap();
    run_ok(
        Command::new(unicron)
            .arg("--config")
            .arg(&config)
            .args(["topics", "create"]),
    );
    let planner = |name: &str| {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(dir.path().join(format!("{name}.log")))
            .unwrap();
        let child = Command::new(unicron)
            .arg("--config")
            .arg(&config)
            .arg("planner")
            .env("UNICRON_PLANNER__STATE_DIR", dir.path().join(name))
            .env("RUST_LOG", "info")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Running(child)
    };
    let mut planners: Vec<Running> = ["p0", "p1", "p2"].iter().map(|n| planner(n)).collect();

    let kafka = unicron_bus::KafkaConfig {
        brokers: Some(addr.to_string()),
        ..unicron_bus::KafkaConfig::default()
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let producer = unicron_bus::Producer::new(&kafka, &addr.to_string()).unwrap();
    let clusters: Vec<String> = (0..12).map(|i| format!("c{i:02}")).collect();
    let mut time_ms = 1_764_000_000_000;
    let brokers = addr.to_string();
    let send_round = |kind: FailureKind, node: &str, time_ms: &mut i64| -> Vec<String> {
        *time_ms += 60_000;
        runtime.block_on(async {
            let mut ids = Vec::new();
            for cluster in &clusters {
                let f = failure(cluster, node, kind, *time_ms);
                ids.push(f.id.clone());
                producer
                    .send(
                        "unicron.failures",
                        cluster,
                        &f,
                        &unicron_bus::AvroCodec::default(),
                    )
                    .await
                    .unwrap();
            }
            ids
        })
    };
    let decided = |ids: &[String]| {
        let decisions: Vec<Decision> = common::read(&brokers, "unicron.decisions");
        let answered = ids
            .iter()
            .filter(|id| decisions.iter().any(|d| d.trigger.ref_id == **id))
            .count();
        (answered == ids.len()).then_some(decisions)
    };
    runtime.block_on(async {
        for cluster in &clusters {
            for event in cluster_setup(cluster, &mut time_ms) {
                producer
                    .send(
                        "unicron.cluster",
                        cluster,
                        &event,
                        &unicron_bus::AvroCodec::default(),
                    )
                    .await
                    .unwrap();
            }
        }
    });
    let logs = || -> String {
        ["p0", "p1", "p2"]
            .iter()
            .map(|n| {
                let log = std::fs::read_to_string(dir.path().join(format!("{n}.log")));
                format!("--- {n}\n{}", log.unwrap_or_default())
            })
            .collect()
    };
    let wait_decided = |what: &str, ids: &[String]| -> Vec<Decision> {
        let started = std::time::Instant::now();
        loop {
            if let Some(decisions) = decided(ids) {
                return decisions;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "timed out waiting for {what}:\n{}",
                logs()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    let first = send_round(FailureKind::CudaError, "n1", &mut time_ms);
    wait_decided("the first round's decisions", &first);

    // Killed, and restarted on its store by its supervisor. Its old and new
    // member ids sort differently, so partitions move between the planners
    // and their new owners take them over. (On tansu 0.6.0 a killed member
    // that nobody replaces keeps its partitions: tansu starts no rebalance
    // when its session expires, Kafka does; docs/chaos.md.)
    common::signal(planners[0].0.id() as i32, "KILL");
    let _ = planners[0].0.wait();
    planners[0] = planner("p0");
    let second = send_round(FailureKind::EccError, "n3", &mut time_ms);
    wait_decided("the second round's decisions", &second);
    let third = send_round(FailureKind::NcclTimeout, "n4", &mut time_ms);
    let decisions = wait_decided("the third round's decisions", &third);
    for p in &mut planners[1..] {
        common::signal(p.0.id() as i32, "TERM");
        let _ = p.0.wait();
    }
    let logs = logs();

    // Each failure decided once (a re-published decision has the same id).
    let mut by_failure: std::collections::BTreeMap<&str, BTreeSet<&str>> = Default::default();
    for d in &decisions {
        by_failure
            .entry(d.trigger.ref_id.as_str())
            .or_default()
            .insert(d.id.as_str());
    }
    for id in first.iter().chain(&second).chain(&third) {
        assert_eq!(
            by_failure[id.as_str()].len(),
            1,
            "{id}: {:?}\n{logs}",
            by_failure[id.as_str()]
        );
    }
    // Each cluster's decisions follow its inputs' order.
    let mut seen = BTreeSet::new();
    let mut last: std::collections::BTreeMap<(&str, &str), i64> = Default::default();
    for d in decisions.iter().filter(|d| seen.insert(d.id.as_str())) {
        let at = last
            .entry((d.cluster.as_str(), d.trigger.topic.as_str()))
            .or_insert(-1);
        assert!(d.trigger.offset > *at, "{} out of order\n{logs}", d.id);
        *at = d.trigger.offset;
    }
    // After the kill the state still says what each cluster runs.
    for d in decisions
        .iter()
        .filter(|d| second.contains(&d.trigger.ref_id))
    {
        assert!(
            d.reason.contains("isolate n3"),
            "{}: {}\n{logs}",
            d.cluster,
            d.reason
        );
    }
    for d in decisions
        .iter()
        .filter(|d| third.contains(&d.trigger.ref_id))
    {
        assert!(
            d.reason.contains("reattempt"),
            "{}: {}\n{logs}",
            d.cluster,
            d.reason
        );
    }
    assert!(
        logs.contains("took over partition") && logs.contains("checkpoint=true"),
        "no partition was taken over from a checkpoint:\n{logs}"
    );
    assert!(!logs.contains("not reproduced"), "{logs}");

    // The planner's decisions replay exactly. (The failures were written
    // by hand, with no evidence for the detector's half of replay.)
    let report = dir.path().join("replay.json");
    Command::new(unicron)
        .arg("--config")
        .arg(&config)
        .args(["replay", "--from-kafka", "--json"])
        .arg(&report)
        .output()
        .unwrap();
    let replay: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(replay["decisions"]["diverged"], 0, "{replay:#}");
    assert!(
        replay["decisions"]["compared"].as_u64().unwrap() >= 12 * 8,
        "{replay:#}"
    );
}
