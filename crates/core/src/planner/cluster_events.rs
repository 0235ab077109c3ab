//! Cluster events as planner input: nodes and jobs coming and going, and
//! the agents' snapshot and restore reports.

use std::collections::{BTreeMap, BTreeSet};

use super::config::PlannerConfig;
use super::{
    ClusterState, Health, Job, JobStatus, Node, Plan, Planned, Policy, SNAPSHOT_REPORT, Step,
    policy, preflight, replan, snapshots,
};
use crate::allocation::Profile;
use crate::records::{ClusterEvent, ClusterEventKind, JobSpec, Severity};

/// A job spec the planner can plan with, or the field that is wrong.
pub(crate) fn validate_spec(spec: &JobSpec) -> Result<(), String> {
    if !spec.weight.is_finite() || spec.weight < 0.0 {
        return Err("job.weight: must be a finite, non-negative number".into());
    }
    if spec.min_gpus < 0 || spec.max_gpus < spec.min_gpus {
        return Err(format!(
            "job.min_gpus/max_gpus: {} and {} are not 0 ≤ min ≤ max",
            spec.min_gpus, spec.max_gpus
        ));
    }
    let points = spec
        .throughput
        .iter()
        .map(|p| {
            u32::try_from(p.gpus)
                .map(|g| (g, p.flops))
                .map_err(|_| format!("job.throughput: negative GPU count {}", p.gpus))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Profile::new(points, "job.throughput").map_err(|e| e.to_string())?;
    Ok(())
}

/// Applies an inventory or job change and re-plans the cluster if it needs it.
pub(super) fn on_cluster_event(
    config: &PlannerConfig,
    policy: &dyn Policy,
    state: &mut ClusterState,
    e: &ClusterEvent,
) -> Step {
    let need_node = || {
        e.node
            .clone()
            .ok_or_else(|| format!("{:?} without node", e.kind))
    };
    let need_job = || {
        e.job_id
            .clone()
            .ok_or_else(|| format!("{:?} without job_id", e.kind))
    };
    let mut hit_job = None;
    let mut return_node = None;
    let mut check = None;
    // Reports of what agents hold and what restores cost: state only, no
    // plan is evaluated (they arrive every few training steps).
    let noted = |trigger_kind: &'static str, ref_id: String, reason: String| {
        Ok(Planned {
            trigger_kind,
            ref_id,
            plan: Plan {
                actions: Vec::new(),
                alternatives: Vec::new(),
                chosen_index: None,
                assignment: BTreeMap::new(),
                reason,
            },
            failure_id: None,
        })
    };
    match e.kind {
        ClusterEventKind::NodeChecked => return on_node_checked(config, policy, state, e),
        ClusterEventKind::SnapshotsStored => {
            let node = need_node()?;
            let n = snapshots::note(state, &node, &e.snapshots);
            let steps: BTreeSet<i64> = e.snapshots.iter().map(|s| s.step).collect();
            return noted(
                SNAPSHOT_REPORT,
                node.clone(),
                format!("{node} holds {n} more snapshots (steps {steps:?})"),
            );
        }
        ClusterEventKind::JobRestored => {
            let r = e
                .restored
                .as_ref()
                .ok_or_else(|| "job_restored without restored".to_string())?;
            let reason = match state.jobs.get_mut(&r.job) {
                Some(job) if !job.failure_starts.contains(&r.command_id) => format!(
                    "job {} rank {} started in {:.2} s, not after a failure: not a transition cost",
                    r.job,
                    r.rank,
                    r.restore_ms as f64 / 1000.0
                ),
                Some(job) => {
                    let cost = job.restore_costs.entry(r.action.clone()).or_default();
                    cost.add(&r.command_id, r.restore_ms);
                    format!(
                        "job {} rank {} restored from {} in {:.2} s; {} estimate {:.2} s over {} restores",
                        r.job,
                        r.rank,
                        r.source,
                        r.restore_ms as f64 / 1000.0,
                        r.action,
                        cost.mean_s(),
                        cost.count
                    )
                }
                None => format!("job {} is not planned here; restore cost not kept", r.job),
            };
            return noted("restore_report", r.job.clone(), reason);
        }
        _ => {}
    }
    let ref_id = match e.kind {
        ClusterEventKind::JobSubmitted | ClusterEventKind::JobUpdated => {
            let id = need_job()?;
            let spec = e
                .job
                .clone()
                .ok_or_else(|| format!("{:?} without job spec", e.kind))?;
            validate_spec(&spec).map_err(|reason| format!("job {id}: {reason}"))?;
            match state.jobs.get_mut(&id) {
                Some(job) => {
                    job.spec = spec;
                    job.launch = e.launch;
                }
                None => {
                    state.jobs.insert(
                        id.clone(),
                        Job {
                            spec,
                            status: JobStatus::Pending,
                            nodes: Vec::new(),
                            peak_gpus: 0,
                            launch: e.launch,
                            generation: 0,
                            restarts: 0,
                            snapshots: Default::default(),
                            restore_costs: BTreeMap::new(),
                            snapshot_costs: Default::default(),
                            failure_starts: Default::default(),
                        },
                    );
                }
            }
            id
        }
        ClusterEventKind::JobFinished => {
            let id = need_job()?;
            state.jobs.remove(&id);
            state
                .in_flight
                .retain(|_, f| f.job.as_deref() != Some(id.as_str()));
            id
        }
        ClusterEventKind::NodeJoined | ClusterEventKind::NodeRepaired => {
            let id = need_node()?;
            let gpus = e.gpus.map_or(config.node_gpus, |g| g.max(0) as u32);
            let known = state.nodes.contains_key(&id);
            let node = state.nodes.entry(id.clone()).or_insert(Node::new(gpus));
            // An agent announces its node every time it starts; only
            // node_repaired gives back a node that was taken out, and only
            // a passing check one that waits for it.
            let isolated = matches!(node.health, Health::Isolated | Health::Repairing);
            let taken_out = isolated || matches!(node.health, Health::Held | Health::Checking);
            let repaired = e.kind == ClusterEventKind::NodeRepaired;
            let recheck = node.health == Health::Checking;
            if repaired || !taken_out {
                node.health = Health::Healthy;
            }
            if e.address.is_some() {
                node.address = e.address.clone();
            }
            if e.kind == ClusterEventKind::NodeJoined {
                node.snapshot_address = e.snapshot_address.clone();
            }
            if e.gpus.is_some() {
                node.gpus = gpus;
            }
            if e.kind == ClusterEventKind::NodeJoined {
                // A (re)started agent holds no snapshots.
                snapshots::forget_node(state, &id);
            }
            // Checked: a new node, one back from repair, one whose check
            // was lost (its agent restarted). A node in service is not.
            if config.preflight && (!known || (repaired && taken_out) || recheck) {
                if let Some(node) = state.nodes.get_mut(&id) {
                    node.give_back_on_pass |= repaired && isolated;
                }
                check = Some(preflight::start(state, &id));
            } else if repaired && isolated {
                // unicron took it out, so unicron gives it back to the
                // scheduler (Slurm: RESUME of its own drain).
                return_node = Some(id.clone());
            }
            id
        }
        ClusterEventKind::NodeDown | ClusterEventKind::NodeDrained => {
            let id = need_node()?;
            let health = state.nodes.get(&id).map(|n| n.health);
            if !health.is_some_and(Health::schedulable) {
                // Unknown, or already out (isolated by unicron, or held):
                // the scheduler's verdict changes nothing.
                let why = match health {
                    None => "a node the planner does not know",
                    Some(_) => "already out of service",
                };
                let plan = policy::with_snapshot(
                    config,
                    state,
                    Vec::new(),
                    format!("scheduler reports {id} {}: {why}", scheduler_word(e)),
                );
                return Ok(Planned {
                    trigger_kind: "cluster_event",
                    ref_id: id,
                    plan,
                    failure_id: None,
                });
            }
            hit_job = replan::detach(state, &id);
            if let Some(node) = state.nodes.get_mut(&id) {
                node.health = Health::Held;
            }
            id
        }
        ClusterEventKind::NodeRemoved => {
            let id = need_node()?;
            snapshots::forget_node(state, &id);
            hit_job = replan::detach(state, &id);
            state.nodes.remove(&id);
            id
        }
        ClusterEventKind::Unknown => return Err("cluster event of unknown kind".into()),
        ClusterEventKind::SnapshotsStored
        | ClusterEventKind::JobRestored
        | ClusterEventKind::NodeChecked => {
            unreachable!("handled above")
        }
    };
    let mut plan = policy.on_capacity_change(config, state, hit_job.as_deref());
    if matches!(
        e.kind,
        ClusterEventKind::NodeDown | ClusterEventKind::NodeDrained
    ) {
        plan.reason = format!(
            "scheduler reports {ref_id} {}: out of plans; {}",
            scheduler_word(e),
            plan.reason
        );
    }
    if let Some(node) = return_node {
        plan.actions.insert(0, policy::return_action(&node));
        plan.reason = format!("{node} repaired: give it back; {}", plan.reason);
    }
    if let Some(action) = check {
        let peer = match action.nodes.get(1) {
            Some(peer) => format!("all-reduce with {peer}"),
            None => "no idle checked peer for the all-reduce".to_string(),
        };
        plan.reason = format!(
            "{ref_id} out of plans until its pre-flight check passes ({peer}); {}",
            plan.reason
        );
        plan.actions.insert(0, action);
    }
    Ok(Planned {
        trigger_kind: "cluster_event",
        ref_id,
        plan,
        failure_id: None,
    })
}

/// Admits a node whose check passed, or isolates one that failed or is
/// slow, and re-plans: a node admitted is capacity.
fn on_node_checked(
    config: &PlannerConfig,
    policy: &dyn Policy,
    state: &mut ClusterState,
    e: &ClusterEvent,
) -> Step {
    let id = e
        .node
        .clone()
        .ok_or_else(|| "NodeChecked without node".to_string())?;
    let check = e
        .check
        .as_deref()
        .ok_or_else(|| "node_checked without check".to_string())?;
    let health = state.nodes.get(&id).map(|n| n.health);
    if health != Some(Health::Checking) {
        let plan = policy::with_snapshot(
            config,
            state,
            Vec::new(),
            format!("check of {id} not awaited ({health:?}): nothing changes"),
        );
        return Ok(Planned {
            trigger_kind: "node_check",
            ref_id: id,
            plan,
            failure_id: None,
        });
    }
    let took = check.duration_ms as f64 / 1000.0;
    let mut actions = Vec::new();
    let plan = match preflight::verdict(config, state, &id, check) {
        preflight::Verdict::Pass(figures) => {
            let node = state.nodes.get_mut(&id).expect("checked above");
            node.health = Health::Healthy;
            node.checked = Some(figures);
            if std::mem::take(&mut node.give_back_on_pass) {
                actions.push(policy::return_action(&id));
            }
            let mut plan = policy.on_capacity_change(config, state, None);
            let skipped = if check.skipped.is_empty() {
                String::new()
            } else {
                format!(" (not run: {})", check.skipped.join("; "))
            };
            plan.reason = format!(
                "{id} passed its pre-flight check in {took:.1} s{skipped}: admitted; {}",
                plan.reason
            );
            plan
        }
        preflight::Verdict::Out(why) => {
            let node = state.nodes.get_mut(&id).expect("checked above");
            node.health = Health::Isolated;
            node.give_back_on_pass = false;
            let isolate = policy::isolate_action(state, &id, None, Severity::Sev1);
            policy::with_snapshot(
                config,
                state,
                vec![isolate],
                format!("{id} {why} (in {took:.1} s): isolate it, never placed"),
            )
        }
    };
    let mut plan = plan;
    for (i, action) in actions.into_iter().enumerate() {
        plan.actions.insert(i, action);
    }
    Ok(Planned {
        trigger_kind: "node_check",
        ref_id: id,
        plan,
        failure_id: None,
    })
}

/// `down (Not responding)`: the event's kind and the scheduler's reason.
fn scheduler_word(e: &ClusterEvent) -> String {
    let word = match e.kind {
        ClusterEventKind::NodeDown => "down",
        _ => "drained",
    };
    match e.reason.as_deref().filter(|r| !r.is_empty()) {
        Some(reason) => format!("{word} ({reason})"),
        None => word.to_string(),
    }
}
