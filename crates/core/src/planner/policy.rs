//! Recovery policies behind one trait: Unicron's, and the two baselines the
//! evaluation compares it with. A policy changes the cluster state through
//! the helpers of `replan` and says which commands make it so.

use std::collections::BTreeSet;

use crate::records::{CommandAction, FailureKind, Severity};

use super::config::{PlannerConfig, PolicyName};
use super::replan::{self, Action, Plan};
use super::state::{ClusterState, JobStatus};

/// A failure as a policy sees it, after escalation.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub job: Option<String>,
    pub node: Option<String>,
    pub kind: FailureKind,
    pub severity: Severity,
    /// `straggler`: the node's compute time over its peers' median.
    pub slowdown: Option<f64>,
}

pub trait Policy {
    fn name(&self) -> PolicyName;

    /// Answers a failure.
    fn on_failure(&self, config: &PlannerConfig, state: &mut ClusterState, hit: &Hit) -> Plan;

    /// Answers a change of capacity or demand: a job arrived, changed or
    /// finished, a node joined, was repaired or removed (`hit_job` lost a
    /// node to it).
    fn on_capacity_change(
        &self,
        config: &PlannerConfig,
        state: &mut ClusterState,
        hit_job: Option<&str>,
    ) -> Plan;
}

pub fn policy(name: PolicyName) -> &'static dyn Policy {
    match name {
        PolicyName::Unicron => &Unicron,
        PolicyName::CheckpointRestart => &CheckpointRestart,
        PolicyName::ElasticSingleJob => &ElasticSingleJob,
    }
}

pub(super) fn describe(hit: &Hit) -> String {
    let mut text = format!("{} {}", hit.severity, hit.kind);
    if let Some(node) = &hit.node {
        text.push_str(&format!(" on {node}"));
    }
    if let Some(job) = &hit.job {
        text.push_str(&format!(" (job {job})"));
    }
    text
}

pub(super) fn with_snapshot(
    config: &PlannerConfig,
    state: &ClusterState,
    actions: Vec<Action>,
    reason: String,
) -> Plan {
    let (alternatives, assignment) = replan::snapshot(config, state);
    Plan {
        actions,
        alternatives,
        chosen_index: Some(0),
        assignment,
        reason,
    }
}

/// Restart of the hit job in place.
fn restart(state: &ClusterState, hit: &Hit, job: &str) -> Action {
    let mut action = Action::for_job(CommandAction::Restart, job, hit.severity);
    action.restore_from = Some(replan::restore_source(state, job, hit.node.as_deref()));
    action.node = hit.node.clone();
    action
}

/// Isolation of `node`, taken from job `from`. The command names the job
/// only if unicron agents run it: they carry on without the node, so a
/// scheduler may release it from the job's allocation. Other jobs'
/// allocations stay the scheduler's business.
pub(super) fn isolate_action(
    state: &ClusterState,
    node: &str,
    from: Option<&str>,
    severity: Severity,
) -> Action {
    let leaves = from.filter(|j| state.jobs.get(*j).is_some_and(|j| j.launch.is_some()));
    Action {
        action: CommandAction::IsolateNode,
        job: None,
        nodes: vec![node.to_string()],
        restore_from: None,
        severity,
        node: Some(node.to_string()),
        leaves: leaves.map(str::to_string),
    }
}

/// Gives `node` back to the scheduler after its repair.
pub(crate) fn return_action(node: &str) -> Action {
    Action {
        action: CommandAction::ReturnNode,
        job: None,
        nodes: vec![node.to_string()],
        restore_from: None,
        severity: Severity::Unknown,
        node: Some(node.to_string()),
        leaves: None,
    }
}

/// Unicron: SEV3 reattempt in place, SEV2 restart from the nearest replica,
/// SEV1 isolate and re-plan every job with the dynamic programme. (A
/// measured straggler is priced before this, in `stragglers`.)
pub struct Unicron;

impl Policy for Unicron {
    fn name(&self) -> PolicyName {
        PolicyName::Unicron
    }

    fn on_failure(&self, config: &PlannerConfig, state: &mut ClusterState, hit: &Hit) -> Plan {
        let what = describe(hit);
        match (hit.severity, hit.job.as_deref(), hit.node.as_deref()) {
            (Severity::Sev1, _, Some(node)) => {
                let lost_from = replan::isolate(state, node);
                let hit_jobs: BTreeSet<String> =
                    lost_from.iter().chain(hit.job.iter()).cloned().collect();
                let mut plan = replan::replan_all(config, state, &hit_jobs, hit.severity);
                plan.actions.insert(
                    0,
                    isolate_action(state, node, lost_from.as_deref(), hit.severity),
                );
                plan.reason = format!("{what}: isolate {node}; {}", plan.reason);
                plan
            }
            (Severity::Sev3, Some(job), _) => {
                let mut action = Action::for_job(CommandAction::Reattempt, job, hit.severity);
                action.node = hit.node.clone();
                with_snapshot(
                    config,
                    state,
                    vec![action],
                    format!("{what}: reattempt in place"),
                )
            }
            (_, Some(job), _) => {
                let action = restart(state, hit, job);
                let reason = format!(
                    "{what}: restart from {}",
                    action.restore_from.as_deref().unwrap_or("checkpoint")
                );
                with_snapshot(config, state, vec![action], reason)
            }
            (_, None, _) => with_snapshot(
                config,
                state,
                vec![],
                format!("{what}: no job affected, node watched"),
            ),
        }
    }

    fn on_capacity_change(
        &self,
        config: &PlannerConfig,
        state: &mut ClusterState,
        hit_job: Option<&str>,
    ) -> Plan {
        let hit: BTreeSet<String> = hit_job.map(str::to_string).into_iter().collect();
        replan::replan_all(config, state, &hit, Severity::Sev1)
    }
}

/// Megatron-like baseline: any failure restarts the job from its checkpoint
/// at the same size; a job that lost a node waits until a node is free.
pub struct CheckpointRestart;

impl CheckpointRestart {
    /// Brings `job` back to its fixed size from free nodes, or pauses it.
    fn refill(
        config: &PlannerConfig,
        state: &mut ClusterState,
        job: &str,
        severity: Severity,
    ) -> Option<Action> {
        let j = state.jobs.get(job)?;
        let need = (j.peak_gpus / config.node_gpus.max(1)) as usize;
        let mut nodes = j.nodes.clone();
        let free = state.free_nodes();
        if nodes.len() + free.len() < need {
            return replan::place(state, job, vec![], true, severity);
        }
        nodes.extend(free.into_iter().take(need - nodes.len()));
        let mut action = replan::place(state, job, nodes, true, severity)?;
        if action.action != CommandAction::Pause {
            action.restore_from = Some("checkpoint".to_string());
        }
        Some(action)
    }

    /// Starts waiting jobs, in id order, at their fixed size when it fits.
    fn start_waiting(config: &PlannerConfig, state: &mut ClusterState) -> Vec<Action> {
        let unit = config.node_gpus.max(1);
        let waiting: Vec<String> = state
            .jobs
            .iter()
            .filter(|(_, j)| j.status != JobStatus::Running)
            .map(|(id, _)| id.clone())
            .collect();
        let mut actions = Vec::new();
        for job in waiting {
            let j = &state.jobs[&job];
            let size = j.target_gpus();
            let need = (size / unit) as usize;
            let free = state.free_nodes();
            if need > 0 && free.len() >= need && size >= j.spec.min_gpus.max(0) as u32 {
                let nodes = free.into_iter().take(need).collect();
                actions.extend(replan::place(state, &job, nodes, false, Severity::Sev1));
            }
        }
        actions
    }
}

impl Policy for CheckpointRestart {
    fn name(&self) -> PolicyName {
        PolicyName::CheckpointRestart
    }

    fn on_failure(&self, config: &PlannerConfig, state: &mut ClusterState, hit: &Hit) -> Plan {
        let what = describe(hit);
        let mut actions = Vec::new();
        let mut job = hit.job.clone();
        if let (Severity::Sev1, Some(node)) = (hit.severity, hit.node.as_deref()) {
            let lost_from = replan::isolate(state, node);
            actions.push(isolate_action(
                state,
                node,
                lost_from.as_deref(),
                hit.severity,
            ));
            job = lost_from.or(job);
        }
        match job {
            Some(job) if hit.severity == Severity::Sev1 && hit.node.is_some() => {
                actions.extend(Self::refill(config, state, &job, hit.severity));
            }
            Some(job) => {
                let mut action = Action::for_job(CommandAction::Restart, &job, hit.severity);
                action.restore_from = Some("checkpoint".to_string());
                action.node = hit.node.clone();
                actions.push(action);
            }
            None => {}
        }
        let reason = format!("{what}: restart from checkpoint at the same size");
        with_snapshot(config, state, actions, reason)
    }

    fn on_capacity_change(
        &self,
        config: &PlannerConfig,
        state: &mut ClusterState,
        hit_job: Option<&str>,
    ) -> Plan {
        let mut actions = Vec::new();
        if let Some(job) = hit_job {
            actions.extend(Self::refill(config, state, job, Severity::Sev1));
        }
        actions.extend(Self::start_waiting(config, state));
        with_snapshot(
            config,
            state,
            actions,
            "start waiting jobs that fit at their full size".to_string(),
        )
    }
}

/// Oobleck/Varuna-like baseline: the hit job shrinks to what it has left
/// (plus free nodes) and regrows when nodes come back; no job moves for
/// another. Every failure restarts (no in-place reattempt).
pub struct ElasticSingleJob;

impl ElasticSingleJob {
    /// Resizes `job` towards `target` GPUs with its nodes and free ones, in
    /// whole replicas: nodes that would not complete one are neither taken
    /// nor kept. `free` caches the free nodes across the resizes of one
    /// plan (finding them walks the cluster, and a capacity change resizes
    /// every job): nodes taken leave it, a shrink empties it.
    fn resize(
        config: &PlannerConfig,
        state: &mut ClusterState,
        job: &str,
        target: u32,
        hit: bool,
        severity: Severity,
        free: &mut Option<Vec<String>>,
    ) -> Option<Action> {
        let unit = config.node_gpus.max(1);
        let j = state.jobs.get(job)?;
        let (min, max) = (j.spec.min_gpus.max(0) as u32, j.spec.max_gpus.max(0) as u32);
        let step = replan::replica_nodes(unit, j.spec.unit_gpus);
        let whole = |n: usize| n - n % step;
        let mut nodes = j.nodes.clone();
        let want = whole((target.min(max) / unit) as usize);
        if nodes.len() < want {
            let spare = free.get_or_insert_with(|| state.free_nodes());
            let take = (want - nodes.len()).min(spare.len());
            nodes.extend(spare.drain(..take));
        }
        let keep = whole(nodes.len().min(want));
        if nodes.len() > keep || (keep as u32) * unit < min {
            *free = None;
        }
        nodes.truncate(keep);
        if (nodes.len() as u32) * unit < min {
            nodes.clear();
        }
        replan::place(state, job, nodes, hit, severity)
    }
}

impl Policy for ElasticSingleJob {
    fn name(&self) -> PolicyName {
        PolicyName::ElasticSingleJob
    }

    fn on_failure(&self, config: &PlannerConfig, state: &mut ClusterState, hit: &Hit) -> Plan {
        let what = describe(hit);
        match (hit.severity, hit.node.as_deref()) {
            (Severity::Sev1, Some(node)) => {
                let lost_from = replan::isolate(state, node);
                let mut actions = vec![isolate_action(
                    state,
                    node,
                    lost_from.as_deref(),
                    hit.severity,
                )];
                let job = lost_from.or(hit.job.clone());
                if let Some(job) = job {
                    let target = state.jobs.get(&job).map_or(0, |j| j.peak_gpus);
                    actions.extend(Self::resize(
                        config,
                        state,
                        &job,
                        target,
                        true,
                        hit.severity,
                        &mut None,
                    ));
                }
                with_snapshot(
                    config,
                    state,
                    actions,
                    format!("{what}: isolate {node}, shrink the hit job"),
                )
            }
            _ => match hit.job.as_deref() {
                Some(job) => {
                    let action = restart(state, hit, job);
                    with_snapshot(config, state, vec![action], format!("{what}: restart"))
                }
                None => with_snapshot(config, state, vec![], format!("{what}: no job affected")),
            },
        }
    }

    fn on_capacity_change(
        &self,
        config: &PlannerConfig,
        state: &mut ClusterState,
        hit_job: Option<&str>,
    ) -> Plan {
        let mut actions = Vec::new();
        let ids: Vec<String> = state.jobs.keys().cloned().collect();
        let mut free = None;
        for job in ids {
            let j = &state.jobs[&job];
            let target = j.target_gpus();
            let hit = hit_job == Some(job.as_str());
            actions.extend(Self::resize(
                config,
                state,
                &job,
                target,
                hit,
                Severity::Sev1,
                &mut free,
            ));
        }
        with_snapshot(
            config,
            state,
            actions,
            "grow jobs below their size from free nodes".to_string(),
        )
    }
}
