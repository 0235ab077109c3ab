//! What the policies share: the allocation problem built from a cluster's
//! state, node assignment, and the state changes an action implies.

use std::collections::{BTreeMap, BTreeSet};

use crate::allocation::{Allocation, JobDemand, Problem, Profile};
use crate::records::{Alternative, CommandAction, Severity};

use super::config::PlannerConfig;
use super::state::{ClusterState, Health, Job, JobStatus};

/// One command a policy wants issued.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    pub action: CommandAction,
    pub job: Option<String>,
    pub nodes: Vec<String>,
    pub restore_from: Option<String>,
    /// Severity the action answers (for escalation if it fails).
    pub severity: Severity,
    /// The node at fault, if any.
    pub node: Option<String>,
    /// isolate_node: the job the node is taken from. Named in the command
    /// (not tracked in flight) so a scheduler can release the node from
    /// that job's allocation.
    pub leaves: Option<String>,
}

impl Action {
    pub fn for_job(action: CommandAction, job: &str, severity: Severity) -> Action {
        Action {
            action,
            job: Some(job.to_string()),
            nodes: Vec::new(),
            restore_from: None,
            severity,
            node: None,
            leaves: None,
        }
    }
}

/// A policy's answer to one trigger.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub alternatives: Vec<Alternative>,
    pub chosen_index: Option<i32>,
    pub assignment: BTreeMap<String, Vec<String>>,
    pub reason: String,
}

/// D_running: the mean time between the cluster's recent failures, or the
/// configured default until there are two.
pub fn running_s(config: &PlannerConfig, state: &ClusterState) -> f64 {
    let all = &state.failure_times;
    let times = &all[all.len().saturating_sub(config.mtbf_window.max(2))..];
    if times.len() < 2 {
        return config.default_running_s;
    }
    let span_ms = (times[times.len() - 1] - times[0]).max(0) as f64;
    let mean = span_ms / 1000.0 / (times.len() - 1) as f64;
    if mean > 0.0 {
        mean
    } else {
        config.default_running_s
    }
}

/// D_transition of an action: the mean of observed durations once there
/// are any, else the configured figure.
pub fn transition_s(config: &PlannerConfig, state: &ClusterState, action: CommandAction) -> f64 {
    match state.observed.get(action.symbol()) {
        Some(seen) if seen.count > 0 => seen.total_s / seen.count as f64,
        _ => config.transition_s(action),
    }
}

/// D_transition of moving `job` to a new size: what its own restores took
/// as its agents measured them (a reconfiguration, else a restart: for an
/// agent-launched job both stop and start every worker), else the
/// cluster-wide figure. Returns the estimate and where it came from.
pub fn job_transition_s(
    config: &PlannerConfig,
    state: &ClusterState,
    job: &Job,
) -> (f64, &'static str) {
    for action in [CommandAction::Reconfigure, CommandAction::Restart] {
        if let Some(cost) = job.restore_costs.get(action.symbol())
            && cost.count > 0
        {
            return (cost.mean_s(), "measured");
        }
    }
    let source = if state
        .observed
        .get(CommandAction::Reconfigure.symbol())
        .is_some_and(|o| o.count > 0)
    {
        "observed"
    } else {
        "configured"
    };
    (
        transition_s(config, state, CommandAction::Reconfigure),
        source,
    )
}

/// Nodes that hold a whole number of a job's own units (`unit_gpus`: one
/// replica, which may span nodes): its sizes are multiples of this.
pub fn replica_nodes(node_gpus: u32, unit_gpus: i32) -> usize {
    let node = u64::from(node_gpus.max(1));
    let own = u64::from(unit_gpus.max(1) as u32);
    let (mut a, mut b) = (node, own);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    (own / a) as usize
}

/// The allocation problem of the cluster as it is now. Jobs in id order;
/// each node is one allocation unit of `node_gpus`.
pub fn problem(config: &PlannerConfig, state: &ClusterState, hit: &BTreeSet<String>) -> Problem {
    let unit = config.node_gpus.max(1);
    let nodes = state.schedulable_nodes().len() as u32;
    let capacity = nodes.saturating_sub(super::spares::reserve(config, state)) * unit;
    let jobs = state
        .jobs
        .iter()
        .map(|(id, job)| {
            let points = job
                .spec
                .throughput
                .iter()
                .map(|p| (p.gpus.max(0) as u32, p.flops))
                .collect();
            JobDemand {
                id: id.clone(),
                weight: job.spec.weight,
                min_gpus: job.spec.min_gpus.max(0) as u32,
                max_gpus: job.spec.max_gpus.max(0) as u32,
                unit_gpus: job.spec.unit_gpus.max(0) as u32,
                current_gpus: job.nodes.len() as u32 * unit,
                hit: hit.contains(id),
                transition_s: job_transition_s(config, state, job).0,
                // Specs are validated at admission and on restore; a spec
                // that still fails plans as a job with no throughput.
                profile: Profile::new(points, "throughput").unwrap_or_else(|_| Profile::zero()),
            }
        })
        .collect();
    Problem {
        gpus: capacity,
        unit,
        running_s: running_s(config, state),
        jobs,
    }
}

/// An evaluated allocation as a decision records it.
pub fn alternative(problem: &Problem, allocation: &Allocation) -> Alternative {
    Alternative {
        allocation: problem
            .jobs
            .iter()
            .zip(&allocation.gpus)
            .map(|(job, &gpus)| (job.id.clone(), gpus as i32))
            .collect(),
        waf: allocation.waf,
        objective: allocation.objective,
    }
}

/// Marks `node` isolated and takes it out of its job. Returns that job.
pub fn isolate(state: &mut ClusterState, node: &str) -> Option<String> {
    if let Some(n) = state.nodes.get_mut(node) {
        n.health = Health::Isolated;
    }
    detach(state, node)
}

/// Takes `node` out of the job running on it, if any; returns that job.
pub fn detach(state: &mut ClusterState, node: &str) -> Option<String> {
    let job_id = state.job_on(node)?.to_string();
    if let Some(job) = state.jobs.get_mut(&job_id) {
        job.nodes.retain(|n| n != node);
    }
    Some(job_id)
}

/// Where a restarted job takes its state from: a healthy data-parallel
/// peer if the job has replicas and a schedulable node besides `lost`, else
/// its last checkpoint.
pub fn restore_source(state: &ClusterState, job: &str, lost: Option<&str>) -> String {
    let Some(j) = state.jobs.get(job) else {
        return "checkpoint".to_string();
    };
    if j.spec.dp_degree > 1 {
        let peer = j.nodes.iter().find(|n| {
            Some(n.as_str()) != lost
                && state
                    .nodes
                    .get(n.as_str())
                    .is_some_and(|node| node.health.schedulable())
        });
        if let Some(peer) = peer {
            return format!("replica:{peer}");
        }
    }
    "checkpoint".to_string()
}

/// Puts `job` on `nodes` (empty: pauses it) and returns the command that
/// makes it so, or `None` if nothing changes and the job was not hit.
pub fn place(
    state: &mut ClusterState,
    job_id: &str,
    mut nodes: Vec<String>,
    hit: bool,
    severity: Severity,
) -> Option<Action> {
    nodes.sort();
    let job = state.jobs.get(job_id)?;
    let (old_nodes, status, dp) = (job.nodes.clone(), job.status, job.spec.dp_degree);
    if nodes == old_nodes && !hit && (status == JobStatus::Running || nodes.is_empty()) {
        return None;
    }
    let kept: Vec<&String> = nodes.iter().filter(|n| old_nodes.contains(n)).collect();
    let restore_from = match (kept.first(), status) {
        (_, JobStatus::Pending) => None,
        (Some(peer), JobStatus::Running) if dp > 1 => Some(format!("replica:{peer}")),
        _ => Some("checkpoint".to_string()),
    };
    let action = if nodes.is_empty() {
        if status != JobStatus::Running {
            return None;
        }
        CommandAction::Pause
    } else if status == JobStatus::Running {
        CommandAction::Reconfigure
    } else {
        CommandAction::Resume
    };
    let gpus = state.gpus_of(&nodes);
    let job = state.jobs.get_mut(job_id).expect("looked up above");
    job.status = if nodes.is_empty() {
        JobStatus::Paused
    } else {
        JobStatus::Running
    };
    job.peak_gpus = job.peak_gpus.max(gpus);
    job.nodes = nodes.clone();
    Some(Action {
        action,
        job: Some(job_id.to_string()),
        restore_from: (action != CommandAction::Pause)
            .then_some(restore_from)
            .flatten(),
        nodes,
        severity,
        node: None,
        leaves: None,
    })
}

/// Nodes per job for the given GPU counts: a job keeps its current
/// schedulable nodes where it can, freed nodes fill the rest, both in name
/// order, jobs in id order. No node goes to two jobs.
pub fn assign(
    state: &ClusterState,
    unit: u32,
    allocation: &BTreeMap<String, u32>,
) -> BTreeMap<String, Vec<String>> {
    let schedulable: BTreeSet<&str> = state.schedulable_nodes().into_iter().collect();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, &gpus) in allocation {
        let need = (gpus / unit.max(1)) as usize;
        let keep: Vec<String> = state.jobs[id]
            .nodes
            .iter()
            .filter(|n| schedulable.contains(n.as_str()))
            .take(need)
            .cloned()
            .collect();
        taken.extend(keep.iter().cloned());
        out.insert(id.clone(), keep);
    }
    let mut pool = schedulable.into_iter().filter(|n| !taken.contains(*n));
    for (id, &gpus) in allocation {
        let need = (gpus / unit.max(1)) as usize;
        let nodes = out.get_mut(id).expect("inserted above");
        while nodes.len() < need {
            match pool.next() {
                Some(node) => nodes.push(node.to_string()),
                None => break,
            }
        }
        nodes.sort();
    }
    out
}

/// Re-plans the whole cluster with the dynamic programme and returns the
/// commands that move every job to its new place.
pub fn replan_all(
    config: &PlannerConfig,
    state: &mut ClusterState,
    hit: &BTreeSet<String>,
    severity: Severity,
) -> Plan {
    let problem = problem(config, state, hit);
    let best = problem.solve();
    let idle_before = state.free_nodes();
    // What the idle spares forgo now: the WAF with them put to use.
    let reserved = super::spares::reserve(config, state);
    let forgone = (reserved > 0).then(|| {
        let mut open = problem.clone();
        open.gpus += reserved * problem.unit;
        (open.solve().waf - best.waf).max(0.0)
    });
    let current: Vec<u32> = problem
        .jobs
        .iter()
        .map(|j| {
            if j.current_gpus >= j.min_gpus {
                j.current_gpus
            } else {
                0
            }
        })
        .collect();
    let keep = problem.evaluate(&current);

    let mut alternatives = vec![alternative(&problem, &best)];
    let keep_alt = alternative(&problem, &keep);
    if keep_alt.allocation != alternatives[0].allocation {
        alternatives.push(keep_alt);
    }
    // Leave-one-out: what each running job's share is worth elsewhere.
    for i in 0..problem.jobs.len() {
        if alternatives.len() >= config.alternatives.max(1) {
            break;
        }
        if best.gpus[i] == 0 {
            continue;
        }
        let mut without = problem.clone();
        without.jobs[i].max_gpus = 0;
        without.jobs[i].min_gpus = 0;
        let alt = problem.evaluate(&without.solve().gpus);
        let alt = alternative(&problem, &alt);
        if alternatives.iter().all(|a| a.allocation != alt.allocation) {
            alternatives.push(alt);
        }
    }
    alternatives.truncate(config.alternatives.max(1));

    let allocation: BTreeMap<String, u32> = problem
        .jobs
        .iter()
        .zip(&best.gpus)
        .map(|(j, &g)| (j.id.clone(), g))
        .collect();
    let assignment = assign(state, problem.unit, &allocation);
    let mut actions = Vec::new();
    for (job, nodes) in &assignment {
        if let Some(action) = place(state, job, nodes.clone(), hit.contains(job), severity) {
            actions.push(action);
        }
    }
    let moves: Vec<String> = problem
        .jobs
        .iter()
        .zip(&best.gpus)
        .filter(|(j, g)| j.current_gpus != **g || j.hit)
        .map(|(j, g)| format!("{} {}→{} GPUs", j.id, j.current_gpus, g))
        .collect();
    let mut reason = if moves.is_empty() {
        "re-plan keeps every job where it is".to_string()
    } else {
        format!("re-plan: {}", moves.join(", "))
    };
    let idle_after = state.free_nodes();
    if let Some(spares) =
        super::spares::note(config, &idle_before, hit, &assignment, &idle_after, forgone)
    {
        reason = format!("{reason}; {spares}");
    }
    Plan {
        actions,
        alternatives,
        chosen_index: Some(0),
        assignment,
        reason,
    }
}

/// The current allocation, evaluated, as a single-alternative plan body.
pub fn snapshot(
    config: &PlannerConfig,
    state: &ClusterState,
) -> (Vec<Alternative>, BTreeMap<String, Vec<String>>) {
    let problem = problem(config, state, &BTreeSet::new());
    let gpus: Vec<u32> = problem.jobs.iter().map(|j| j.current_gpus).collect();
    let alt = alternative(&problem, &problem.evaluate(&gpus));
    let assignment = state
        .jobs
        .iter()
        .map(|(id, job)| (id.clone(), job.nodes.clone()))
        .collect();
    (vec![alt], assignment)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_time_is_the_mean_failure_interval_of_the_window() {
        let config = PlannerConfig {
            mtbf_window: 3,
            ..PlannerConfig::default()
        };
        let mut state = ClusterState::new("c");
        assert_eq!(running_s(&config, &state), config.default_running_s);
        // Intervals 100 s, then 10 s, 10 s: the window sees the last three times.
        state.failure_times = vec![0, 100_000, 110_000, 120_000];
        assert_eq!(running_s(&config, &state), 10.0);
    }
}
