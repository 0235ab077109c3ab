//! What the planner knows about one cluster: a cache of the log, rebuilt by
//! replaying the cluster's inputs. Only ordered maps, so serialising it (for
//! the store and the decision digest) is deterministic.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use std::collections::BTreeSet;

use crate::records::{AgentLaunch, CommandAction, FailureKind, JobSpec, Severity};

/// The snapshots of one job the planner knows of.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobSnapshots {
    /// Ranks per node of the generation that wrote them.
    pub local_world: i32,
    /// rank → holder node → steps held, oldest first.
    pub held: BTreeMap<i32, BTreeMap<String, Vec<i64>>>,
}

impl JobSnapshots {
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// What a job's snapshots cost, as its agents measured: per rank, the
/// newest report. The interval is chosen from the slowest rank, since a
/// step waits for every rank.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SnapshotCosts {
    /// rank → microseconds its training thread spent in `save()`.
    pub block_us: BTreeMap<i32, i64>,
    /// rank → its mean training step, microseconds.
    pub step_us: BTreeMap<i32, i64>,
    /// rank → microseconds its newest replica took to reach the holder.
    pub transfer_us: BTreeMap<i32, i64>,
}

impl SnapshotCosts {
    pub fn is_empty(&self) -> bool {
        self.block_us.is_empty() && self.step_us.is_empty() && self.transfer_us.is_empty()
    }
}

/// A node's health as the planner tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Healthy,
    /// Had a SEV2/SEV3 fault; still scheduled.
    Suspect,
    /// SEV1: taken out of every plan.
    Isolated,
    /// Isolation done; with the operators until `node_repaired`.
    Repairing,
    /// The scheduler holds it out (reported down, or drained by someone
    /// else): out of plans until `node_repaired`, and not unicron's to give
    /// back.
    Held,
    /// Joined or repaired, waiting for its pre-flight check to pass
    /// (`planner.preflight`): out of plans.
    Checking,
}

impl Health {
    pub fn schedulable(self) -> bool {
        matches!(self, Health::Healthy | Health::Suspect)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub gpus: u32,
    pub health: Health,
    /// Event times of the failures seen on this node, newest last (bounded).
    pub failures: Vec<i64>,
    /// Where other nodes reach it, as its agent announced (master address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Its agent's snapshot service (replicas go to and come from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_address: Option<String>,
    /// Figures of its newest passing pre-flight check: the pool's median
    /// judges the next node checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked: Option<CheckFigures>,
    /// Repaired after unicron isolated it: given back to the scheduler
    /// once its check passes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub give_back_on_pass: bool,
}

impl Node {
    /// A healthy node of `gpus` GPUs nothing else is known of.
    pub fn new(gpus: u32) -> Node {
        Node {
            gpus,
            health: Health::Healthy,
            failures: Vec::new(),
            address: None,
            snapshot_address: None,
            checked: None,
            give_back_on_pass: false,
        }
    }
}

/// What a passing pre-flight check measured.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CheckFigures {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matmul_gflops: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allreduce_gbps: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Submitted, never placed.
    Pending,
    Running,
    /// Placed on no node, waiting for capacity.
    Paused,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub spec: JobSpec,
    pub status: JobStatus,
    /// Nodes it runs on, sorted.
    pub nodes: Vec<String>,
    /// Largest size it ran at; elastic policies regrow towards it.
    pub peak_gpus: u32,
    /// Set when unicron agents start its workers: start commands then
    /// carry a rendezvous. Fields of agent-launched jobs are left out of
    /// the serialised state when unset, so the state (and every decision's
    /// digest) of other jobs is what it was before they existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<AgentLaunch>,
    /// Starts handed out so far: the rendezvous generation.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: i64,
    /// Starts after failures so far, against `launch.restart_budget`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: i64,
    /// The in-memory snapshots its agents hold.
    #[serde(default, skip_serializing_if = "JobSnapshots::is_empty")]
    pub snapshots: JobSnapshots,
    /// What its snapshots cost (the interval is chosen from it).
    #[serde(default, skip_serializing_if = "SnapshotCosts::is_empty")]
    pub snapshot_costs: SnapshotCosts,
    /// What its restores cost, by start action, as its agents measured.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub restore_costs: BTreeMap<String, RestoreCost>,
    /// Its newest start commands issued after a failure (bounded): only
    /// their restores are transition costs.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub failure_starts: VecDeque<String>,
}

/// Start commands after failures a job remembers, for pricing restores.
pub const FAILURE_STARTS: usize = 16;

/// Measured restores of one action: each start command counts once, at
/// the time its slowest rank took to its first step.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RestoreCost {
    pub count: u64,
    pub total_s: f64,
    /// The newest command counted, and its slowest rank so far.
    pub command_id: String,
    pub slowest_ms: i64,
}

impl RestoreCost {
    /// Adds one rank's measurement of `command_id`.
    pub fn add(&mut self, command_id: &str, restore_ms: i64) {
        let ms = restore_ms.max(0);
        if self.command_id == command_id {
            if ms > self.slowest_ms {
                self.total_s += (ms - self.slowest_ms) as f64 / 1000.0;
                self.slowest_ms = ms;
            }
            return;
        }
        self.command_id = command_id.to_string();
        self.slowest_ms = ms;
        self.count += 1;
        self.total_s += ms as f64 / 1000.0;
    }

    pub fn mean_s(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total_s / self.count as f64
        }
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl Job {
    /// The size the job wants back: the largest it ran at, or its maximum
    /// if it never ran.
    pub fn target_gpus(&self) -> u32 {
        if self.peak_gpus > 0 {
            self.peak_gpus
        } else {
            self.spec.max_gpus.max(0) as u32
        }
    }
}

/// A command issued and not yet finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InFlight {
    pub action: CommandAction,
    pub job: Option<String>,
    pub node: Option<String>,
    pub severity: Severity,
    pub failure_id: Option<String>,
    pub issued_ms: i64,
    /// Nodes whose agents have still to answer; the command is done when
    /// all have succeeded. Empty: the first final result decides.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub awaiting: BTreeSet<String>,
}

/// One recent fault, for repeat detection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecentFault {
    pub time_ms: i64,
    pub job: Option<String>,
    pub node: Option<String>,
    pub kind: FailureKind,
}

/// TransitionStats transition durations of one action.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct TransitionStats {
    pub count: u64,
    pub total_s: f64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ClusterState {
    pub id: String,
    pub nodes: BTreeMap<String, Node>,
    pub jobs: BTreeMap<String, Job>,
    pub in_flight: BTreeMap<String, InFlight>,
    pub recent_faults: Vec<RecentFault>,
    /// Event times of failures that hit jobs, newest last (bounded): the MTBF.
    pub failure_times: Vec<i64>,
    pub observed: BTreeMap<String, TransitionStats>,
    /// Highest event time seen: the cluster's watermark.
    pub watermark_ms: i64,
    /// Ids of the newest failures applied (bounded): the detector delivers
    /// at least once, with ids derived from what it found, so a repeat of
    /// an id is the same failure and must not act twice.
    #[serde(default)]
    pub applied_failures: std::collections::VecDeque<String>,
}

/// How many failure ids a cluster remembers for deduplication.
pub const APPLIED_FAILURES: usize = 1024;

impl ClusterState {
    /// A state the planner can plan with: a cluster id, and every job's
    /// spec passing the admission checks of a newly submitted job. A state
    /// read back from a store or a checkpoint is checked, so a corrupt one
    /// is refused instead of stopping the planner later.
    pub fn validate(&self) -> Result<(), String> {
        if self.id.is_empty() {
            return Err("cluster state names no cluster".into());
        }
        for (id, job) in &self.jobs {
            super::validate_spec(&job.spec)
                .map_err(|reason| format!("cluster {}: job {id}: {reason}", self.id))?;
        }
        Ok(())
    }

    pub fn new(id: &str) -> ClusterState {
        ClusterState {
            id: id.to_string(),
            ..ClusterState::default()
        }
    }

    /// The job running on `node`, if any.
    pub fn job_on(&self, node: &str) -> Option<&str> {
        self.jobs
            .iter()
            .find(|(_, job)| job.nodes.iter().any(|n| n == node))
            .map(|(id, _)| id.as_str())
    }

    /// Schedulable nodes, sorted by name.
    pub fn schedulable_nodes(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.health.schedulable())
            .map(|(id, _)| id.as_str())
            .collect()
    }

    /// Schedulable nodes no job runs on, sorted by name.
    pub fn free_nodes(&self) -> Vec<String> {
        // One pass over the placements, not one per node: a lookup per
        // node made this quadratic in the cluster's size.
        let placed: std::collections::BTreeSet<&str> = self
            .jobs
            .values()
            .flat_map(|job| job.nodes.iter().map(String::as_str))
            .collect();
        self.schedulable_nodes()
            .into_iter()
            .filter(|n| !placed.contains(n))
            .map(str::to_string)
            .collect()
    }

    /// GPUs of a node list.
    pub fn gpus_of(&self, nodes: &[String]) -> u32 {
        nodes
            .iter()
            .filter_map(|n| self.nodes.get(n))
            .map(|n| n.gpus)
            .sum()
    }
}
