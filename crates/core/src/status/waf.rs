//! What the status page measures of a cluster: its weighted achieved
//! FLOPs (WAF) now, per job, and what each decision chose.

use serde::Serialize;

use crate::allocation::Profile;
use crate::planner::{ClusterState, Job, JobStatus};
use crate::records::{Decision, JobSpec};

/// Cluster WAF after one decision, against the ideal, at the cluster's
/// watermark (the newest event time the planner had seen).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WafPoint {
    pub time_ms: i64,
    /// Σ w·T(x) over jobs running with no command in flight.
    pub effective: f64,
    /// WAF of the allocation the decision chose.
    pub planned: f64,
    /// Σ w·T(max) over the cluster's jobs.
    pub ideal: f64,
}

/// A failure on the WAF chart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureMark {
    pub time_ms: i64,
    pub id: String,
    pub kind: String,
    pub severity: String,
}

/// A job's state on the page: the planner's status, or `recovering` while
/// a command for it is in flight.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobView {
    pub id: String,
    pub status: String,
    pub gpus: u32,
    pub nodes: Vec<String>,
    pub weight: f64,
    pub waf: f64,
    pub ideal_waf: f64,
    /// Its wall time by cause, from the log.
    pub goodput: Option<crate::goodput::Split>,
}

fn recovering(state: &ClusterState, job: &str) -> bool {
    state
        .in_flight
        .values()
        .any(|f| f.job.as_deref() == Some(job))
}

pub(super) fn jobs(state: &ClusterState, node_gpus: u32) -> Vec<JobView> {
    state
        .jobs
        .iter()
        .map(|(id, job)| {
            let gpus = job.nodes.len() as u32 * node_gpus;
            let in_recovery = recovering(state, id);
            let status = if in_recovery {
                "recovering"
            } else {
                match job.status {
                    JobStatus::Pending => "pending",
                    JobStatus::Running => "running",
                    JobStatus::Paused => "paused",
                }
            };
            JobView {
                id: id.clone(),
                status: status.to_string(),
                gpus,
                nodes: job.nodes.clone(),
                weight: job.spec.weight,
                waf: if in_recovery { 0.0 } else { job_waf(job, gpus) },
                ideal_waf: ideal(&job.spec),
                goodput: None,
            }
        })
        .collect()
}

fn profile(spec: &JobSpec) -> Option<Profile> {
    let points = spec
        .throughput
        .iter()
        .map(|p| (p.gpus.max(0) as u32, p.flops))
        .collect();
    Profile::new(points, "throughput").ok()
}

/// w·T(x) of a running job at `gpus`, 0 below its minimum or not running.
fn job_waf(job: &Job, gpus: u32) -> f64 {
    let min = job.spec.min_gpus.max(0) as u32;
    if job.status != JobStatus::Running || gpus == 0 || gpus < min {
        return 0.0;
    }
    profile(&job.spec).map_or(0.0, |p| job.spec.weight * p.throughput(gpus))
}

fn ideal(spec: &JobSpec) -> f64 {
    profile(spec).map_or(0.0, |p| {
        spec.weight * p.throughput(spec.max_gpus.max(0) as u32)
    })
}

/// (effective, ideal) WAF of a cluster.
pub(super) fn cluster_waf(state: &ClusterState, node_gpus: u32) -> (f64, f64) {
    jobs(state, node_gpus)
        .iter()
        .fold((0.0, 0.0), |(w, i), j| (w + j.waf, i + j.ideal_waf))
}

/// WAF of the allocation a decision chose, 0 when it chose none.
pub(super) fn chosen_waf(decision: &Decision) -> f64 {
    decision
        .chosen_index
        .and_then(|i| decision.alternatives.get(i as usize))
        .map_or(0.0, |a| a.waf)
}
