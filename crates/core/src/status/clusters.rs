//! The clusters as the page shows them: nodes, jobs and WAF, read from the
//! shadow planner's state.

use std::collections::BTreeMap;

use serde::Serialize;

use super::StatusView;
use super::shadow::ClusterLog;
use crate::allocation::Profile;
use crate::planner::{ClusterState, Health, Job, JobStatus};
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

/// A node on the page: its health and the job placed on it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeStatus {
    pub id: String,
    pub gpus: u32,
    pub health: Health,
    pub job: Option<String>,
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
}

/// One cluster in full, as the shadow planner holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterView {
    pub id: String,
    pub watermark_ms: i64,
    pub nodes: Vec<NodeStatus>,
    pub jobs: Vec<JobView>,
    pub waf: f64,
    pub ideal_waf: f64,
    pub series: Vec<WafPoint>,
    pub failures: Vec<FailureMark>,
    /// Decisions applied to the shadow planner.
    pub decisions: u64,
    /// Decisions whose trigger was never read (state may lag the planner's).
    pub skipped: u64,
    /// Decisions the shadow planner did not reproduce (policy or config differ).
    pub diverged: u64,
}

/// Nodes of a cluster by health.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NodeCounts {
    pub total: usize,
    pub healthy: usize,
    pub suspect: usize,
    pub isolated: usize,
    pub repairing: usize,
    pub held: usize,
}

impl NodeCounts {
    fn add(&mut self, health: Health) {
        self.total += 1;
        *match health {
            Health::Healthy => &mut self.healthy,
            Health::Suspect => &mut self.suspect,
            Health::Isolated => &mut self.isolated,
            Health::Repairing => &mut self.repairing,
            Health::Held => &mut self.held,
        } += 1;
    }
}

/// Jobs of a cluster by the page's status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct JobCounts {
    pub total: usize,
    pub running: usize,
    pub recovering: usize,
    pub pending: usize,
    pub paused: usize,
}

impl JobCounts {
    fn add(&mut self, status: &str) {
        self.total += 1;
        match status {
            "running" => self.running += 1,
            "recovering" => self.recovering += 1,
            "pending" => self.pending += 1,
            _ => self.paused += 1,
        }
    }
}

/// One cluster at a glance, for a list of many.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterSummary {
    pub id: String,
    pub watermark_ms: i64,
    pub nodes: NodeCounts,
    pub jobs: JobCounts,
    pub waf: f64,
    pub ideal_waf: f64,
    /// Kept incidents still open or waiting for an operator.
    pub open_incidents: usize,
    /// Incidents kept for the cluster (at most [`INCIDENTS_PER_CLUSTER`](super::INCIDENTS_PER_CLUSTER)).
    pub incidents: usize,
    /// Newest failure detected on the cluster, kept or not.
    pub last_incident_ms: Option<i64>,
    pub decisions: u64,
    pub skipped: u64,
    pub diverged: u64,
}

impl StatusView {
    /// Every cluster seen, by id, in full.
    pub fn clusters(&self) -> Vec<ClusterView> {
        self.shadow
            .logs()
            .iter()
            .map(|(id, log)| self.view_of(id, log))
            .collect()
    }

    /// One cluster in full: nodes, jobs, WAF series.
    pub fn cluster(&self, id: &str) -> Option<ClusterView> {
        self.shadow.logs().get(id).map(|log| self.view_of(id, log))
    }

    /// Every cluster seen, by id, at a glance: counts, not nodes.
    pub fn summaries(&self) -> Vec<ClusterSummary> {
        let node_gpus = self.shadow.node_gpus();
        self.shadow
            .logs()
            .iter()
            .map(|(id, log)| {
                let state = self.shadow.state(id);
                let (waf, ideal_waf) = state.map_or((0.0, 0.0), |s| cluster_waf(s, node_gpus));
                let mut nodes = NodeCounts::default();
                for n in state.map_or_else(Vec::new, self::nodes) {
                    nodes.add(n.health);
                }
                let mut jobs = JobCounts::default();
                for j in state.map_or_else(Vec::new, |s| self::jobs(s, node_gpus)) {
                    jobs.add(&j.status);
                }
                let (open, kept, last) = self.incidents.cluster_counts(id);
                ClusterSummary {
                    id: id.clone(),
                    watermark_ms: state.map_or(0, |s| s.watermark_ms),
                    nodes,
                    jobs,
                    waf,
                    ideal_waf,
                    open_incidents: open,
                    incidents: kept,
                    last_incident_ms: last,
                    decisions: log.caught_up.applied,
                    skipped: log.skipped,
                    diverged: log.caught_up.diverged,
                }
            })
            .collect()
    }

    fn view_of(&self, id: &str, log: &ClusterLog) -> ClusterView {
        let node_gpus = self.shadow.node_gpus();
        let state = self.shadow.state(id);
        let (waf, ideal_waf) = state.map_or((0.0, 0.0), |s| cluster_waf(s, node_gpus));
        ClusterView {
            id: id.to_string(),
            watermark_ms: state.map_or(0, |s| s.watermark_ms),
            nodes: state.map_or_else(Vec::new, nodes),
            jobs: state.map_or_else(Vec::new, |s| jobs(s, node_gpus)),
            waf,
            ideal_waf,
            series: log.series.iter().copied().collect(),
            failures: log.failures.iter().cloned().collect(),
            decisions: log.caught_up.applied,
            skipped: log.skipped,
            diverged: log.caught_up.diverged,
        }
    }
}

fn nodes(state: &ClusterState) -> Vec<NodeStatus> {
    // Node → job in one pass (a lookup per node is quadratic).
    let placed: BTreeMap<&str, &str> = state
        .jobs
        .iter()
        .flat_map(|(id, job)| job.nodes.iter().map(move |n| (n.as_str(), id.as_str())))
        .collect();
    state
        .nodes
        .iter()
        .map(|(id, node)| NodeStatus {
            id: id.clone(),
            gpus: node.gpus,
            health: node.health,
            job: placed.get(id.as_str()).map(|j| j.to_string()),
        })
        .collect()
}

fn recovering(state: &ClusterState, job: &str) -> bool {
    state
        .in_flight
        .values()
        .any(|f| f.job.as_deref() == Some(job))
}

fn jobs(state: &ClusterState, node_gpus: u32) -> Vec<JobView> {
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
