//! Inventory and job changes (`unicron.cluster`), with the job specs and
//! agent reports they carry.

use serde::{Deserialize, Serialize};

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
    /// An agent ran the pre-flight check on its node (`check`).
    NodeChecked,
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
    /// node_checked: what the node's pre-flight check found (boxed: rare).
    #[serde(default)]
    pub check: Option<Box<NodeCheck>>,
}

/// What a node's pre-flight check measured and what failed (see
/// `schemas/ClusterEvent.avsc`). The planner judges the figures against
/// the pool's, so replay reaches the same verdict.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NodeCheck {
    /// The `check_node` command it answers (`None`: checked at start).
    #[serde(default)]
    pub command_id: Option<String>,
    #[serde(default)]
    pub duration_ms: i64,
    /// Why the node fails, one entry per part; a part that could not run
    /// is a failure with its reason. Empty: it passed.
    #[serde(default)]
    pub failures: Vec<String>,
    /// Parts not run, and why (no GPU tools, no healthy peer).
    #[serde(default)]
    pub skipped: Vec<String>,
    #[serde(default)]
    pub matmul_gflops: Option<f64>,
    #[serde(default)]
    pub memory_gbps: Option<f64>,
    #[serde(default)]
    pub allreduce_gbps: Option<f64>,
    #[serde(default)]
    pub peer: Option<String>,
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
    /// Own snapshots: microseconds the worker's training thread spent in
    /// `save()` for it (0: not measured).
    #[serde(default)]
    pub block_us: i64,
    /// Own snapshots: the worker's mean training step, microseconds, as
    /// its `save()` calls are spaced (0: not measured).
    #[serde(default)]
    pub step_us: i64,
    /// Replicas: microseconds from the first byte of the replica arriving
    /// here to it being held (0: not measured).
    #[serde(default)]
    pub transfer_us: i64,
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
            check: None,
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
