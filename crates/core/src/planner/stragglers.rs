//! The answer to a straggler: a node slow in its own compute holds every
//! collective of its job back. Taking it out (a spare takes its place, or
//! the job re-plans without it) is worth it only when the throughput won
//! back before the next re-plan outweighs the transition; otherwise the
//! node stays and the decision says why.

use crate::allocation::Profile;
use crate::records::FailureKind;

use super::config::PlannerConfig;
use super::policy::{Hit, isolate_action, with_snapshot};
use super::replan::{self, Plan};
use super::state::ClusterState;

/// The plan for a straggler the detector measured (`hit.slowdown`) on a
/// node of a running job; `None` for anything else, which the policy
/// answers as before (a reattempt in place).
pub(super) fn answer(
    config: &PlannerConfig,
    state: &mut ClusterState,
    hit: &Hit,
    what: &str,
) -> Option<Plan> {
    if hit.kind != FailureKind::Straggler {
        return None;
    }
    let slowdown = hit.slowdown.filter(|s| s.is_finite() && *s > 1.0)?;
    let node = hit.node.as_deref()?;
    let job_id = hit.job.as_deref()?;
    let job = state.jobs.get(job_id)?;
    if !job.nodes.iter().any(|n| n == node) {
        return None;
    }
    let unit = config.node_gpus.max(1);
    let profile = Profile::new(
        job.spec
            .throughput
            .iter()
            .map(|p| (p.gpus.max(0) as u32, p.flops))
            .collect(),
        "throughput",
    )
    .unwrap_or_else(|_| Profile::zero());
    let gpus = job.nodes.len() as u32 * unit;
    let running_s = replan::running_s(config, state);
    let (transition_s, source) = replan::job_transition_s(config, state, job);

    // Try the replacement on a copy: the re-plan says what the job gets.
    let mut trial = state.clone();
    let lost_from = replan::isolate(&mut trial, node);
    let hit_jobs = lost_from.iter().cloned().collect();
    let mut plan = replan::replan_all(config, &mut trial, &hit_jobs, hit.severity);
    plan.actions.insert(
        0,
        isolate_action(&trial, node, lost_from.as_deref(), hit.severity),
    );
    let new_gpus = trial.jobs.get(job_id).map_or(0, |j| j.nodes.len() as u32) * unit;

    // FLOP done until the next re-plan either way (the WAF's terms).
    let keep = profile.throughput(gpus) / slowdown * running_s;
    let replace = profile.throughput(new_gpus) * (running_s - transition_s).max(0.0);
    let figures = format!(
        "{node} computes {slowdown:.2}× its peers' median; over the next {running_s:.0} s \
         (expected until a re-plan) keeping it does {keep:.3e} FLOP at {gpus} GPUs, \
         replacing it {replace:.3e} at {new_gpus} GPUs after a {transition_s:.1} s \
         transition ({source})"
    );
    if replace > keep {
        *state = trial;
        plan.reason = format!("{what}: {figures}: replace it; {}", plan.reason);
        Some(plan)
    } else {
        Some(with_snapshot(
            config,
            state,
            Vec::new(),
            format!("{what}: {figures}: keep it, replacing does not pay"),
        ))
    }
}
