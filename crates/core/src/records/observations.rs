//! What nodes report: metric samples (`unicron.telemetry`), log lines
//! (`unicron.logs`) and agent events (`unicron.agent`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    /// Of the iteration's time, what this rank spent in its own compute
    /// (not waiting for peers in collectives), when the worker says.
    #[serde(default)]
    pub compute_ms: Option<f64>,
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
            compute_ms: None,
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
