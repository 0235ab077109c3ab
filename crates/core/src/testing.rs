//! Builders of records for tests and benchmarks (feature `test-util`): a
//! field added to a record is added here once, not in every test tree.

use crate::records::{
    ClusterEvent, ClusterEventKind, DetectionMethod, FailureEvent, FailureKind, JobSpec,
    ThroughputPoint,
};

/// A failure of `kind` on `node` of `cluster`, first seen at
/// `first_evidence_ms` and found at `detected_ms` by a log rule, with the
/// kind's default severity and nothing else known.
pub fn failure(
    id: impl Into<String>,
    cluster: &str,
    node: &str,
    kind: FailureKind,
    first_evidence_ms: i64,
    detected_ms: i64,
) -> FailureEvent {
    FailureEvent {
        id: id.into(),
        cluster: cluster.into(),
        node: Some(node.into()),
        gpu: None,
        job: None,
        rank: None,
        kind,
        severity: kind.default_severity(),
        method: DetectionMethod::LogRule,
        rule: None,
        evidence: vec![],
        first_evidence_ms,
        detected_ms,
        slowdown: None,
    }
}

/// `node` with `gpus` GPUs joins `cluster` at `time_ms`.
pub fn node_joined(cluster: &str, node: &str, gpus: i32, time_ms: i64) -> ClusterEvent {
    let mut event = ClusterEvent::new(cluster, time_ms, ClusterEventKind::NodeJoined);
    event.node = Some(node.into());
    event.gpus = Some(gpus);
    event
}

/// `job` is submitted to `cluster` at `time_ms`.
pub fn job_submitted(cluster: &str, job: &str, spec: JobSpec, time_ms: i64) -> ClusterEvent {
    let mut event = ClusterEvent::new(cluster, time_ms, ClusterEventKind::JobSubmitted);
    event.job_id = Some(job.into());
    event.job = Some(spec);
    event
}

/// A job of weight 1 on `min_gpus` to `max_gpus` in units of 8, data
/// parallel over `dp_degree`, checkpointing every 30 minutes, its
/// throughput given at (GPUs, FLOP/s) points.
pub fn job_spec(
    min_gpus: i32,
    max_gpus: i32,
    dp_degree: i32,
    throughput: &[(i32, f64)],
) -> JobSpec {
    JobSpec {
        weight: 1.0,
        min_gpus,
        max_gpus,
        unit_gpus: 8,
        dp_degree,
        checkpoint_interval_s: 1800,
        throughput: throughput
            .iter()
            .map(|&(gpus, flops)| ThroughputPoint { gpus, flops })
            .collect(),
    }
}
