//! Failures as planner input: escalation of repeats, node health, and the
//! cluster's isolation limit.

use super::config::{PlannerConfig, PolicyName};
use super::{
    ClusterState, Health, Hit, Node, Plan, Planned, Policy, RecentFault, Step, policy, stragglers,
};
use crate::records::{FailureEvent, Severity};

/// The blast-radius window: isolations are counted over an hour.
const ISOLATION_WINDOW_MS: i64 = 3_600_000;

/// Failure times kept per node and per cluster.
const HISTORY: usize = 64;

/// Plans a failure: the node turns suspect and the policy picks a response.
pub(super) fn on_failure(
    config: &PlannerConfig,
    policy: &dyn Policy,
    state: &mut ClusterState,
    f: &FailureEvent,
) -> Step {
    if f.job.is_none() && f.node.is_none() {
        return Err(format!("failure {} names neither node nor job", f.id));
    }
    let job = f
        .job
        .clone()
        .filter(|j| state.jobs.contains_key(j))
        .or_else(|| {
            f.node
                .as_deref()
                .and_then(|n| state.job_on(n))
                .map(str::to_string)
        });
    let base = match f.severity {
        Severity::Unknown => f.kind.default_severity(),
        s => s,
    };
    // Repeats of the same fault within the window escalate one level.
    let window_ms = (config.escalation_window_s * 1000.0) as i64;
    let now = f.first_evidence_ms;
    state
        .recent_faults
        .retain(|r| r.time_ms >= state.watermark_ms - window_ms);
    let key = (
        job.clone(),
        if job.is_none() { f.node.clone() } else { None },
    );
    let repeats = 1 + state
        .recent_faults
        .iter()
        .filter(|r| {
            r.kind == f.kind
                && (
                    r.job.clone(),
                    if r.job.is_none() {
                        r.node.clone()
                    } else {
                        None
                    },
                ) == key
        })
        .filter(|r| r.time_ms >= now - window_ms)
        .count();
    state.recent_faults.push(RecentFault {
        time_ms: now,
        job: job.clone(),
        node: f.node.clone(),
        kind: f.kind,
    });
    // The detector may already have escalated a node's repeated SEV3 faults;
    // escalating from the kind's default (not from `base`) keeps one repeat
    // from being escalated twice.
    let severity = if repeats >= config.escalation_repeats.max(1) && config.escalation_repeats > 1 {
        base.min(f.kind.default_severity().escalate())
    } else {
        base
    };
    if let Some(node) = f.node.as_deref() {
        let n = state
            .nodes
            .entry(node.to_string())
            .or_insert(Node::new(config.node_gpus));
        push_bounded(&mut n.failures, now);
        if n.health == Health::Healthy && severity != Severity::Sev1 {
            n.health = Health::Suspect;
        }
    }
    if job.is_some() {
        push_bounded(&mut state.failure_times, now);
    }
    let hit = Hit {
        job,
        node: f.node.clone(),
        kind: f.kind,
        severity,
        slowdown: f.slowdown,
    };
    let mut plan = plan_failure(config, policy, state, &hit);
    if severity != base {
        plan.reason = format!(
            "escalated from {base} after {repeats} repeats within {}s; {}",
            config.escalation_window_s, plan.reason
        );
    }
    Ok(Planned {
        trigger_kind: "failure",
        ref_id: f.id.clone(),
        plan,
        failure_id: Some(f.id.clone()),
    })
}

fn push_bounded(times: &mut Vec<i64>, time: i64) {
    times.push(time);
    if times.len() > HISTORY {
        times.remove(0);
    }
}

/// Why a SEV1 on a node still in service must not isolate it: the
/// cluster's hourly isolation limit is reached.
fn isolation_refused(config: &PlannerConfig, state: &ClusterState, hit: &Hit) -> Option<String> {
    if hit.severity != Severity::Sev1 {
        return None;
    }
    let node = hit.node.as_deref()?;
    if !state
        .nodes
        .get(node)
        .is_some_and(|n| n.health.schedulable())
    {
        return None;
    }
    let since = state.watermark_ms - ISOLATION_WINDOW_MS;
    let recent = state
        .nodes
        .values()
        .filter(|n| matches!(n.health, Health::Isolated | Health::Repairing))
        .filter(|n| n.failures.last().is_some_and(|t| *t >= since))
        .count();
    let limit = config.isolation_limit(state.nodes.len());
    (recent >= limit).then(|| {
        format!(
            "{} on {node}: {recent} nodes isolated within the last hour, the limit is {limit}; nothing more is isolated, needs an operator",
            hit.kind.symbol()
        )
    })
}

/// The policy's plan for `hit`, unless the isolation limit stops it.
pub(super) fn plan_failure(
    config: &PlannerConfig,
    policy: &dyn Policy,
    state: &mut ClusterState,
    hit: &Hit,
) -> Plan {
    if let Some(reason) = isolation_refused(config, state, hit) {
        return policy::with_snapshot(config, state, Vec::new(), reason);
    }
    // A node already out of service, no longer in the job named (its agent
    // dying after the isolation, say): there is nothing left to take out.
    if let Some(node) = hit.node.as_deref()
        && state
            .nodes
            .get(node)
            .is_some_and(|n| !n.health.schedulable())
        && hit.job.as_ref().is_none_or(|j| {
            !state
                .jobs
                .get(j)
                .is_some_and(|job| job.nodes.iter().any(|n| n == node))
        })
    {
        return policy::with_snapshot(
            config,
            state,
            Vec::new(),
            format!(
                "{} on {node}, already out of service: nothing to do",
                hit.kind.symbol()
            ),
        );
    }
    // Unicron prices a measured straggler: replace it or keep it.
    if policy.name() == PolicyName::Unicron
        && let Some(plan) = stragglers::answer(config, state, hit, &policy::describe(hit))
    {
        return plan;
    }
    policy.on_failure(config, state, hit)
}
