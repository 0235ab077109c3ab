//! One filled-in instance of every record type, with every optional field
//! set, and one with every optional field empty: the fixtures of the
//! codec's tests and of the crates that carry its records (feature
//! `test-util`).

use std::collections::BTreeMap;

use unicron_core::*;

use crate::schemas::{AvroRecord, RecordType};
use crate::{AvroCodec, Framing};

/// The sample of `record`, as raw Avro bytes. The match has an arm per
/// record type, so a new type does not build until it has a sample, and
/// every test that walks `RecordType::ALL` covers it.
pub fn encoded(record: RecordType, full: bool) -> Vec<u8> {
    fn raw<T: AvroRecord>(value: T) -> Vec<u8> {
        AvroCodec::<T>::new(Framing::Raw)
            .encode(&value)
            .expect("a sample encodes")
    }
    match record {
        RecordType::TelemetryBatch => raw(telemetry(full)),
        RecordType::LogRecord => raw(log(full)),
        RecordType::AgentEvent => raw(agent(full)),
        RecordType::FailureEvent => raw(failure(full)),
        RecordType::ClusterEvent => raw(cluster(full)),
        RecordType::Decision => raw(decision(full)),
        RecordType::Command => raw(command(full)),
        RecordType::CommandResult => raw(result(full)),
        RecordType::DeadLetter => raw(dead_letter(full)),
        RecordType::PlannerCheckpoint => raw(checkpoint(full)),
        RecordType::DetectorRound => raw(round(full)),
    }
}

pub fn telemetry(full: bool) -> TelemetryBatch {
    let labels: BTreeMap<String, String> = if full {
        [("Hostname", "node-3"), ("UUID", "GPU-1a2b")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    } else {
        BTreeMap::new()
    };
    TelemetryBatch {
        cluster: "c1".into(),
        node: "node-3".into(),
        source: "dcgm".into(),
        samples: vec![
            MetricSample {
                name: "DCGM_FI_DEV_XID_ERRORS".into(),
                value: 79.0,
                time_ms: 1_764_000_000_123,
                gpu: full.then_some(5),
                job: full.then(|| "gpt-13b".into()),
                rank: full.then_some(21),
                labels,
            },
            MetricSample {
                name: "DCGM_FI_DEV_GPU_TEMP".into(),
                value: -0.5,
                time_ms: 1_764_000_000_124,
                gpu: None,
                job: None,
                rank: None,
                labels: BTreeMap::new(),
            },
        ],
    }
}

pub fn log(full: bool) -> LogRecord {
    LogRecord {
        cluster: "c1".into(),
        node: "node-3".into(),
        time_ms: 1_764_000_000_000,
        source: "stderr".into(),
        job: full.then(|| "gpt-13b".into()),
        rank: full.then_some(7),
        gpu: full.then_some(2),
        line: "[Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 1800000 milliseconds before timing out.".into(),
        attributes: if full {
            [("container".to_string(), "trainer".to_string())].into()
        } else {
            BTreeMap::new()
        },
    }
}

pub fn agent(full: bool) -> AgentEvent {
    AgentEvent {
        cluster: "c1".into(),
        node: "node-3".into(),
        time_ms: 1_764_000_000_500,
        kind: if full {
            AgentEventKind::IterationDone
        } else {
            AgentEventKind::Heartbeat
        },
        job: full.then(|| "gpt-13b".into()),
        rank: full.then_some(7),
        exit_code: full.then_some(1),
        signal: full.then_some(9),
        iteration: full.then_some(1200),
        iteration_time_ms: full.then_some(1534.25),
        compute_ms: full.then_some(1210.5),
        idle_tick: false,
        worker: None,
    }
}

pub fn failure(full: bool) -> FailureEvent {
    FailureEvent {
        id: "f-logs-3-1042".into(),
        cluster: "c1".into(),
        node: full.then(|| "node-3".into()),
        gpu: full.then_some(5),
        job: full.then(|| "gpt-13b".into()),
        rank: full.then_some(21),
        kind: FailureKind::EccError,
        severity: Severity::Sev1,
        method: DetectionMethod::LogRule,
        rule: full.then(|| "xid-48".into()),
        evidence: if full {
            vec![Evidence {
                topic: "unicron.logs".into(),
                partition: 3,
                offset: 1042,
                node: Some("node-3".into()),
                excerpt: "NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, DBE".into(),
            }]
        } else {
            vec![]
        },
        first_evidence_ms: 1_764_000_000_000,
        detected_ms: 1_764_000_000_020,
        slowdown: None,
    }
}

pub fn cluster(full: bool) -> ClusterEvent {
    ClusterEvent {
        cluster: "c1".into(),
        time_ms: 1_764_000_000_000,
        kind: if full {
            ClusterEventKind::JobSubmitted
        } else {
            ClusterEventKind::NodeRepaired
        },
        node: (!full).then(|| "node-3".into()),
        gpus: (!full).then_some(8),
        job_id: full.then(|| "gpt-13b".into()),
        job: full.then(|| JobSpec {
            weight: 2.0,
            min_gpus: 16,
            max_gpus: 128,
            unit_gpus: 8,
            dp_degree: 4,
            checkpoint_interval_s: 1800,
            throughput: vec![
                ThroughputPoint {
                    gpus: 16,
                    flops: 2.1e15,
                },
                ThroughputPoint {
                    gpus: 128,
                    flops: 1.41e16,
                },
            ],
        }),
        address: None,
        launch: None,
        reason: (!full).then(|| "slurm: idle".into()),
        snapshot_address: full.then(|| "10.0.0.3:7070".into()),
        snapshots: if full {
            vec![unicron_core::SnapshotHeld {
                job: "gpt-13b".into(),
                rank: 3,
                step: 1200,
                generation: 2,
                local_world: 8,
                bytes: 1 << 30,
                replica: true,
                block_us: 0,
                step_us: 0,
                transfer_us: 412_000,
            }]
        } else {
            Vec::new()
        },
        restored: full.then(|| {
            Box::new(unicron_core::RestoreReport {
                job: "gpt-13b".into(),
                rank: 3,
                generation: 3,
                command_id: "c:1".into(),
                action: "restart".into(),
                source: "replica:node-2".into(),
                step: Some(1200),
                bytes: 1 << 30,
                restore_ms: 4200,
            })
        }),
        check: (!full).then(|| {
            Box::new(unicron_core::NodeCheck {
                command_id: Some("c:c1:unicron.cluster:0:7:0".into()),
                duration_ms: 5_400,
                failures: vec!["all-reduce: timed out after 30 s".into()],
                skipped: vec!["gpu: nvidia-smi not found".into()],
                matmul_gflops: Some(61.5),
                memory_gbps: Some(9.25),
                allreduce_gbps: None,
                peer: Some("node-4".into()),
            })
        }),
    }
}

pub fn decision(full: bool) -> Decision {
    Decision {
        id: "d-c1-failures-2-77".into(),
        cluster: "c1".into(),
        time_ms: 1_764_000_000_030,
        trigger: Trigger {
            kind: "failure".into(),
            ref_id: "f-logs-3-1042".into(),
            topic: "unicron.failures".into(),
            partition: 2,
            offset: 77,
        },
        inputs_digest: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        policy: "unicron".into(),
        policy_version: "1".into(),
        alternatives: if full {
            vec![Alternative {
                allocation: [("gpt-13b".to_string(), 56)].into(),
                waf: 6.7e15,
                objective: 5.5e20,
            }]
        } else {
            vec![]
        },
        chosen_index: full.then_some(0),
        assignment: if full {
            [(
                "gpt-13b".to_string(),
                vec!["node-1".to_string(), "node-2".to_string()],
            )]
            .into()
        } else {
            BTreeMap::new()
        },
        reason: "SEV1 ecc_error on node-3: isolate and re-plan".into(),
        command_ids: if full { vec!["cmd-1".into()] } else { vec![] },
    }
}

pub fn command(full: bool) -> Command {
    Command {
        id: "cmd-c1-failures-2-77-0".into(),
        cluster: "c1".into(),
        decision_id: "d-c1-failures-2-77".into(),
        time_ms: 1_764_000_000_030,
        action: CommandAction::Reconfigure,
        job: full.then(|| "gpt-13b".into()),
        nodes: if full {
            vec!["node-1".into(), "node-2".into()]
        } else {
            vec![]
        },
        restore_from: full.then(|| "replica:node-2".into()),
        causation: if full {
            vec!["f-logs-3-1042".into()]
        } else {
            vec![]
        },
        key_id: "dev".into(),
        signature: (0..64).collect(),
        rendezvous: None,
        snapshots: full.then(|| unicron_core::SnapshotPlan {
            step: Some(1200),
            reason: "step 1200: the newest every rank can restore".into(),
            sources: vec![unicron_core::RankSource {
                rank: 1,
                from_rank: 1,
                node: "node-2".into(),
            }],
            replica_holders: vec!["node-2".into(), "node-1".into()],
            peers: vec![unicron_core::SnapshotPeer {
                node: "node-2".into(),
                address: "10.0.0.2:7070".into(),
            }],
            interval_steps: 25,
            interval_reason: "every 25 steps (50.0 s), set by Young's interval".into(),
        }),
    }
}

pub fn result(full: bool) -> CommandResult {
    CommandResult {
        command_id: "cmd-c1-failures-2-77-0".into(),
        cluster: "c1".into(),
        time_ms: 1_764_000_000_900,
        status: if full {
            CommandStatus::Failed
        } else {
            CommandStatus::Succeeded
        },
        reason: full.then(|| "backend returned 503".into()),
        duration_ms: 870,
        executor: "executor-c1".into(),
        node: None,
    }
}

pub fn dead_letter(full: bool) -> DeadLetter {
    DeadLetter {
        source_topic: "unicron.logs".into(),
        partition: 1,
        offset: 9,
        key: full.then(|| b"node-3".to_vec()),
        payload: vec![0xff, 0x00, 0x13],
        payload_size: 3,
        error: "avro LogRecord: bad".into(),
        service: "detector".into(),
        time_ms: 0,
    }
}

pub fn checkpoint(full: bool) -> PlannerCheckpoint {
    PlannerCheckpoint {
        input_partition: 2,
        cluster: if full { String::new() } else { "c1".into() },
        state: if full {
            Vec::new()
        } else {
            b"{\"id\":\"c1\"}".to_vec()
        },
        manifest: full.then(|| CheckpointManifest {
            consumed: vec![ConsumedOffset {
                topic: "unicron.failures".into(),
                next_offset: 41,
            }],
            decisions_next_offset: 17,
            clusters: vec![CheckpointedCluster {
                cluster: "c1".into(),
                chunk_offsets: vec![3, 4],
            }],
        }),
    }
}

pub fn round(full: bool) -> unicron_core::DetectorRound {
    use unicron_core::{DetectorRound, PartitionRef, RoundRange, RoundTick};
    if !full {
        return DetectorRound {
            detector: "d1".into(),
            ..DetectorRound::default()
        };
    }
    DetectorRound {
        detector: "host-1-42".into(),
        seq: 9,
        reset: true,
        silence_held: true,
        caught_up: vec![PartitionRef {
            topic: "unicron.agent".into(),
            partition: 3,
        }],
        ranges: vec![RoundRange {
            topic: "unicron.telemetry".into(),
            partition: 1,
            first_offset: 100,
            last_offset: 131,
            last_caught_up: true,
        }],
        ticks: vec![RoundTick {
            cluster: "c1".into(),
            time_ms: 1_767_225_600_000,
        }],
        failures: vec!["f:c1:gpu_ecc:n1:1767225600000:0a1b2c3d4e5f".into()],
        behind: vec![PartitionRef {
            topic: "unicron.logs".into(),
            partition: 7,
        }],
        warm: true,
        read_ms: 1_767_225_601_250,
        rules_version: "9a3f0c1d2e4b5a60".into(),
        rules: Some("[[rule]]\nname = \"site.fan\"\n".into()),
        unclassified: vec![unicron_core::UnclassifiedTemplate {
            cluster: "c1".into(),
            template: "fan <*> stopped".into(),
            count: 3,
            first_ms: 1_767_225_600_000,
            last_ms: 1_767_225_601_000,
            nodes: vec!["n1".into()],
            jobs: vec!["gpt".into()],
            example: "fan 3 stopped".into(),
            learned: Some("gpu_driver_error".into()),
            score_permille: 912,
        }],
    }
}
