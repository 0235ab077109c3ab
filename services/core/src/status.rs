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
//!
//! On-call reads incidents, not records: an [`IncidentLog`] groups each
//! failure with the decisions, commands and results it caused, newest
//! first by event time, with decisions that change nothing folded into the
//! chain. Everything kept is bounded, so the view stays small with 100
//! clusters and a long log.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;

use crate::allocation::Profile;
use crate::planner::{
    ClusterState, Health, Input, InputEvent, Job, JobStatus, Planner, PlannerConfig,
};
use crate::records::{
    Command, CommandAction, CommandResult, CommandStatus, Decision, FailureEvent, JobSpec,
};
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
    incidents: IncidentLog,
    /// Per detector instance: when its latest round was read (counting
    /// rounds) and whether that round held the silence timers.
    detectors: BTreeMap<String, (u64, bool)>,
    rounds_read: u64,
}

/// Rounds read after an instance's last one before it no longer counts as
/// running (it was restarted under a new name, or scaled away).
const DETECTOR_CURRENT_ROUNDS: u64 = 2_000;

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
            incidents: IncidentLog::new(),
            detectors: BTreeMap::new(),
            rounds_read: 0,
        }
    }

    /// Takes one detector round: whether its detector holds the heartbeat
    /// and hang timers (lost broker connection, or the lag guard).
    pub fn apply_round(&mut self, round: &crate::records::DetectorRound) {
        self.rounds_read += 1;
        self.detectors.insert(
            round.detector.clone(),
            (self.rounds_read, round.silence_held),
        );
        let oldest = self.rounds_read.saturating_sub(DETECTOR_CURRENT_ROUNDS);
        self.detectors.retain(|_, (read, _)| *read > oldest);
    }

    /// The detector instances whose latest round held the silence timers:
    /// their node losses and hangs wait until they catch up.
    pub fn detector_timers_held(&self) -> Vec<String> {
        self.detectors
            .iter()
            .filter(|(_, (_, held))| *held)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Takes one record into the view.
    pub fn apply(&mut self, read: Read) {
        self.incidents.apply(&read.record);
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
                // Snapshot reports change what restores can use, nothing an
                // operator reads: applied, not listed.
                if decision.trigger.kind != crate::planner::SNAPSHOT_REPORT {
                    self.push(
                        EntryKind::Decision,
                        &decision.cluster,
                        decision.time_ms,
                        &decision.id,
                        decision_summary(&decision),
                        &decision,
                    );
                }
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

    /// Every cluster seen, by id, in full.
    pub fn clusters(&self) -> Vec<ClusterView> {
        self.clusters
            .iter()
            .map(|(id, log)| self.view_of(id, log))
            .collect()
    }

    /// One cluster in full: nodes, jobs, WAF series.
    pub fn cluster(&self, id: &str) -> Option<ClusterView> {
        self.clusters.get(id).map(|log| self.view_of(id, log))
    }

    /// Every cluster seen, by id, at a glance: counts, not nodes.
    pub fn summaries(&self) -> Vec<ClusterSummary> {
        self.clusters
            .iter()
            .map(|(id, log)| {
                let state = self.planner.cluster(id);
                let (waf, ideal_waf) = state.map_or((0.0, 0.0), |s| cluster_waf(s, self.node_gpus));
                let mut nodes = NodeCounts::default();
                for n in state.map_or_else(Vec::new, self::nodes) {
                    nodes.add(n.health);
                }
                let mut jobs = JobCounts::default();
                for j in state.map_or_else(Vec::new, |s| self::jobs(s, self.node_gpus)) {
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
                    decisions: log.decisions,
                    skipped: log.skipped,
                    diverged: log.diverged,
                }
            })
            .collect()
    }

    /// Incidents newest first by detection time (see [`IncidentLog::incidents`]).
    pub fn incidents(&self, cluster: Option<&str>, limit: usize) -> Vec<Incident> {
        self.incidents.incidents(cluster, limit)
    }

    /// The incident model itself.
    pub fn incident_log(&self) -> &IncidentLog {
        &self.incidents
    }

    fn view_of(&self, id: &str, log: &ClusterLog) -> ClusterView {
        let state = self.planner.cluster(id);
        let (waf, ideal_waf) = state.map_or((0.0, 0.0), |s| cluster_waf(s, self.node_gpus));
        ClusterView {
            id: id.to_string(),
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
    }
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
    /// Incidents kept for the cluster (at most [`INCIDENTS_PER_CLUSTER`]).
    pub incidents: usize,
    /// Newest failure detected on the cluster, kept or not.
    pub last_incident_ms: Option<i64>,
    pub decisions: u64,
    pub skipped: u64,
    pub diverged: u64,
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

/// Incidents kept in all (the newest by detection time win): with 100
/// clusters the page and its API stay a few MB whatever the run's length.
pub const INCIDENTS: usize = 500;
/// Incidents kept per cluster, so one flapping cluster cannot push every
/// other cluster's incidents out of [`INCIDENTS`].
pub const INCIDENTS_PER_CLUSTER: usize = 50;
/// Decisions, commands and results kept while the failure or command they
/// belong to has not been read yet (the oldest go first).
pub const PENDING_PARTS: usize = 20_000;
/// Commands remembered as caused by no failure, so their results and the
/// decisions on them are dropped rather than parked.
pub const UNLINKED: usize = 20_000;
/// Decisions, commands, and results per command, one incident keeps; more
/// are counted, not stored (an escalation loop must not grow one row).
pub const CHAIN: usize = 64;

/// Where an incident stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IncidentState {
    /// Not decided yet, or a command has no final result.
    Open,
    /// Every command the last decisions issued succeeded.
    Recovered,
    /// A command failed or was rejected and nothing harsher followed.
    NeedsOperator,
    /// Decided, with no command (e.g. the node was already out of service).
    NoAction,
}

impl IncidentState {
    pub fn symbol(self) -> &'static str {
        match self {
            IncidentState::Open => "open",
            IncidentState::Recovered => "recovered",
            IncidentState::NeedsOperator => "needs_operator",
            IncidentState::NoAction => "no_action",
        }
    }

    /// Open or waiting for an operator: what the on-call still owns.
    pub fn unresolved(self) -> bool {
        matches!(self, IncidentState::Open | IncidentState::NeedsOperator)
    }
}

/// A decision in an incident's chain, without its alternatives (the
/// explain view of its commands has them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainDecision {
    pub id: String,
    pub time_ms: i64,
    /// `failure` or `command_result`.
    pub trigger_kind: String,
    /// The failure or command id the decision was taken on.
    pub trigger_id: String,
    pub policy: String,
    pub reason: String,
    pub alternatives: usize,
    pub command_ids: Vec<String>,
    /// False for decisions that issue no command: the page folds them.
    pub changes: bool,
}

/// What a command's results add up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandOutcome {
    Pending,
    Succeeded,
    Failed,
    Rejected,
}

/// One executor result of a chain's command.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainResult {
    pub time_ms: i64,
    pub status: CommandStatus,
    pub reason: Option<String>,
    pub duration_ms: i64,
    pub executor: String,
    pub node: Option<String>,
}

/// A command in an incident's chain, with its results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainCommand {
    pub id: String,
    pub decision_id: String,
    pub time_ms: i64,
    pub action: CommandAction,
    pub job: Option<String>,
    pub nodes: Vec<String>,
    pub outcome: CommandOutcome,
    /// Time of the result that made the outcome final.
    pub done_ms: Option<i64>,
    pub results: Vec<ChainResult>,
    /// Results past [`CHAIN`], counted only.
    pub more_results: usize,
    /// Start commands of agent-launched jobs finish when every node named
    /// has succeeded, as the planner counts them.
    #[serde(skip)]
    awaiting: BTreeSet<String>,
}

/// One failure and everything the control plane did about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Incident {
    /// The failure's id.
    pub id: String,
    pub cluster: String,
    pub kind: String,
    pub severity: String,
    pub node: Option<String>,
    pub job: Option<String>,
    pub first_evidence_ms: i64,
    pub detected_ms: i64,
    /// How it was found (`log_rule`, `metric_rule`, `heartbeat`, ...) and
    /// the rule that found it, when one did.
    pub method: String,
    pub rule: Option<String>,
    /// What the rule read: the first evidence's excerpt and its topic.
    pub evidence: Option<String>,
    pub evidence_topic: Option<String>,
    pub state: IncidentState,
    /// Distinct actions commanded, in order ("isolate_node, reconfigure");
    /// "no command" once decided without one; empty before any decision.
    pub decided: String,
    /// Decisions in event-time order, including those that change nothing.
    pub decisions: Vec<ChainDecision>,
    pub commands: Vec<ChainCommand>,
    /// Decisions and commands past [`CHAIN`], counted only.
    pub more: usize,
    /// When the last command that completed the recovery succeeded.
    pub recovered_ms: Option<i64>,
    /// From the first evidence (the detection time when the failure has
    /// none) to `recovered_ms`; `None` unless recovered.
    pub time_to_recovery_ms: Option<i64>,
}

impl Incident {
    fn new(f: &FailureEvent) -> Incident {
        let mut incident = Incident {
            id: f.id.clone(),
            cluster: f.cluster.clone(),
            kind: f.kind.symbol().to_string(),
            severity: f.severity.symbol().to_string(),
            node: f.node.clone(),
            job: f.job.clone(),
            first_evidence_ms: f.first_evidence_ms,
            detected_ms: f.detected_ms,
            method: f.method.symbol().to_string(),
            rule: f.rule.clone(),
            evidence: f.evidence.first().map(|e| e.excerpt.clone()),
            evidence_topic: f.evidence.first().map(|e| e.topic.clone()),
            state: IncidentState::Open,
            decided: String::new(),
            decisions: Vec::new(),
            commands: Vec::new(),
            more: 0,
            recovered_ms: None,
            time_to_recovery_ms: None,
        };
        incident.refresh();
        incident
    }

    /// Decisions that issued no command, folded into the chain.
    pub fn folded(&self) -> usize {
        self.decisions.iter().filter(|d| !d.changes).count()
    }

    /// Where recovery time is counted from.
    fn start_ms(&self) -> i64 {
        if self.first_evidence_ms > 0 && self.first_evidence_ms <= self.detected_ms {
            self.first_evidence_ms
        } else {
            self.detected_ms
        }
    }

    fn add_decision(&mut self, d: ChainDecision) {
        if self.decisions.iter().any(|x| x.id == d.id) {
            return;
        }
        if self.decisions.len() >= CHAIN {
            self.more += 1;
            return;
        }
        // Arrival order is not event order; keep the chain readable.
        let at = self
            .decisions
            .partition_point(|x| (x.time_ms, &x.id) <= (d.time_ms, &d.id));
        self.decisions.insert(at, d);
        self.refresh();
    }

    /// Adds a command; false if it was already there or did not fit.
    fn add_command(&mut self, c: ChainCommand) -> bool {
        if self.commands.iter().any(|x| x.id == c.id) {
            return false;
        }
        if self.commands.len() >= CHAIN {
            self.more += 1;
            return false;
        }
        let at = self
            .commands
            .partition_point(|x| (x.time_ms, &x.id) <= (c.time_ms, &c.id));
        self.commands.insert(at, c);
        self.refresh();
        true
    }

    fn add_result(&mut self, r: &CommandResult) {
        let Some(c) = self.commands.iter_mut().find(|c| c.id == r.command_id) else {
            return;
        };
        if c.results.len() < CHAIN {
            c.results.push(ChainResult {
                time_ms: r.time_ms,
                status: r.status,
                reason: r.reason.clone(),
                duration_ms: r.duration_ms,
                executor: r.executor.clone(),
                node: r.node.clone(),
            });
        } else {
            c.more_results += 1;
        }
        // As the planner's in-flight table: the first final result counts.
        if c.outcome == CommandOutcome::Pending {
            match r.status {
                CommandStatus::Succeeded => {
                    let per_node = r.node.as_ref().filter(|_| !c.awaiting.is_empty());
                    if let Some(node) = per_node {
                        c.awaiting.remove(node);
                    }
                    if per_node.is_none() || c.awaiting.is_empty() {
                        c.outcome = CommandOutcome::Succeeded;
                        c.done_ms = Some(r.time_ms);
                    }
                }
                CommandStatus::Failed => {
                    c.outcome = CommandOutcome::Failed;
                    c.done_ms = Some(r.time_ms);
                }
                // A rejected unsigned or forged copy says nothing about
                // the real command (the planner ignores it too).
                CommandStatus::Rejected
                    if !r
                        .reason
                        .as_deref()
                        .is_some_and(|w| w.starts_with("unsigned") || w.starts_with("forged")) =>
                {
                    c.outcome = CommandOutcome::Rejected;
                    c.done_ms = Some(r.time_ms);
                }
                _ => {}
            }
        }
        self.refresh();
    }

    /// Re-derives state, summary and recovery time from the chain.
    fn refresh(&mut self) {
        let issued: BTreeSet<&str> = self
            .decisions
            .iter()
            .flat_map(|d| d.command_ids.iter().map(String::as_str))
            .collect();
        let missing = issued
            .iter()
            .any(|id| !self.commands.iter().any(|c| c.id == *id));
        let pending = self
            .commands
            .iter()
            .any(|c| c.outcome == CommandOutcome::Pending);
        // A failed command is answered when a decision on its result
        // issued a harsher one.
        let unanswered = self.commands.iter().any(|c| {
            matches!(c.outcome, CommandOutcome::Failed | CommandOutcome::Rejected)
                && !self
                    .decisions
                    .iter()
                    .any(|d| d.trigger_id == c.id && d.changes)
        });
        self.state = if self.decisions.is_empty() || missing || pending {
            IncidentState::Open
        } else if self.commands.is_empty() {
            IncidentState::NoAction
        } else if unanswered {
            IncidentState::NeedsOperator
        } else {
            IncidentState::Recovered
        };
        self.recovered_ms = (self.state == IncidentState::Recovered)
            .then(|| {
                self.commands
                    .iter()
                    .filter(|c| c.outcome == CommandOutcome::Succeeded)
                    .filter_map(|c| c.done_ms)
                    .max()
            })
            .flatten();
        self.time_to_recovery_ms = self.recovered_ms.map(|t| (t - self.start_ms()).max(0));
        let mut actions: Vec<&str> = Vec::new();
        for c in &self.commands {
            if !actions.contains(&c.action.symbol()) {
                actions.push(c.action.symbol());
            }
        }
        self.decided = if !actions.is_empty() {
            actions.join(", ")
        } else if self.decisions.is_empty() {
            String::new()
        } else {
            "no command".to_string()
        };
    }
}

/// What an incident record links to before its incident is known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Link {
    /// (cluster, failure id)
    Failure(String, String),
    /// (cluster, command id)
    Command(String, String),
}

#[derive(Debug, Clone)]
enum Part {
    Decision(ChainDecision),
    Command(ChainCommand),
    Result(CommandResult),
}

/// Incidents from the log, one per failure, whatever order the topics are
/// read in; bounded by [`INCIDENTS`] and [`INCIDENTS_PER_CLUSTER`]. The
/// status page and `unicron explain --incidents` both use it.
#[derive(Debug, Default)]
pub struct IncidentLog {
    /// By (cluster, failure id).
    incidents: BTreeMap<(String, String), Incident>,
    /// (detected, cluster, id): newest last.
    order: BTreeSet<(i64, String, String)>,
    by_cluster: BTreeMap<String, BTreeSet<(i64, String)>>,
    /// (cluster, command id) → failure id, for commands in a kept incident.
    command_failure: BTreeMap<(String, String), String>,
    /// Records whose failure or command is not read yet, by arrival.
    parked: BTreeMap<u64, (Link, Part)>,
    parked_by: BTreeMap<Link, Vec<u64>>,
    next_park: u64,
    /// Commands caused by no failure (job starts, returns), oldest first.
    unlinked: BTreeSet<(String, String)>,
    unlinked_order: VecDeque<(String, String)>,
    /// Newest detection time per cluster, kept past eviction.
    last_ms: BTreeMap<String, i64>,
}

impl IncidentLog {
    pub fn new() -> IncidentLog {
        IncidentLog::default()
    }

    /// Takes one record; records that belong to no failure are ignored.
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Input(InputEvent::Failure(f)) => self.on_failure(f),
            Record::Input(InputEvent::Result(r)) => {
                let link = Link::Command(r.cluster.clone(), r.command_id.clone());
                self.attach(link, Part::Result(r.clone()));
            }
            Record::Input(InputEvent::Cluster(_)) => {}
            Record::Decision(d) => {
                let link = match d.trigger.kind.as_str() {
                    "failure" => Link::Failure(d.cluster.clone(), d.trigger.ref_id.clone()),
                    "command_result" => Link::Command(d.cluster.clone(), d.trigger.ref_id.clone()),
                    // Cluster events: inventory, not incidents.
                    _ => return,
                };
                self.attach(link, Part::Decision(chain_decision(d)));
            }
            Record::Command(c) => {
                // The planner puts the failure first and the input's
                // place last; a command with only the latter has no failure.
                let failure = match c.causation.split_last() {
                    Some((_, before)) => before.first(),
                    None => None,
                };
                let Some(failure) = failure else {
                    self.unlink(&c.cluster, &c.id);
                    return;
                };
                let link = Link::Failure(c.cluster.clone(), failure.clone());
                self.attach(link, Part::Command(chain_command(c)));
            }
        }
    }

    /// Incidents newest first by detection time, of one cluster or all.
    pub fn incidents(&self, cluster: Option<&str>, limit: usize) -> Vec<Incident> {
        let pick = |cluster: &str, id: &str| {
            self.incidents
                .get(&(cluster.to_string(), id.to_string()))
                .cloned()
        };
        match cluster {
            Some(c) => self
                .by_cluster
                .get(c)
                .into_iter()
                .flat_map(|set| set.iter().rev())
                .filter_map(|(_, id)| pick(c, id))
                .take(limit)
                .collect(),
            None => self
                .order
                .iter()
                .rev()
                .filter_map(|(_, c, id)| pick(c, id))
                .take(limit)
                .collect(),
        }
    }

    /// One incident by cluster and failure id.
    pub fn incident(&self, cluster: &str, id: &str) -> Option<&Incident> {
        self.incidents.get(&(cluster.to_string(), id.to_string()))
    }

    /// Incidents kept, in all.
    pub fn len(&self) -> usize {
        self.incidents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.incidents.is_empty()
    }

    /// Records parked for a failure or command not read yet.
    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    /// (unresolved, kept) incidents of a cluster and its newest detection time.
    fn cluster_counts(&self, cluster: &str) -> (usize, usize, Option<i64>) {
        let kept = self.by_cluster.get(cluster);
        let open = kept
            .into_iter()
            .flatten()
            .filter_map(|(_, id)| self.incident(cluster, id))
            .filter(|i| i.state.unresolved())
            .count();
        (
            open,
            kept.map_or(0, BTreeSet::len),
            self.last_ms.get(cluster).copied(),
        )
    }

    fn on_failure(&mut self, f: &FailureEvent) {
        let key = (f.cluster.clone(), f.id.clone());
        if self.incidents.contains_key(&key) {
            return; // re-delivered
        }
        let last = self
            .last_ms
            .entry(f.cluster.clone())
            .or_insert(f.detected_ms);
        *last = (*last).max(f.detected_ms);
        self.incidents.insert(key, Incident::new(f));
        self.order
            .insert((f.detected_ms, f.cluster.clone(), f.id.clone()));
        let mine = self.by_cluster.entry(f.cluster.clone()).or_default();
        mine.insert((f.detected_ms, f.id.clone()));
        if mine.len() > INCIDENTS_PER_CLUSTER
            && let Some((t, id)) = mine.pop_first()
        {
            self.forget(t, &f.cluster, &id);
        }
        while self.order.len() > INCIDENTS {
            let Some((t, cluster, id)) = self.order.first().cloned() else {
                break;
            };
            self.forget(t, &cluster, &id);
        }
        // An incident evicted at once leaves its parts parked, as before.
        if self
            .incidents
            .contains_key(&(f.cluster.clone(), f.id.clone()))
        {
            let link = Link::Failure(f.cluster.clone(), f.id.clone());
            for part in self.unpark(&link) {
                self.attach(link.clone(), part);
            }
        }
    }

    fn forget(&mut self, detected_ms: i64, cluster: &str, id: &str) {
        self.order
            .remove(&(detected_ms, cluster.to_string(), id.to_string()));
        if let Some(mine) = self.by_cluster.get_mut(cluster) {
            mine.remove(&(detected_ms, id.to_string()));
            if mine.is_empty() {
                self.by_cluster.remove(cluster);
            }
        }
        if let Some(incident) = self
            .incidents
            .remove(&(cluster.to_string(), id.to_string()))
        {
            for c in &incident.commands {
                self.command_failure
                    .remove(&(cluster.to_string(), c.id.clone()));
            }
        }
    }

    /// The failure a link resolves to, if its incident is kept.
    fn resolve(&self, link: &Link) -> Option<(String, String)> {
        let key = match link {
            Link::Failure(cluster, id) => (cluster.clone(), id.clone()),
            Link::Command(cluster, id) => {
                let failure = self.command_failure.get(&(cluster.clone(), id.clone()))?;
                (cluster.clone(), failure.clone())
            }
        };
        self.incidents.contains_key(&key).then_some(key)
    }

    fn attach(&mut self, link: Link, part: Part) {
        if let Link::Command(cluster, id) = &link
            && self.unlinked.contains(&(cluster.clone(), id.clone()))
        {
            return;
        }
        let Some(key) = self.resolve(&link) else {
            self.park(link, part);
            return;
        };
        let Some(incident) = self.incidents.get_mut(&key) else {
            return;
        };
        match part {
            Part::Decision(d) => incident.add_decision(d),
            Part::Result(r) => incident.add_result(&r),
            Part::Command(c) => {
                let id = c.id.clone();
                if incident.add_command(c) {
                    self.command_failure
                        .insert((key.0.clone(), id.clone()), key.1.clone());
                    let waiting = Link::Command(key.0, id);
                    for part in self.unpark(&waiting) {
                        self.attach(waiting.clone(), part);
                    }
                }
            }
        }
    }

    fn park(&mut self, link: Link, part: Part) {
        let seq = self.next_park;
        self.next_park += 1;
        self.parked_by.entry(link.clone()).or_default().push(seq);
        self.parked.insert(seq, (link, part));
        while self.parked.len() > PENDING_PARTS {
            let Some((seq, (link, _))) = self.parked.pop_first() else {
                break;
            };
            if let Some(seqs) = self.parked_by.get_mut(&link) {
                seqs.retain(|s| *s != seq);
                if seqs.is_empty() {
                    self.parked_by.remove(&link);
                }
            }
        }
    }

    /// The parts waiting for `link`, in arrival order.
    fn unpark(&mut self, link: &Link) -> Vec<Part> {
        self.parked_by
            .remove(link)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|seq| self.parked.remove(&seq).map(|(_, part)| part))
            .collect()
    }

    fn unlink(&mut self, cluster: &str, command: &str) {
        let key = (cluster.to_string(), command.to_string());
        self.unpark(&Link::Command(key.0.clone(), key.1.clone()));
        if self.unlinked.insert(key.clone()) {
            self.unlinked_order.push_back(key);
        }
        while self.unlinked_order.len() > UNLINKED {
            if let Some(old) = self.unlinked_order.pop_front() {
                self.unlinked.remove(&old);
            }
        }
    }
}

fn chain_decision(d: &Decision) -> ChainDecision {
    ChainDecision {
        id: d.id.clone(),
        time_ms: d.time_ms,
        trigger_kind: d.trigger.kind.clone(),
        trigger_id: d.trigger.ref_id.clone(),
        policy: d.policy.clone(),
        reason: d.reason.clone(),
        alternatives: d.alternatives.len(),
        command_ids: d.command_ids.clone(),
        changes: !d.command_ids.is_empty(),
    }
}

fn chain_command(c: &Command) -> ChainCommand {
    ChainCommand {
        id: c.id.clone(),
        decision_id: c.decision_id.clone(),
        time_ms: c.time_ms,
        action: c.action,
        job: c.job.clone(),
        nodes: c.nodes.clone(),
        outcome: CommandOutcome::Pending,
        done_ms: None,
        results: Vec::new(),
        more_results: 0,
        awaiting: if c.rendezvous.is_some() {
            c.nodes.iter().cloned().collect()
        } else {
            BTreeSet::new()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::{Output, PolicyName};
    use crate::records::{
        ClusterEvent, ClusterEventKind, DetectionMethod, FailureKind, ThroughputPoint, Trigger,
    };

    const T0: i64 = 1_764_000_000_000;

    /// A live run: inputs go through a real planner and every record it
    /// writes is logged after its input, as the topics hold them.
    struct Run {
        planner: Planner,
        offsets: BTreeMap<String, i64>,
        log: Vec<Read>,
    }

    impl Run {
        fn new() -> Run {
            let config = PlannerConfig {
                policy: PolicyName::Unicron,
                ..PlannerConfig::default()
            };
            Run {
                planner: Planner::new(config, CommandSigner::from_seed("t", [1; 32])),
                offsets: BTreeMap::new(),
                log: Vec::new(),
            }
        }

        fn read(&mut self, topic: &str, record: Record) -> Read {
            let offset = self.offsets.entry(topic.to_string()).or_insert(0);
            *offset += 1;
            Read {
                topic: topic.into(),
                partition: 0,
                offset: *offset,
                record,
            }
        }

        fn feed(&mut self, topic: &str, event: InputEvent) -> Vec<Command> {
            let read = self.read(topic, Record::Input(event.clone()));
            let input = Input {
                topic: read.topic.clone(),
                partition: 0,
                offset: read.offset,
                event,
            };
            self.log.push(read);
            let mut commands = Vec::new();
            for output in self.planner.apply(&input) {
                let read = match output {
                    Output::Decision(d) => self.read("unicron.decisions", Record::Decision(d)),
                    Output::Command(c) => {
                        commands.push(c.clone());
                        self.read("unicron.commands", Record::Command(c))
                    }
                    Output::Rejected(_) => continue,
                };
                self.log.push(read);
            }
            commands
        }

        /// Four 8-GPU nodes and one job on them.
        fn cluster(&mut self, cluster: &str) {
            for n in 1..=4 {
                let mut e = ClusterEvent::new(cluster, T0 + n, ClusterEventKind::NodeJoined);
                e.node = Some(format!("n{n}"));
                e.gpus = Some(8);
                self.feed("unicron.cluster", InputEvent::Cluster(e));
            }
            let mut e = ClusterEvent::new(cluster, T0 + 10, ClusterEventKind::JobSubmitted);
            e.job_id = Some("j".into());
            e.job = Some(JobSpec {
                weight: 1.0,
                min_gpus: 8,
                max_gpus: 32,
                unit_gpus: 8,
                dp_degree: 1,
                checkpoint_interval_s: 1800,
                throughput: vec![
                    ThroughputPoint {
                        gpus: 8,
                        flops: 1e15,
                    },
                    ThroughputPoint {
                        gpus: 32,
                        flops: 3e15,
                    },
                ],
            });
            self.feed("unicron.cluster", InputEvent::Cluster(e));
        }

        fn fail(&mut self, cluster: &str, id: &str, kind: FailureKind, at: i64) -> Vec<Command> {
            let f = failure(cluster, id, kind, at);
            self.feed("unicron.failures", InputEvent::Failure(f))
        }

        fn answer(&mut self, c: &Command, status: CommandStatus, at: i64) -> Vec<Command> {
            let r = CommandResult {
                command_id: c.id.clone(),
                cluster: c.cluster.clone(),
                time_ms: at,
                status,
                reason: None,
                duration_ms: 2000,
                executor: "e1".into(),
                node: None,
            };
            self.feed("unicron.command-results", InputEvent::Result(r))
        }
    }

    fn failure(cluster: &str, id: &str, kind: FailureKind, at: i64) -> FailureEvent {
        FailureEvent {
            id: id.into(),
            cluster: cluster.into(),
            node: Some("n1".into()),
            gpu: None,
            job: None,
            rank: None,
            kind,
            severity: kind.default_severity(),
            method: DetectionMethod::LogRule,
            rule: None,
            evidence: vec![],
            first_evidence_ms: at - 500,
            detected_ms: at,
        }
    }

    fn incidents_of(log: &[Read]) -> IncidentLog {
        let mut incidents = IncidentLog::new();
        for read in log {
            incidents.apply(&read.record);
        }
        incidents
    }

    /// A failure, its decision, command and results, and the no-op
    /// decisions on those results: one incident, recovered.
    #[test]
    fn one_failure_is_one_incident_with_its_chain() {
        let mut run = Run::new();
        run.cluster("a");
        let t = T0 + 60_000;
        let commands = run.fail("a", "f1", FailureKind::EccError, t);
        assert!(!commands.is_empty());
        let open = incidents_of(&run.log).incidents(None, 10);
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].state, IncidentState::Open);
        assert_eq!(open[0].time_to_recovery_ms, None);

        let mut last = t;
        for (i, c) in commands.iter().enumerate() {
            last = t + 5_000 + 2_000 * i as i64;
            assert!(run.answer(c, CommandStatus::Succeeded, last).is_empty());
        }
        let log = incidents_of(&run.log);
        let all = log.incidents(None, 10);
        assert_eq!(all.len(), 1, "cluster events made no incident: {all:#?}");
        let i = &all[0];
        assert_eq!((i.id.as_str(), i.cluster.as_str()), ("f1", "a"));
        assert_eq!(
            (i.kind.as_str(), i.severity.as_str()),
            ("ecc_error", "SEV1")
        );
        assert_eq!(i.state, IncidentState::Recovered);
        assert!(i.decided.starts_with("isolate_node"), "{}", i.decided);
        assert_eq!(i.commands.len(), commands.len());
        assert!(
            i.commands
                .iter()
                .all(|c| c.outcome == CommandOutcome::Succeeded && c.results.len() == 1)
        );
        // The failure's decision, then one that changes nothing per result.
        assert_eq!(i.decisions.len(), 1 + commands.len());
        assert!(i.decisions[0].changes && i.decisions[0].trigger_kind == "failure");
        assert_eq!(i.folded(), commands.len());
        // From the first evidence to the last success, in event time.
        assert_eq!(i.recovered_ms, Some(last));
        assert_eq!(i.time_to_recovery_ms, Some(last - (t - 500)));
    }

    #[test]
    fn out_of_order_arrival_still_gives_newest_first() {
        let mut run = Run::new();
        for cluster in ["a", "b"] {
            run.cluster(cluster);
        }
        // Failures on both clusters, each answered.
        let times = [(T0 + 90_000, "a"), (T0 + 30_000, "b"), (T0 + 60_000, "a")];
        for (n, (at, cluster)) in times.iter().enumerate() {
            let kind = [FailureKind::NcclTimeout, FailureKind::CudaError][n % 2];
            for c in run.fail(cluster, &format!("f{n}"), kind, *at) {
                run.answer(&c, CommandStatus::Succeeded, at + 4_000);
            }
        }
        let in_order = incidents_of(&run.log).incidents(None, 10);
        let ids: Vec<&str> = in_order.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["f0", "f2", "f1"], "newest detection first");
        assert!(in_order.iter().all(|i| i.state == IncidentState::Recovered));

        // Reversed: every result, command and decision before its cause.
        let reversed: Vec<Read> = run.log.iter().rev().cloned().collect();
        assert_eq!(incidents_of(&reversed).incidents(None, 10), in_order);
        // A stride through the log: the topics interleaved at random.
        let n = run.log.len();
        let step = (7..).find(|s| gcd(*s, n) == 1).expect("a coprime step");
        let stride: Vec<Read> = (0..n).map(|i| run.log[(i * step) % n].clone()).collect();
        assert_eq!(incidents_of(&stride).incidents(None, 10), in_order);
        let log = incidents_of(&reversed);
        assert_eq!(log.parked(), 0, "nothing left waiting");
        let a: Vec<String> = log
            .incidents(Some("a"), 10)
            .into_iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(a, ["f0", "f2"]);
    }

    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 { a } else { gcd(b, a % b) }
    }

    /// Hand-made records of one failure, for logs too big for the planner.
    fn chain(cluster: &str, n: i64, at: i64, result: CommandStatus) -> Vec<Record> {
        let id = format!("f{n}");
        let cid = format!("c:{cluster}:{n}");
        let decision = |id: &str, kind: &str, on: &str, commands: Vec<String>| Decision {
            id: id.into(),
            cluster: cluster.into(),
            time_ms: at,
            trigger: Trigger {
                kind: kind.into(),
                ref_id: on.into(),
                topic: "t".into(),
                partition: 0,
                offset: n,
            },
            inputs_digest: String::new(),
            policy: "unicron".into(),
            policy_version: "1".into(),
            alternatives: vec![],
            chosen_index: None,
            assignment: BTreeMap::new(),
            reason: String::new(),
            command_ids: commands,
        };
        let command = Command {
            id: cid.clone(),
            cluster: cluster.into(),
            decision_id: format!("d1:{n}"),
            time_ms: at,
            action: CommandAction::Reattempt,
            job: Some("j".into()),
            nodes: vec![],
            restore_from: None,
            causation: vec![id.clone(), format!("unicron.failures/0/{n}")],
            key_id: String::new(),
            signature: vec![],
            rendezvous: None,
            snapshots: None,
        };
        let result = CommandResult {
            command_id: cid.clone(),
            cluster: cluster.into(),
            time_ms: at + 1_000,
            status: result,
            reason: None,
            duration_ms: 1_000,
            executor: "e".into(),
            node: None,
        };
        vec![
            Record::Input(InputEvent::Failure(failure(
                cluster,
                &id,
                FailureKind::NcclTimeout,
                at,
            ))),
            Record::Decision(decision(
                &format!("d1:{n}"),
                "failure",
                &id,
                vec![cid.clone()],
            )),
            Record::Command(command),
            Record::Input(InputEvent::Result(result)),
            Record::Decision(decision(&format!("d2:{n}"), "command_result", &cid, vec![])),
        ]
    }

    #[test]
    fn the_window_holds_with_100_clusters() {
        let mut log = IncidentLog::new();
        let mut n = 0;
        for round in 0..30 {
            for c in 0..100 {
                n += 1;
                // Outputs before the failure half the time.
                let mut records = chain(
                    &format!("c{c}"),
                    n,
                    T0 + 1_000 * n,
                    CommandStatus::Succeeded,
                );
                if n % 2 == 0 {
                    records.rotate_left(1);
                }
                for r in &records {
                    log.apply(r);
                }
            }
            assert!(log.len() <= INCIDENTS, "round {round}: {}", log.len());
        }
        assert_eq!(log.len(), INCIDENTS);
        let kept = log.incidents(None, usize::MAX);
        assert_eq!(kept.len(), INCIDENTS);
        // The newest are kept, newest first, each with its chain.
        assert_eq!(kept[0].detected_ms, T0 + 1_000 * n);
        assert_eq!(
            kept[INCIDENTS - 1].detected_ms,
            T0 + 1_000 * (n - INCIDENTS as i64 + 1)
        );
        assert!(kept.iter().all(|i| i.state == IncidentState::Recovered));
        assert!(log.parked() <= PENDING_PARTS);
        assert!(log.command_failure.len() <= INCIDENTS * CHAIN);

        // One flapping cluster keeps at most its cap and pushes no one out.
        for _ in 0..200 {
            n += 1;
            for r in chain("noisy", n, T0 + 1_000 * n, CommandStatus::Succeeded) {
                log.apply(&r);
            }
        }
        assert_eq!(
            log.incidents(Some("noisy"), usize::MAX).len(),
            INCIDENTS_PER_CLUSTER
        );
        assert_eq!(log.len(), INCIDENTS);
        assert_eq!(log.incidents(Some("c99"), 1).len(), 1);
    }

    #[test]
    fn decisions_that_change_nothing_make_no_incident() {
        let mut run = Run::new();
        // Nodes joining and a job submitted: decisions, start commands,
        // their results and the no-op decisions on those.
        run.cluster("a");
        let starts: Vec<Command> = run
            .log
            .iter()
            .filter_map(|r| match &r.record {
                Record::Command(c) => Some(c.clone()),
                _ => None,
            })
            .collect();
        for c in &starts {
            run.answer(c, CommandStatus::Succeeded, T0 + 20_000);
        }
        assert!(!starts.is_empty(), "the job is started");
        let log = incidents_of(&run.log);
        assert!(log.is_empty());
        // Read backwards too: what waited for the start commands is dropped
        // once they show they answer no failure.
        let reversed: Vec<Read> = run.log.iter().rev().cloned().collect();
        let log = incidents_of(&reversed);
        assert!(log.is_empty());
        assert_eq!(log.parked(), 0);
    }

    #[test]
    fn a_failed_command_needs_an_operator_unless_escalated() {
        let records = chain("a", 1, T0, CommandStatus::Failed);
        let mut log = IncidentLog::new();
        for r in &records {
            log.apply(r);
        }
        let i = &log.incidents(None, 1)[0];
        assert_eq!(i.state, IncidentState::NeedsOperator);
        assert_eq!(i.time_to_recovery_ms, None);

        // The planner escalates instead: a restart on the failed result.
        let mut run = Run::new();
        run.cluster("a");
        let first = run.fail("a", "f1", FailureKind::NcclTimeout, T0 + 60_000);
        assert_eq!(first[0].action, CommandAction::Reattempt);
        let harsher = run.answer(&first[0], CommandStatus::Failed, T0 + 65_000);
        assert!(!harsher.is_empty());
        let log = incidents_of(&run.log);
        assert_eq!(log.incidents(None, 1)[0].state, IncidentState::Open);
        for c in &harsher {
            run.answer(c, CommandStatus::Succeeded, T0 + 90_000);
        }
        let i = &incidents_of(&run.log).incidents(None, 1)[0];
        assert_eq!(i.state, IncidentState::Recovered);
        assert_eq!(i.decided, "reattempt, restart");
        assert_eq!(i.time_to_recovery_ms, Some(90_000 - 60_000 + 500));
    }

    #[test]
    fn the_summary_counts_a_clusters_nodes_jobs_and_open_incidents() {
        let mut run = Run::new();
        run.cluster("a");
        run.fail("a", "f1", FailureKind::EccError, T0 + 60_000);
        let mut view = StatusView::new(PlannerConfig::default());
        for read in run.log.clone() {
            view.apply(read);
        }
        let summaries = view.summaries();
        assert_eq!(summaries.len(), 1);
        let a = &summaries[0];
        assert_eq!(a.nodes.total, 4);
        assert_eq!(a.nodes.isolated, 1);
        assert_eq!(a.jobs.total, 1);
        assert_eq!(a.jobs.recovering, 1);
        assert_eq!((a.open_incidents, a.incidents), (1, 1));
        assert_eq!(a.last_incident_ms, Some(T0 + 60_000));
        assert_eq!(view.cluster("a").map(|c| c.nodes.len()), Some(4));
        assert!(view.cluster("b").is_none());
        assert_eq!(view.incidents(Some("a"), 5).len(), 1);
        assert!(view.incidents(Some("b"), 5).is_empty());
    }

    /// The page says which detectors hold their silence timers, from their
    /// latest round, and forgets an instance that stopped writing rounds.
    #[test]
    fn the_latest_round_of_each_detector_says_whether_it_holds_its_timers() {
        let mut view = StatusView::new(PlannerConfig::default());
        let round = |detector: &str, seq: i64, held: bool| crate::records::DetectorRound {
            detector: detector.into(),
            seq,
            silence_held: held,
            ..Default::default()
        };
        view.apply_round(&round("d1", 0, false));
        view.apply_round(&round("d2", 0, true));
        assert_eq!(view.detector_timers_held(), ["d2"]);
        view.apply_round(&round("d2", 1, false));
        view.apply_round(&round("d1", 1, true));
        assert_eq!(view.detector_timers_held(), ["d1"]);
        for seq in 2..2_100 {
            view.apply_round(&round("d3", seq, false));
        }
        assert!(view.detector_timers_held().is_empty(), "d1 stopped");
    }
}
