//! The planner's tunables. Defaults follow the Unicron paper (docs/design.md §7) where it gives a figure.

use serde::{Deserialize, Serialize};

use crate::records::CommandAction;

/// Which recovery policy decides (`[planner] policy` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyName {
    /// Unicron: cheapest action by severity, cluster-wide re-plan on SEV1.
    Unicron,
    /// Megatron-like: every failure restarts the job from its checkpoint at
    /// the same size, waiting for capacity.
    CheckpointRestart,
    /// Oobleck/Varuna-like: only the hit job shrinks or regrows.
    ElasticSingleJob,
}

impl PolicyName {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyName::Unicron => "unicron",
            PolicyName::CheckpointRestart => "checkpoint-restart",
            PolicyName::ElasticSingleJob => "elastic-single-job",
        }
    }
}

/// Planner settings, the same for every cluster it serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlannerConfig {
    pub policy: PolicyName,
    /// GPUs per node; the allocation unit is one node.
    pub node_gpus: u32,
    /// D_running until the cluster has failure history: expected seconds
    /// until the next reconfiguration.
    pub default_running_s: f64,
    /// Failures whose times estimate the mean time between failures.
    pub mtbf_window: usize,
    /// D_transition per action until observed durations refine it, seconds.
    pub reattempt_s: f64,
    pub restart_s: f64,
    pub reconfigure_s: f64,
    /// The same fault (job, kind) seen this many times within
    /// `escalation_window_s` is escalated one severity.
    pub escalation_repeats: usize,
    pub escalation_window_s: f64,
    /// Alternatives recorded in a decision, best first.
    pub alternatives: usize,
    /// Blast radius: nodes a cluster may have isolated within an hour of
    /// event time. Past it a SEV1 decides "needs an operator" and isolates
    /// nothing, so a bug or a fabric-wide event cannot drain the fleet.
    /// `None`: 2% of the cluster's nodes, at least 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_isolations_per_hour: Option<u32>,
    /// Most of a job's training time its in-memory snapshots may block
    /// (0.02: 2%); a floor under the interval chosen at each start.
    pub snapshot_overhead_budget: f64,
    /// Admit a node to plans only after its agent's pre-flight check
    /// passes (first join, after a repair). Turn on only where every node
    /// runs `unicron agent`: a node nobody checks is never placed.
    pub preflight: bool,
    /// A checked node whose matmul, memory or all-reduce figure is below
    /// this share of the pool's median is slow: kept out like a failed one.
    pub preflight_slow_share: f64,
    /// Port of the pairwise all-reduce between a checked node and its peer.
    pub preflight_port: u16,
    /// Checked nodes the Unicron policy keeps idle per cluster: a job that
    /// loses a node takes one and keeps its size instead of shrinking.
    pub spares: u32,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            policy: PolicyName::Unicron,
            node_gpus: 8,
            default_running_s: 86_400.0,
            mtbf_window: 32,
            reattempt_s: 30.0,
            // The Unicron paper: 9 min re-queue + 14 min set-up for a default restart;
            // a restart from a replica skips the re-queue.
            restart_s: 14.0 * 60.0,
            reconfigure_s: 10.0 * 60.0,
            escalation_repeats: 2,
            escalation_window_s: 300.0,
            alternatives: 4,
            max_isolations_per_hour: None,
            snapshot_overhead_budget: 0.02,
            preflight: false,
            preflight_slow_share: 0.7,
            preflight_port: 29_499,
            spares: 0,
        }
    }
}

/// Share of a cluster's nodes that may be isolated within an hour when
/// `max_isolations_per_hour` is unset.
pub const DEFAULT_ISOLATION_SHARE: f64 = 0.02;

impl PlannerConfig {
    /// The first setting that makes no sense, as (field, why).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let budget = self.snapshot_overhead_budget;
        if !(budget > 0.0 && budget < 1.0) {
            return Err((
                "snapshot_overhead_budget",
                format!("{budget} is not a share between 0 and 1 (0.02: 2%)"),
            ));
        }
        let share = self.preflight_slow_share;
        if !(share > 0.0 && share < 1.0) {
            return Err((
                "preflight_slow_share",
                format!("{share} is not a share between 0 and 1 (0.7: 70% of the median)"),
            ));
        }
        Ok(())
    }

    /// Nodes of a cluster of `nodes` that may be isolated within an hour.
    pub fn isolation_limit(&self, nodes: usize) -> usize {
        self.max_isolations_per_hour.map_or_else(
            || ((nodes as f64 * DEFAULT_ISOLATION_SHARE).ceil() as usize).max(1),
            |n| n as usize,
        )
    }

    /// Configured D_transition of an action, seconds.
    pub fn transition_s(&self, action: CommandAction) -> f64 {
        match action {
            CommandAction::Reattempt => self.reattempt_s,
            CommandAction::Restart => self.restart_s,
            _ => self.reconfigure_s,
        }
    }
}
