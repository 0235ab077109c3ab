//! The records on unicron's topics (docs/design.md §3), one struct per Avro schema in
//! `schemas/`. Field names, order and optionality match the schemas; times
//! are event times in milliseconds since the Unix epoch.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::taxonomy::{FailureKind, Severity};

/// Metric samples from one node (`unicron.telemetry`, key: node).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryBatch {
    pub cluster: String,
    pub node: String,
    pub source: String,
    pub samples: Vec<MetricSample>,
}

/// One metric value at one event time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricSample {
    pub name: String,
    pub value: f64,
    pub time_ms: i64,
    #[serde(default)]
    pub gpu: Option<i32>,
    #[serde(default)]
    pub job: Option<String>,
    #[serde(default)]
    pub rank: Option<i32>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// One log line from a node (`unicron.logs`, key: node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRecord {
    pub cluster: String,
    pub node: String,
    pub time_ms: i64,
    pub source: String,
    #[serde(default)]
    pub job: Option<String>,
    #[serde(default)]
    pub rank: Option<i32>,
    #[serde(default)]
    pub gpu: Option<i32>,
    pub line: String,
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

/// Which observation an [`AgentEvent`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentEventKind {
    Heartbeat,
    ProcessExit,
    IterationDone,
    Unknown,
    /// The agent exits cleanly: its heartbeats stop on purpose.
    Leaving,
}

/// What a node agent observes (`unicron.agent`, key: node).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentEvent {
    pub cluster: String,
    pub node: String,
    pub time_ms: i64,
    pub kind: AgentEventKind,
    #[serde(default)]
    pub job: Option<String>,
    #[serde(default)]
    pub rank: Option<i32>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    #[serde(default)]
    pub iteration: Option<i64>,
    #[serde(default)]
    pub iteration_time_ms: Option<f64>,
    /// Written by the detector, not an agent (kind `Unknown`): nothing
    /// arrived from the cluster for a while on inputs it had read to their
    /// end, and the cluster's event time has reached `time_ms`. A record,
    /// so replay fires the same timers.
    #[serde(default)]
    pub idle_tick: bool,
    /// What an agent reports about one of its workers (see [`WorkerReport`]).
    #[serde(default)]
    pub worker: Option<WorkerReport>,
}

/// What changed about a worker an agent supervises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerChange {
    /// The agent started the worker.
    Started,
    /// Its process state (procfs) changed.
    State,
    /// The agent stopped it (with kind `ProcessExit`): never a failure.
    Stopped,
    Unknown,
}

/// One worker process of a job, as its agent reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReport {
    pub change: WorkerChange,
    /// The job's start count the worker belongs to.
    pub generation: i64,
    /// Process id, also its process group id.
    pub pid: i32,
    /// The command that started or stopped it.
    #[serde(default)]
    pub command_id: Option<String>,
    /// running, sleeping, disk_sleep, stopped, tracing_stop, zombie or dead.
    #[serde(default)]
    pub process_state: Option<String>,
}

impl AgentEvent {
    /// An event of `kind` with every optional field unset.
    pub fn new(cluster: &str, node: &str, time_ms: i64, kind: AgentEventKind) -> AgentEvent {
        AgentEvent {
            cluster: cluster.to_string(),
            node: node.to_string(),
            time_ms,
            kind,
            job: None,
            rank: None,
            exit_code: None,
            signal: None,
            iteration: None,
            iteration_time_ms: None,
            idle_tick: false,
            worker: None,
        }
    }

    /// An idle tick: `cluster`'s event time has reached `time_ms` (see
    /// [`AgentEvent::idle_tick`]); `node` names the detector that wrote it.
    pub fn idle(cluster: &str, node: &str, time_ms: i64) -> AgentEvent {
        AgentEvent {
            idle_tick: true,
            ..AgentEvent::new(cluster, node, time_ms, AgentEventKind::Unknown)
        }
    }
}

/// Which detection method raised a [`FailureEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DetectionMethod {
    LogRule,
    MetricRule,
    Heartbeat,
    ProcessSupervision,
    Statistical,
    Unknown,
}

impl DetectionMethod {
    /// The symbol used in schemas and JSON.
    pub fn symbol(self) -> &'static str {
        match self {
            DetectionMethod::LogRule => "log_rule",
            DetectionMethod::MetricRule => "metric_rule",
            DetectionMethod::Heartbeat => "heartbeat",
            DetectionMethod::ProcessSupervision => "process_supervision",
            DetectionMethod::Statistical => "statistical",
            DetectionMethod::Unknown => "unknown",
        }
    }
}

/// A pointer to one source record, with a bounded excerpt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    #[serde(default)]
    pub node: Option<String>,
    pub excerpt: String,
}

/// One classified, correlated failure (`unicron.failures`, key: cluster).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureEvent {
    pub id: String,
    pub cluster: String,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub gpu: Option<i32>,
    #[serde(default)]
    pub job: Option<String>,
    #[serde(default)]
    pub rank: Option<i32>,
    pub kind: FailureKind,
    pub severity: Severity,
    pub method: DetectionMethod,
    #[serde(default)]
    pub rule: Option<String>,
    pub evidence: Vec<Evidence>,
    pub first_evidence_ms: i64,
    pub detected_ms: i64,
}

/// What a [`ClusterEvent`] changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClusterEventKind {
    JobSubmitted,
    JobUpdated,
    JobFinished,
    NodeJoined,
    NodeRepaired,
    NodeRemoved,
    Unknown,
    /// The scheduler reports the node dead (Slurm DOWN or NOT_RESPONDING):
    /// out of plans, no command (the scheduler already holds it).
    NodeDown,
    /// Someone other than unicron drained the node: out of plans, no
    /// command, and unicron never undoes it.
    NodeDrained,
    /// An agent holds complete in-memory snapshots (`snapshots`).
    SnapshotsStored,
    /// A rank resumed training after a start command (`restored`).
    JobRestored,
}

/// One measured point of a job's throughput profile T(x).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThroughputPoint {
    pub gpus: i32,
    pub flops: f64,
}

/// What the planner needs to know about a training job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub weight: f64,
    pub min_gpus: i32,
    pub max_gpus: i32,
    pub unit_gpus: i32,
    pub dp_degree: i32,
    pub checkpoint_interval_s: i64,
    pub throughput: Vec<ThroughputPoint>,
}

/// A change of inventory or job set (`unicron.cluster`, key: cluster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterEvent {
    pub cluster: String,
    pub time_ms: i64,
    pub kind: ClusterEventKind,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub gpus: Option<i32>,
    #[serde(default)]
    pub job_id: Option<String>,
    #[serde(default)]
    pub job: Option<JobSpec>,
    /// node_joined: where other nodes reach this node.
    #[serde(default)]
    pub address: Option<String>,
    /// job_*: set when unicron agents start the job's workers.
    #[serde(default)]
    pub launch: Option<AgentLaunch>,
    /// node_down / node_drained / node_repaired from a scheduler: what it
    /// says about the node.
    #[serde(default)]
    pub reason: Option<String>,
    /// node_joined by an agent that keeps replicas: its snapshot service.
    #[serde(default)]
    pub snapshot_address: Option<String>,
    /// snapshots_stored: what `node` stored since its last report, in order.
    #[serde(default)]
    pub snapshots: Vec<SnapshotHeld>,
    /// job_restored: what one rank's restore cost (boxed: rare, and large).
    #[serde(default)]
    pub restored: Option<Box<RestoreReport>>,
}

/// One complete in-memory snapshot an agent holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeld {
    pub job: String,
    pub rank: i32,
    pub step: i64,
    pub generation: i64,
    /// Ranks per node of the generation that wrote it.
    pub local_world: i32,
    pub bytes: i64,
    /// Kept for a peer node rather than written by a local worker.
    pub replica: bool,
}

/// What one rank's restore after a start command cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreReport {
    pub job: String,
    pub rank: i32,
    pub generation: i64,
    pub command_id: String,
    /// The start command's action symbol.
    pub action: String,
    /// `memory`, `replica:<node>` or `checkpoint`.
    pub source: String,
    #[serde(default)]
    pub step: Option<i64>,
    #[serde(default)]
    pub bytes: i64,
    /// Start command's event time to the rank's first step after it.
    pub restore_ms: i64,
}

impl ClusterEvent {
    /// An event of `kind` with every optional field unset.
    pub fn new(cluster: impl Into<String>, time_ms: i64, kind: ClusterEventKind) -> ClusterEvent {
        ClusterEvent {
            cluster: cluster.into(),
            time_ms,
            kind,
            node: None,
            gpus: None,
            job_id: None,
            job: None,
            address: None,
            launch: None,
            reason: None,
            snapshot_address: None,
            snapshots: Vec::new(),
            restored: None,
        }
    }
}

/// How agents launch a job (see `schemas/ClusterEvent.avsc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentLaunch {
    /// First of the 1000 ports the master port is chosen from.
    pub master_port_base: i32,
    /// Restarts after failures the job may have in all; `None`: no limit.
    #[serde(default)]
    pub restart_budget: Option<i32>,
}

/// The input record that caused a [`Decision`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trigger {
    pub kind: String,
    pub ref_id: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// One allocation the planner weighed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alternative {
    pub allocation: BTreeMap<String, i32>,
    pub waf: f64,
    pub objective: f64,
}

/// One planner decision (`unicron.decisions`, key: cluster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub id: String,
    pub cluster: String,
    pub time_ms: i64,
    pub trigger: Trigger,
    pub inputs_digest: String,
    pub policy: String,
    pub policy_version: String,
    pub alternatives: Vec<Alternative>,
    #[serde(default)]
    pub chosen_index: Option<i32>,
    #[serde(default)]
    pub assignment: BTreeMap<String, Vec<String>>,
    pub reason: String,
    #[serde(default)]
    pub command_ids: Vec<String>,
}

/// What an executor is told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandAction {
    Reattempt,
    Restart,
    Reconfigure,
    IsolateNode,
    Resume,
    Pause,
    Unknown,
    /// Give a node unicron isolated back to the scheduler (Slurm: RESUME,
    /// only if unicron's own drain is still on it).
    ReturnNode,
}

impl CommandAction {
    /// The symbol used in schemas, JSON, the HTTP contract and metrics.
    pub fn symbol(self) -> &'static str {
        match self {
            CommandAction::Reattempt => "reattempt",
            CommandAction::Restart => "restart",
            CommandAction::Reconfigure => "reconfigure",
            CommandAction::IsolateNode => "isolate_node",
            CommandAction::Resume => "resume",
            CommandAction::Pause => "pause",
            CommandAction::Unknown => "unknown",
            CommandAction::ReturnNode => "return_node",
        }
    }
}

/// A signed action for an executor (`unicron.commands`, key: cluster).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub id: String,
    pub cluster: String,
    pub decision_id: String,
    pub time_ms: i64,
    pub action: CommandAction,
    #[serde(default)]
    pub job: Option<String>,
    #[serde(default)]
    pub nodes: Vec<String>,
    #[serde(default)]
    pub restore_from: Option<String>,
    #[serde(default)]
    pub causation: Vec<String>,
    pub key_id: String,
    #[serde(with = "serde_bytes")]
    pub signature: Vec<u8>,
    /// Start commands of agent-launched jobs: where the workers meet.
    #[serde(default)]
    pub rendezvous: Option<Rendezvous>,
    /// Start commands of agent-launched jobs: the step every rank resumes
    /// from, where each rank's state is, and where replicas go.
    #[serde(default)]
    pub snapshots: Option<SnapshotPlan>,
}

/// The restore point of a start command (see `schemas/Command.avsc`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SnapshotPlan {
    /// `None`: the job's disk checkpoint (or a first start).
    #[serde(default)]
    pub step: Option<i64>,
    pub reason: String,
    /// One per rank of the new layout when `step` is set.
    #[serde(default)]
    pub sources: Vec<RankSource>,
    /// Parallel to the command's `nodes`: who keeps that node's replicas
    /// (empty: nobody).
    #[serde(default)]
    pub replica_holders: Vec<String>,
    /// Snapshot service of every node named above.
    #[serde(default)]
    pub peers: Vec<SnapshotPeer>,
}

/// Where one rank of a new layout takes its state from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankSource {
    pub rank: i32,
    pub from_rank: i32,
    pub node: String,
}

/// A node's snapshot service address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPeer {
    pub node: String,
    pub address: String,
}

/// The torch.distributed rendezvous a start command hands out; node ranks
/// are the order of the command's `nodes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rendezvous {
    /// The job's start count (`UNICRON_GENERATION`).
    pub generation: i64,
    pub master_addr: String,
    pub master_port: i32,
}

/// Outcome of a command at an executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandStatus {
    Accepted,
    Succeeded,
    Failed,
    Rejected,
    Unknown,
}

/// What an executor did with a command (`unicron.command-results`, key: cluster).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    pub command_id: String,
    pub cluster: String,
    pub time_ms: i64,
    pub status: CommandStatus,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub duration_ms: i64,
    pub executor: String,
    /// The node this result answers for (agents); `None`: the whole command.
    #[serde(default)]
    pub node: Option<String>,
}

/// A record a service could not use (`unicron.dlq`, key: source topic).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub source_topic: String,
    pub partition: i32,
    pub offset: i64,
    #[serde(default, with = "serde_bytes")]
    pub key: Option<Vec<u8>>,
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
    pub payload_size: i64,
    pub error: String,
    pub service: String,
    pub time_ms: i64,
}

/// Part of a planner checkpoint of one input partition
/// (`unicron.planner-checkpoints`, key: cluster; a manifest: none): a chunk
/// of one cluster's stored state, or the manifest that closes the
/// checkpoint. A planner taking over the partition starts from it instead
/// of the beginning of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannerCheckpoint {
    pub input_partition: i32,
    /// Empty in a manifest.
    pub cluster: String,
    /// A chunk of the cluster's state as the planner stores it (JSON).
    #[serde(with = "serde_bytes")]
    pub state: Vec<u8>,
    pub manifest: Option<CheckpointManifest>,
}

/// Closes a checkpoint: where its states are, and the input and decision
/// positions they reflect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointManifest {
    pub consumed: Vec<ConsumedOffset>,
    /// First offset of the decisions partition the states do not reflect.
    pub decisions_next_offset: i64,
    pub clusters: Vec<CheckpointedCluster>,
}

/// One input topic's position in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumedOffset {
    pub topic: String,
    pub next_offset: i64,
}

/// Where one cluster's state is in the checkpoint topic's partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointedCluster {
    pub cluster: String,
    pub chunk_offsets: Vec<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_symbols_match_their_json() {
        for action in [
            CommandAction::Reattempt,
            CommandAction::Restart,
            CommandAction::Reconfigure,
            CommandAction::IsolateNode,
            CommandAction::Resume,
            CommandAction::Pause,
            CommandAction::Unknown,
        ] {
            let json = serde_json::to_string(&action).unwrap();
            assert_eq!(json, format!("\"{}\"", action.symbol()));
        }
    }
}

/// One round of a detector instance (`unicron.detector-rounds`, key: the
/// instance): which input records it applied together, and every other
/// input that moved its timers. A detector applies what it has read in
/// rounds, each in one canonical order ([`crate::detector::Detector::apply_round`]),
/// so its failures are a function of the rounds and the input log: replay
/// applies the same rounds to the same records and must get the same
/// failures, whatever order the live consumer read partitions in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DetectorRound {
    /// The detector instance (one process run); its rounds are in order
    /// on one partition.
    pub detector: String,
    /// The round's number within the instance, from 0.
    pub seq: i64,
    /// State was forgotten before this round (the group moved partitions).
    pub reset: bool,
    /// Heartbeat and hang timers were held (lost broker connection, or
    /// input lag beyond the guard).
    pub silence_held: bool,
    /// Partitions found read to their end since the previous round.
    pub caught_up: Vec<PartitionRef>,
    /// The input records applied, as runs of consecutive offsets.
    pub ranges: Vec<RoundRange>,
    /// Idle ticks applied after the records.
    pub ticks: Vec<RoundTick>,
    /// The ids of the failures the round emitted, in order.
    pub failures: Vec<String>,
}

/// A topic's partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PartitionRef {
    pub topic: String,
    pub partition: i32,
}

/// Records `first_offset..=last_offset` of one partition, every one of
/// them applied in the round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundRange {
    pub topic: String,
    pub partition: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    /// The last record was the partition's newest when read.
    pub last_caught_up: bool,
}

/// An idle tick: the cluster's clock moved to `time_ms` with no record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundTick {
    pub cluster: String,
    pub time_ms: i64,
}
