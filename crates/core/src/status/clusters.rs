//! The clusters as the page shows them: nodes, jobs and WAF, read from the
//! shadow planner's state.

use std::collections::BTreeMap;

use serde::Serialize;

use super::StatusView;
use super::shadow::ClusterLog;
use super::waf::{FailureMark, JobView, WafPoint, cluster_waf, jobs};
use crate::goodput::Split;
use crate::planner::{ClusterState, Health};

/// A node on the page: its health and the job placed on it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeStatus {
    pub id: String,
    pub gpus: u32,
    pub health: Health,
    pub job: Option<String>,
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
    /// Its jobs' wall time by cause.
    pub goodput: Split,
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
    /// Waiting for a pre-flight check.
    pub checking: usize,
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
            Health::Checking => &mut self.checking,
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
    /// Its jobs' wall time by cause.
    pub goodput: Split,
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
                    goodput: self.goodput.cluster_split(id),
                }
            })
            .collect()
    }

    fn view_of(&self, id: &str, log: &ClusterLog) -> ClusterView {
        let node_gpus = self.shadow.node_gpus();
        let state = self.shadow.state(id);
        let (waf, ideal_waf) = state.map_or((0.0, 0.0), |s| cluster_waf(s, node_gpus));
        let mut jobs = state.map_or_else(Vec::new, |s| jobs(s, node_gpus));
        for job in &mut jobs {
            job.goodput = self.goodput.job_split(id, &job.id);
        }
        ClusterView {
            id: id.to_string(),
            watermark_ms: state.map_or(0, |s| s.watermark_ms),
            nodes: state.map_or_else(Vec::new, nodes),
            jobs,
            waf,
            ideal_waf,
            series: log.series.iter().copied().collect(),
            failures: log.failures.iter().cloned().collect(),
            decisions: log.caught_up.applied,
            skipped: log.skipped,
            diverged: log.caught_up.diverged,
            goodput: self.goodput.cluster_split(id),
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
