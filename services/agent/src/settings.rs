//! `[agent]` settings: which node this is, which jobs it may run (their
//! command lines live here and nowhere else), and how it reports.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use unicron_core::{AgentLaunch, JobSpec, ThroughputPoint};

use crate::error::AgentError;

/// One agent: one node of one cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSettings {
    pub cluster: String,
    /// This node's name, as the planner and the other agents know it.
    pub node: String,
    /// Where the other nodes reach this one (a job's MASTER_ADDR when this
    /// node has rank 0). Default: the node name.
    pub address: Option<String>,
    /// GPUs this node counts as in the planner's allocation (its
    /// `node_gpus`): a job of N nodes is N × this many GPUs.
    pub gpus: u32,
    /// The agent's RocksDB store: consumed command offsets and the dedupe
    /// table.
    pub state_dir: PathBuf,
    /// Planner public keys that may sign commands: key id → 64 hex digits.
    pub public_keys: BTreeMap<String, String>,
    /// Commands older than the newest one by more than this are expired;
    /// a fresh agent also ignores commands issued this long before it
    /// started (history, not orders).
    pub command_ttl_s: f64,
    pub heartbeat_interval_s: f64,
    /// Between SIGTERM and SIGKILL when stopping workers. Short: a stopped
    /// process ignores SIGTERM, so a long grace only delays recovery.
    pub stop_grace_s: f64,
    /// Kernel log to follow: `/dev/kmsg`, or a file (tests, or a syslog
    /// file on machines where /dev/kmsg is not readable). Unset: none.
    pub kernel_log: Option<PathBuf>,
    /// Longer worker lines are cut to this many bytes (counted).
    pub max_line_bytes: usize,
    /// Lines per second each worker may publish; the excess is counted
    /// and reported, still passed through to the agent's own output.
    pub max_lines_per_s: u32,
    /// Records waiting for the broker, at most; beyond it new telemetry is
    /// dropped and counted (the workers never wait for Kafka).
    pub buffer_records: usize,
    /// Detect and report, act on no command.
    pub observe_only: bool,
    /// An executor isolates nodes through the scheduler (Slurm) and its
    /// result is the isolation's: the agent stops its workers silently.
    /// Default: on under Slurm (`SLURM_JOB_ID` set), off elsewhere.
    pub scheduler_isolates: bool,
    /// Exit once this node's workers of a job have all exited 0. Default:
    /// on under Slurm, where the agent is a job step and the allocation
    /// ends with it; off elsewhere (a node agent stays for the next job).
    pub exit_when_done: bool,
    /// py-spy's path, for stacks of workers stopped after a failure; unset:
    /// looked up on PATH, and skipped if absent.
    pub py_spy: Option<PathBuf>,
    /// Hold the workers' in-memory snapshots (the Python client's `save`),
    /// served back to them by `restore` on the local socket
    /// `<state_dir>/snapshots.sock`.
    pub snapshots: bool,
    /// Bytes of snapshots this agent holds at most (its own ranks' and the
    /// replicas it keeps for a peer); a snapshot that does not fit is
    /// refused with the reason.
    pub snapshot_memory_limit: u64,
    /// A file with the cluster's shared secret (at least 32 bytes): with it
    /// the agent sends replicas of its snapshots to a peer and keeps a
    /// peer's, each verified by an HMAC-SHA256 under it. Unset: no
    /// replication (snapshots stay on this node).
    pub snapshot_secret_file: Option<PathBuf>,
    /// TCP port of the snapshot service peers send replicas to and fetch
    /// them from (on `address`); 0: any free port, announced to the planner.
    pub snapshot_port: u16,
    /// Python that runs the pre-flight check (`check_node`): the one the
    /// training runs under, so the check imports the same torch.
    pub preflight_python: String,
    /// The whole check's time bound; past it the check fails with that
    /// reason (and the all-reduce's wait for its peer).
    pub preflight_timeout_s: f64,
    /// Seconds each timed part (matmul, memory, all-reduce) runs.
    pub preflight_part_s: f64,
    pub jobs: Vec<JobSettings>,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            cluster: String::new(),
            node: String::new(),
            address: None,
            gpus: 8,
            state_dir: PathBuf::from("unicron-agent-state"),
            public_keys: BTreeMap::new(),
            command_ttl_s: 300.0,
            heartbeat_interval_s: 1.0,
            stop_grace_s: 3.0,
            kernel_log: None,
            max_line_bytes: 4096,
            max_lines_per_s: 200,
            buffer_records: 20_000,
            observe_only: false,
            scheduler_isolates: false,
            exit_when_done: false,
            py_spy: None,
            snapshots: true,
            snapshot_memory_limit: 8 << 30,
            snapshot_secret_file: None,
            snapshot_port: 0,
            preflight_python: "python3".into(),
            preflight_timeout_s: 120.0,
            preflight_part_s: 0.5,
            jobs: Vec::new(),
        }
    }
}

/// A job this node may run. Its command line is only ever read from here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobSettings {
    pub id: String,
    /// Program and arguments, as after `torchrun ... --`.
    pub command: Vec<String>,
    pub nproc_per_node: u32,
    pub min_nodes: u32,
    pub max_nodes: u32,
    /// Priority weight in the planner's objective.
    pub weight: f64,
    /// Relative throughput by node count, `[[1, 1.0], [2, 1.9]]`; default
    /// linear in nodes.
    pub throughput: Vec<(u32, f64)>,
    /// Data-parallel degree at full size: with more than one, a restart
    /// may restore from a live replica.
    pub dp_degree: u32,
    pub checkpoint_interval_s: i64,
    /// Extra progress patterns: regexes with a named group `iteration` and
    /// optionally `ms` (iteration time). The built-in ones stay on.
    pub progress_patterns: Vec<String>,
    pub workdir: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    /// Master ports are this plus the generation modulo 1000.
    pub master_port_base: u16,
    /// Restarts after failures the job may have in all; unset: no limit.
    pub restart_budget: Option<u32>,
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            id: String::new(),
            command: Vec::new(),
            nproc_per_node: 1,
            min_nodes: 1,
            max_nodes: 1,
            weight: 1.0,
            throughput: Vec::new(),
            dp_degree: 1,
            checkpoint_interval_s: 600,
            progress_patterns: Vec::new(),
            workdir: None,
            env: BTreeMap::new(),
            master_port_base: 29500,
            restart_budget: None,
        }
    }
}

fn config(message: String) -> AgentError {
    AgentError::Config(message)
}

impl AgentSettings {
    /// Every field the agent needs is there and makes sense; the error
    /// names the field.
    pub fn validate(&self) -> Result<(), AgentError> {
        if self.cluster.is_empty() {
            return Err(config("agent.cluster: required (--cluster)".into()));
        }
        if self.node.is_empty() {
            return Err(config("agent.node: required (--node)".into()));
        }
        if self.gpus == 0 {
            return Err(config("agent.gpus: must be at least 1".into()));
        }
        if self.snapshots && self.snapshot_memory_limit == 0 {
            return Err(config(
                "agent.snapshot_memory_limit: must be above 0 (or agent.snapshots = false)".into(),
            ));
        }
        for (name, value) in [
            ("agent.command_ttl_s", self.command_ttl_s),
            ("agent.heartbeat_interval_s", self.heartbeat_interval_s),
            ("agent.stop_grace_s", self.stop_grace_s),
            ("agent.preflight_timeout_s", self.preflight_timeout_s),
            ("agent.preflight_part_s", self.preflight_part_s),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(config(format!(
                    "{name}: must be a positive number of seconds"
                )));
            }
        }
        if self.max_lines_per_s == 0 || self.max_line_bytes == 0 || self.buffer_records == 0 {
            return Err(config(
                "agent.max_lines_per_s, max_line_bytes, buffer_records: must be at least 1".into(),
            ));
        }
        if self.public_keys.is_empty() && !self.observe_only {
            return Err(config(
                "agent.public_keys: at least one planner key is needed to act (--planner-key FILE), or observe_only".into(),
            ));
        }
        if self.jobs.is_empty() && !self.observe_only {
            return Err(config(
                "agent.jobs: at least one job (--job J -- COMMAND ARGS...)".into(),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, job) in self.jobs.iter().enumerate() {
            let at = format!("agent.jobs[{i}]");
            if job.id.is_empty() {
                return Err(config(format!("{at}.id: required")));
            }
            if !seen.insert(job.id.as_str()) {
                return Err(config(format!("{at}.id: `{}` declared twice", job.id)));
            }
            if job.command.is_empty() {
                return Err(config(format!(
                    "{at}.command: required (the program to run)"
                )));
            }
            if job.nproc_per_node == 0 {
                return Err(config(format!("{at}.nproc_per_node: must be at least 1")));
            }
            if job.min_nodes == 0 || job.max_nodes < job.min_nodes {
                return Err(config(format!(
                    "{at}.min_nodes/max_nodes: {} and {} are not 1 ≤ min ≤ max",
                    job.min_nodes, job.max_nodes
                )));
            }
            if !(job.weight.is_finite() && job.weight >= 0.0) {
                return Err(config(format!(
                    "{at}.weight: must be a non-negative number"
                )));
            }
            for pattern in &job.progress_patterns {
                let re = regex::Regex::new(pattern)
                    .map_err(|e| config(format!("{at}.progress_patterns: {e}")))?;
                if !re.capture_names().any(|n| n == Some("iteration")) {
                    return Err(config(format!(
                        "{at}.progress_patterns: `{pattern}` has no named group `iteration`"
                    )));
                }
            }
        }
        Ok(())
    }

    pub fn address(&self) -> String {
        self.address.clone().unwrap_or_else(|| self.node.clone())
    }

    pub fn job(&self, id: &str) -> Option<&JobSettings> {
        self.jobs.iter().find(|j| j.id == id)
    }

    /// The consumer group of this agent alone: agents never share one, or
    /// the group would split the cluster's commands among them.
    pub fn group(&self) -> String {
        format!("unicron-agent.{}.{}", self.cluster, self.node)
    }

    /// Environment marker of every process this agent starts, so it (or
    /// its next incarnation) can find them, DataLoader children included.
    pub fn fence_tag(&self) -> String {
        format!("{}/{}", self.cluster, self.node)
    }
}

impl JobSettings {
    /// The job as the planner sees it on the cluster topic: sizes, weight,
    /// profile; never the command line.
    pub fn spec(&self, node_gpus: u32) -> JobSpec {
        let gpus = |nodes: u32| (nodes * node_gpus) as i32;
        let throughput = if self.throughput.is_empty() {
            (self.min_nodes..=self.max_nodes)
                .map(|n| ThroughputPoint {
                    gpus: gpus(n),
                    flops: f64::from(n) * 1e12,
                })
                .collect()
        } else {
            self.throughput
                .iter()
                .map(|&(n, relative)| ThroughputPoint {
                    gpus: gpus(n),
                    flops: relative * 1e12,
                })
                .collect()
        };
        JobSpec {
            weight: self.weight,
            min_gpus: gpus(self.min_nodes),
            max_gpus: gpus(self.max_nodes),
            unit_gpus: node_gpus as i32,
            dp_degree: self.dp_degree as i32,
            checkpoint_interval_s: self.checkpoint_interval_s,
            throughput,
        }
    }

    pub fn launch(&self) -> AgentLaunch {
        AgentLaunch {
            master_port_base: i32::from(self.master_port_base),
            restart_budget: self.restart_budget.map(|b| b as i32),
        }
    }
}
