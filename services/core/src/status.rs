//! What the status page shows, derived from the log with no I/O.
//!
//! Node health and job placement are the planner's own state, re-derived
//! the way `unicron replay` does it: each recorded decision names the input
//! it was taken on, and applying those inputs in decision order to a shadow
//! [`Planner`] rebuilds the planner's state exactly. So every planner
//! instance (and `unicron up`) can show every cluster, not only the ones it
//! owns, and the page never shows a state the planner did not have.
//!
//! Records arrive from five topics in no particular order across topics: a
//! decision may be read before its trigger. Decisions wait, per cluster and
//! in order, until their trigger is read; a trigger that never comes (it
//! fell out of retention before the page started) is skipped after
//! [`MAX_WAITING`] later decisions, and counted.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::allocation::Profile;
use crate::planner::{
    ClusterState, Health, Input, InputEvent, Job, JobStatus, Planner, PlannerConfig,
};
use crate::records::{Command, CommandResult, CommandStatus, Decision, FailureEvent, JobSpec};
use crate::signing::CommandSigner;

/// Timeline entries kept (newest win).
pub const TIMELINE: usize = 2000;
/// WAF points and failure marks kept per cluster.
pub const SERIES: usize = 2000;
/// Planner inputs kept while no decision has named them yet.
pub const PENDING_INPUTS: usize = 20_000;
/// Decisions a cluster may queue behind one missing trigger before it is skipped.
pub const MAX_WAITING: usize = 256;

/// One record read from the log, with where it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub record: Record,
}

/// The records the page follows.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A planner input: a failure, a cluster event or a command result.
    Input(InputEvent),
    Decision(Decision),
    Command(Command),
}

/// Which stream a timeline entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Failure,
    Decision,
    Command,
    Result,
}

/// One line of the timeline; `detail` is the record as JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// Position in the timeline, increasing; pages ask for entries after one.
    pub seq: u64,
    pub kind: EntryKind,
    pub cluster: String,
    pub time_ms: i64,
    /// The record's id (failure, decision or command id; a result's command id).
    pub id: String,
    pub summary: String,
    pub detail: serde_json::Value,
}

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

#[derive(Debug, Default)]
struct ClusterLog {
    waiting: VecDeque<Decision>,
    series: VecDeque<WafPoint>,
    failures: VecDeque<FailureMark>,
    decisions: u64,
    skipped: u64,
    diverged: u64,
}

/// The page's model: feed it every record with [`StatusView::apply`].
pub struct StatusView {
    planner: Planner,
    node_gpus: u32,
    inputs: BTreeMap<(String, i32, i64), InputEvent>,
    input_order: VecDeque<(String, i32, i64)>,
    clusters: BTreeMap<String, ClusterLog>,
    timeline: VecDeque<Entry>,
    next_seq: u64,
}

impl StatusView {
    /// A view whose shadow planner uses `config` (the planner's own).
    pub fn new(config: PlannerConfig) -> StatusView {
        let node_gpus = config.node_gpus.max(1);
        // Commands the shadow planner signs are thrown away; any key will do.
        let signer = CommandSigner::from_seed("status-page", [0; 32]);
        StatusView {
            planner: Planner::new(config, signer),
            node_gpus,
            inputs: BTreeMap::new(),
            input_order: VecDeque::new(),
            clusters: BTreeMap::new(),
            timeline: VecDeque::new(),
            next_seq: 1,
        }
    }

    /// Takes one record into the view.
    pub fn apply(&mut self, read: Read) {
        let key = (read.topic, read.partition, read.offset);
        match read.record {
            Record::Input(event) => {
                self.push_input_entry(&event);
                let cluster = event.cluster().to_string();
                if self.inputs.insert(key.clone(), event).is_none() {
                    self.input_order.push_back(key);
                }
                while self.inputs.len() > PENDING_INPUTS {
                    match self.input_order.pop_front() {
                        Some(old) => {
                            self.inputs.remove(&old);
                        }
                        None => break,
                    }
                }
                self.drain(&cluster);
            }
            Record::Decision(decision) => {
                self.push(
                    EntryKind::Decision,
                    &decision.cluster,
                    decision.time_ms,
                    &decision.id,
                    decision_summary(&decision),
                    &decision,
                );
                let cluster = decision.cluster.clone();
                let log = self.clusters.entry(cluster.clone()).or_default();
                log.waiting.push_back(decision);
                if log.waiting.len() > MAX_WAITING {
                    log.waiting.pop_front();
                    log.skipped += 1;
                }
                self.drain(&cluster);
            }
            Record::Command(command) => {
                let summary = command_summary(&command);
                let unsigned = Command {
                    signature: Vec::new(),
                    ..command
                };
                self.push(
                    EntryKind::Command,
                    &unsigned.cluster,
                    unsigned.time_ms,
                    &unsigned.id,
                    summary,
                    &unsigned,
                );
            }
        }
    }

    fn push_input_entry(&mut self, event: &InputEvent) {
        match event {
            InputEvent::Failure(f) => {
                let log = self.clusters.entry(f.cluster.clone()).or_default();
                log.failures.push_back(FailureMark {
                    time_ms: f.detected_ms,
                    id: f.id.clone(),
                    kind: f.kind.symbol().to_string(),
                    severity: f.severity.symbol().to_string(),
                });
                if log.failures.len() > SERIES {
                    log.failures.pop_front();
                }
                self.push(
                    EntryKind::Failure,
                    &f.cluster,
                    f.detected_ms,
                    &f.id,
                    failure_summary(f),
                    f,
                );
            }
            InputEvent::Result(r) => {
                self.push(
                    EntryKind::Result,
                    &r.cluster,
                    r.time_ms,
                    &r.command_id,
                    result_summary(r),
                    r,
                );
            }
            // Inventory changes show through the decisions they cause.
            InputEvent::Cluster(_) => {}
        }
    }

    /// Applies the cluster's waiting decisions whose triggers have been read.
    fn drain(&mut self, cluster: &str) {
        loop {
            let Some(log) = self.clusters.get_mut(cluster) else {
                return;
            };
            let Some(decision) = log.waiting.front() else {
                return;
            };
            let t = &decision.trigger;
            let key = (t.topic.clone(), t.partition, t.offset);
            let Some(event) = self.inputs.remove(&key) else {
                return;
            };
            let decision = log.waiting.pop_front().expect("front exists");
            let input = Input {
                topic: key.0,
                partition: key.1,
                offset: key.2,
                event,
            };
            let replayed = self
                .planner
                .apply(&input)
                .into_iter()
                .find_map(|o| match o {
                    crate::planner::Output::Decision(d) => Some(d),
                    _ => None,
                });
            let same = replayed.as_ref() == Some(&decision);
            let point = self.planner.cluster(cluster).map(|state| {
                let (effective, ideal) = cluster_waf(state, self.node_gpus);
                WafPoint {
                    // Input times are not monotone (a late result); the
                    // cluster's watermark is, and charts need that.
                    time_ms: state.watermark_ms,
                    effective,
                    planned: chosen_waf(&decision),
                    ideal,
                }
            });
            let log = self.clusters.get_mut(cluster).expect("looked up above");
            log.decisions += 1;
            if !same {
                log.diverged += 1;
            }
            if let Some(point) = point {
                log.series.push_back(point);
                if log.series.len() > SERIES {
                    log.series.pop_front();
                }
            }
        }
    }

    fn push<T: Serialize>(
        &mut self,
        kind: EntryKind,
        cluster: &str,
        time_ms: i64,
        id: &str,
        summary: String,
        record: &T,
    ) {
        self.timeline.push_back(Entry {
            seq: self.next_seq,
            kind,
            cluster: cluster.to_string(),
            time_ms,
            id: id.to_string(),
            summary,
            detail: serde_json::to_value(record).unwrap_or(serde_json::Value::Null),
        });
        self.next_seq += 1;
        if self.timeline.len() > TIMELINE {
            self.timeline.pop_front();
        }
    }

    /// Timeline entries with `seq > after`, oldest first, at most `limit`.
    pub fn timeline_after(&self, after: u64, limit: usize) -> Vec<Entry> {
        self.timeline
            .iter()
            .filter(|e| e.seq > after)
            .take(limit)
            .cloned()
            .collect()
    }

    /// The newest timeline position (0 before the first entry).
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// Every cluster seen, by id.
    pub fn clusters(&self) -> Vec<ClusterView> {
        self.clusters
            .iter()
            .map(|(id, log)| {
                let state = self.planner.cluster(id);
                let (waf, ideal_waf) = state.map_or((0.0, 0.0), |s| cluster_waf(s, self.node_gpus));
                ClusterView {
                    id: id.clone(),
                    watermark_ms: state.map_or(0, |s| s.watermark_ms),
                    nodes: state.map_or_else(Vec::new, nodes),
                    jobs: state.map_or_else(Vec::new, |s| jobs(s, self.node_gpus)),
                    waf,
                    ideal_waf,
                    series: log.series.iter().copied().collect(),
                    failures: log.failures.iter().cloned().collect(),
                    decisions: log.decisions,
                    skipped: log.skipped,
                    diverged: log.diverged,
                }
            })
            .collect()
    }
}

fn nodes(state: &ClusterState) -> Vec<NodeStatus> {
    state
        .nodes
        .iter()
        .map(|(id, node)| NodeStatus {
            id: id.clone(),
            gpus: node.gpus,
            health: node.health,
            job: state.job_on(id).map(str::to_string),
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
fn cluster_waf(state: &ClusterState, node_gpus: u32) -> (f64, f64) {
    jobs(state, node_gpus)
        .iter()
        .fold((0.0, 0.0), |(w, i), j| (w + j.waf, i + j.ideal_waf))
}

fn chosen_waf(decision: &Decision) -> f64 {
    decision
        .chosen_index
        .and_then(|i| decision.alternatives.get(i as usize))
        .map_or(0.0, |a| a.waf)
}

fn failure_summary(f: &FailureEvent) -> String {
    let mut text = format!("{} {}", f.severity.symbol(), f.kind.symbol());
    if let Some(node) = &f.node {
        text.push_str(&format!(" on {node}"));
    }
    if let Some(job) = &f.job {
        text.push_str(&format!(" (job {job})"));
    }
    text
}

fn decision_summary(d: &Decision) -> String {
    let commands = match d.command_ids.len() {
        0 => "no command".to_string(),
        1 => "1 command".to_string(),
        n => format!("{n} commands"),
    };
    format!(
        "{} on {}: {} ({}, {} alternatives)",
        d.policy,
        d.trigger.kind,
        d.reason,
        commands,
        d.alternatives.len()
    )
}

fn command_summary(c: &Command) -> String {
    let mut text = c.action.symbol().to_string();
    if let Some(job) = &c.job {
        text.push_str(&format!(" job {job}"));
    }
    if !c.nodes.is_empty() {
        text.push_str(&format!(" nodes {}", c.nodes.join(",")));
    }
    text
}

fn result_summary(r: &CommandResult) -> String {
    let status = match r.status {
        CommandStatus::Accepted => "accepted",
        CommandStatus::Succeeded => "succeeded",
        CommandStatus::Failed => "failed",
        CommandStatus::Rejected => "rejected",
        CommandStatus::Unknown => "unknown",
    };
    match &r.reason {
        Some(reason) => format!("{status} by {}: {reason}", r.executor),
        None => format!("{status} by {}", r.executor),
    }
}
