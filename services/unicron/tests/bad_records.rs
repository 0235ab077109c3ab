//! No record stops a service: while `unicron up --no-sim` runs (broker,
//! detector, planner, archiver), garbage and valid-but-absurd records go to
//! every topic the detector and the planner read (negative sizes, a job
//! whose minimum exceeds its maximum, unknown clusters and commands, times
//! centuries off, half a megabyte of one line, bytes that are no Avro). Every
//! service keeps running, the unusable records are dead-lettered with the
//! reason, and a real fault sent afterwards is detected and decided.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{now_ms, read, up_no_sim, wait_for};
use unicron_bus::Producer;
use unicron_codec::{AvroCodec, KafkaConfig, schemas::AvroRecord};
use unicron_core::*;

const CLUSTER: &str = "c-bad";

async fn send<T: AvroRecord>(producer: &Producer, topic: &str, key: &str, record: &T) {
    producer
        .send(topic, key, record, &AvroCodec::default())
        .await
        .unwrap();
}

fn log(node: &str, time_ms: i64, line: String) -> LogRecord {
    LogRecord {
        cluster: CLUSTER.into(),
        node: node.into(),
        time_ms,
        source: "kernel".into(),
        job: None,
        rank: None,
        gpu: None,
        line,
        attributes: BTreeMap::new(),
    }
}

fn job(min_gpus: i32, max_gpus: i32) -> JobSpec {
    JobSpec {
        weight: 1.0,
        min_gpus,
        max_gpus,
        unit_gpus: 8,
        dp_degree: 2,
        checkpoint_interval_s: 1800,
        throughput: vec![
            ThroughputPoint {
                gpus: 8,
                flops: 1e15,
            },
            ThroughputPoint {
                gpus: 16,
                flops: 1.9e15,
            },
        ],
    }
}

#[test]
fn garbage_and_absurd_records_on_every_input_stop_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut up, brokers) = up_no_sim(dir, None);
    let kafka = KafkaConfig::default();
    let topic = |name: &str| kafka.topic(name);
    let t = now_ms();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let bad = runtime.block_on(async {
        let producer = Producer::new(&kafka, &brokers).unwrap();
        let mut bad = 0;
        // Bytes that are no Avro record, on every input topic.
        for name in [
            "telemetry",
            "logs",
            "agent",
            "failures",
            "cluster",
            "command-results",
        ] {
            producer
                .send_bytes(&topic(name), b"x", &[0xff, 0x00, 0xfe, 0x7f])
                .await
                .unwrap();
            bad += 1;
        }
        // Valid Avro, absurd content.
        send(
            &producer,
            &topic("logs"),
            "n1",
            &log("n1", -5, "Xid 79 from before the epoch".into()),
        )
        .await;
        send(
            &producer,
            &topic("logs"),
            "n1",
            &LogRecord {
                cluster: String::new(),
                ..log("n1", t, "a record of no cluster".into())
            },
        )
        .await;
        bad += 2;
        let mut far = AgentEvent::new(CLUSTER, "n1", i64::MAX / 2, AgentEventKind::Heartbeat);
        far.iteration = Some(-3);
        send(&producer, &topic("agent"), "n1", &far).await;
        bad += 1;
        let mut inverted = ClusterEvent::new(CLUSTER, t, ClusterEventKind::JobSubmitted);
        inverted.job_id = Some("inverted".into());
        inverted.job = Some(job(32, 8));
        send(&producer, &topic("cluster"), CLUSTER, &inverted).await;
        let mut negative = ClusterEvent::new(CLUSTER, t, ClusterEventKind::JobSubmitted);
        negative.job_id = Some("negative".into());
        negative.job = Some(JobSpec {
            weight: -1.0,
            ..job(8, 16)
        });
        send(&producer, &topic("cluster"), CLUSTER, &negative).await;
        bad += 2;
        // Unknown clusters and commands: decided or ignored, never fatal.
        send(
            &producer,
            &topic("failures"),
            "nowhere",
            &FailureEvent {
                id: "f:nowhere".into(),
                cluster: "nowhere".into(),
                node: Some("x".repeat(50_000)),
                gpu: Some(-4),
                job: None,
                rank: Some(-1),
                kind: FailureKind::EccError,
                severity: Severity::Sev1,
                method: DetectionMethod::LogRule,
                rule: None,
                evidence: vec![],
                first_evidence_ms: t,
                detected_ms: t,
                slowdown: None,
            },
        )
        .await;
        send(
            &producer,
            &topic("command-results"),
            CLUSTER,
            &CommandResult {
                command_id: "c:never-sent".into(),
                cluster: CLUSTER.into(),
                time_ms: t,
                status: CommandStatus::Succeeded,
                reason: None,
                duration_ms: -10,
                executor: "nobody".into(),
                node: None,
            },
        )
        .await;
        // Half a megabyte of one line: classified, its excerpt bounded.
        send(
            &producer,
            &topic("logs"),
            "n1",
            &log("n1", t, "NCCL WARN ".to_string() + &"x".repeat(500_000)),
        )
        .await;

        // Then a real cluster and a real fault.
        for (i, node) in ["n1", "n2"].into_iter().enumerate() {
            let mut joined = ClusterEvent::new(CLUSTER, t + i as i64, ClusterEventKind::NodeJoined);
            joined.node = Some(node.into());
            joined.gpus = Some(8);
            send(&producer, &topic("cluster"), CLUSTER, &joined).await;
        }
        let mut submitted = ClusterEvent::new(CLUSTER, t + 10, ClusterEventKind::JobSubmitted);
        submitted.job_id = Some("gpt".into());
        submitted.job = Some(job(8, 16));
        send(&producer, &topic("cluster"), CLUSTER, &submitted).await;
        send(
            &producer,
            &topic("logs"),
            "n2",
            &log(
                "n2",
                t + 2_000,
                "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1943, GPU has fallen off the bus."
                    .into(),
            ),
        )
        .await;
        bad
    });

    let decided = wait_for("the real fault decided", Duration::from_secs(90), || {
        let failure = read::<FailureEvent>(&brokers, &topic("failures"))
            .into_iter()
            .find(|f| f.cluster == CLUSTER && f.node.as_deref() == Some("n2"))?;
        read::<Decision>(&brokers, &topic("decisions"))
            .into_iter()
            .find(|d| d.trigger.ref_id == failure.id)
    });
    assert!(decided.reason.contains("n2"), "{}", decided.reason);
    let letters = wait_for(
        "every unusable record dead-lettered",
        Duration::from_secs(60),
        || {
            let letters = read::<DeadLetter>(&brokers, &topic("dlq"));
            (letters.len() >= bad).then_some(letters)
        },
    );
    for letter in &letters {
        assert!(!letter.error.is_empty(), "{letter:?}");
        assert!(
            ["detector", "planner", "archiver"].contains(&letter.service.as_str()),
            "{letter:?}"
        );
    }
    let reasons: Vec<String> = letters
        .iter()
        .map(|l| format!("{} {}: {}", l.service, l.source_topic, l.error))
        .collect();
    let said = |what: &str| reasons.iter().any(|r| r.contains(what));
    assert!(said("job inverted"), "{reasons:#?}");
    assert!(said("job negative"), "{reasons:#?}");
    assert!(said("no cluster"), "{reasons:#?}");
    assert!(up.0.try_wait().unwrap().is_none(), "up is still running");
    println!(
        "{} dead letters, the real fault decided: {}",
        letters.len(),
        decided.reason
    );

    // Replay agrees on everything but the failure no detector derived
    // (this test wrote it to the failures topic itself).
    common::signal(up.0.id() as i32, "INT");
    let _ = up.0.wait();
    let report = dir.join("replay.json");
    std::process::Command::new(env!("CARGO_BIN_EXE_unicron"))
        .args(["replay", "--from-archive"])
        .arg(dir.join("run"))
        .arg("--json")
        .arg(&report)
        .output()
        .unwrap();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(report["decisions"]["diverged"], 0, "{report:#}");
    assert_eq!(report["failures"]["diverged"], 1, "{report:#}");
    assert_eq!(
        report["failures"]["first_divergence"]["id"], "f:nowhere",
        "{report:#}"
    );
}
