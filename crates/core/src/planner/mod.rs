//! The planner as a pure state machine: `apply` one input record (a
//! failure, a cluster event or a command result), get the decision and
//! commands it leads to. Same inputs in the same order give byte-identical
//! outputs (docs/design.md §4): no clock, ordered maps, deterministic ids and
//! signatures.

mod cluster_events;
mod config;
mod decide;
mod failures;
mod interval;
mod policy;
mod preflight;
mod replan;
mod results;
pub mod snapshots;
mod spares;
mod state;
mod stragglers;

use std::collections::{BTreeMap, BTreeSet};

pub use config::{DEFAULT_ISOLATION_SHARE, PlannerConfig, PolicyName};
pub use policy::{Hit, Policy, policy};
pub use replan::{Action, Plan};
pub use state::{
    ClusterState, Health, InFlight, Job, JobStatus, Node, RecentFault, RestoreCost, SnapshotCosts,
    TransitionStats,
};

pub(crate) use cluster_events::validate_spec;

use crate::records::{ClusterEvent, Command, CommandResult, Decision, FailureEvent};
use crate::signing::CommandSigner;

/// Version of the decision logic; bump it when the same inputs would lead
/// to different decisions, so replay can tell a bug from a policy change.
pub const POLICY_VERSION: &str = "4";

/// The trigger kind of decisions that only note an agent's snapshots: a
/// few a second per node, so views of recent decisions leave them out.
pub const SNAPSHOT_REPORT: &str = "snapshot_report";

/// One input record and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub event: InputEvent,
}

#[derive(Debug, Clone, PartialEq)]
pub enum InputEvent {
    Failure(FailureEvent),
    Cluster(ClusterEvent),
    Result(CommandResult),
}

impl InputEvent {
    pub fn cluster(&self) -> &str {
        match self {
            InputEvent::Failure(f) => &f.cluster,
            InputEvent::Cluster(c) => &c.cluster,
            InputEvent::Result(r) => &r.cluster,
        }
    }

    pub fn time_ms(&self) -> i64 {
        match self {
            InputEvent::Failure(f) => f.detected_ms,
            InputEvent::Cluster(c) => c.time_ms,
            InputEvent::Result(r) => r.time_ms,
        }
    }
}

/// What one input leads to.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Decision(Decision),
    Command(Command),
    /// The input is impossible (e.g. a node event without a node): it goes
    /// to the dead-letter topic with this reason and changes nothing.
    Rejected(String),
}

/// The planner of every cluster it has seen.
#[derive(Debug)]
pub struct Planner {
    config: PlannerConfig,
    signer: CommandSigner,
    clusters: BTreeMap<String, ClusterState>,
    /// Decisions carry the digest of the state they were taken on.
    digests: bool,
}

impl Planner {
    pub fn new(config: PlannerConfig, signer: CommandSigner) -> Planner {
        Planner {
            config,
            signer,
            clusters: BTreeMap::new(),
            digests: true,
        }
    }

    /// A planner whose decisions leave `inputs_digest` empty: for the
    /// offline evaluation, which compares policies and never replays its
    /// decisions. Hashing the whole state is a third of a decision's cost
    /// at 10,240 GPUs. The decisions are otherwise the same.
    pub fn without_digests(mut self) -> Planner {
        self.digests = false;
        self
    }

    pub fn config(&self) -> &PlannerConfig {
        &self.config
    }

    pub fn cluster(&self, id: &str) -> Option<&ClusterState> {
        self.clusters.get(id)
    }

    pub fn clusters(&self) -> impl Iterator<Item = &ClusterState> {
        self.clusters.values()
    }

    /// Installs a cluster's state loaded from the store or a checkpoint,
    /// once it passes the checks a new job's spec passes; otherwise says
    /// what is wrong and installs nothing.
    pub fn restore(&mut self, state: ClusterState) -> Result<(), String> {
        state.validate()?;
        self.clusters.insert(state.id.clone(), state);
        Ok(())
    }

    /// Forgets a cluster (its partition moved to another instance).
    pub fn evict(&mut self, id: &str) -> Option<ClusterState> {
        self.clusters.remove(id)
    }
}

/// What an input leads to, before it becomes a decision and commands.
struct Planned {
    /// The decision's trigger kind.
    trigger_kind: &'static str,
    /// The decision's trigger ref id: the failure, job, node or command.
    ref_id: String,
    plan: Plan,
    /// The failure the commands are caused by, for their causation.
    failure_id: Option<String>,
}

/// A planned input, or why it is rejected.
type Step = Result<Planned, String>;

/// Jobs of a cluster that lost GPUs, for tests and status pages.
pub fn jobs_below_peak(state: &ClusterState) -> BTreeSet<String> {
    state
        .jobs
        .iter()
        .filter(|(_, j)| state.gpus_of(&j.nodes) < j.peak_gpus)
        .map(|(id, _)| id.clone())
        .collect()
}
