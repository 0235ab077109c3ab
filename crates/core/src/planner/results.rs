//! Command results as planner input: the in-flight table, and escalation
//! when a milder action failed.

use super::config::PlannerConfig;
use super::failures::plan_failure;
use super::{ClusterState, Health, Hit, Planned, Policy, Step, policy};
use crate::records::{CommandAction, CommandResult, CommandStatus, Severity};

/// Settles a command in flight: done, still waiting for nodes, or failed and
/// escalated.
pub(super) fn on_result(
    config: &PlannerConfig,
    policy: &dyn Policy,
    state: &mut ClusterState,
    r: &CommandResult,
) -> Step {
    let no_change = |state: &ClusterState, reason: String| {
        policy::with_snapshot(config, state, Vec::new(), reason)
    };
    let Some(flight) = state.in_flight.get(&r.command_id).cloned() else {
        let plan = no_change(
            state,
            format!("result {:?} for a command not in flight", r.status),
        );
        return Ok(Planned {
            trigger_kind: "command_result",
            ref_id: r.command_id.clone(),
            plan,
            failure_id: None,
        });
    };
    // An agent answers for its own node: the command is done when every
    // node it names has succeeded.
    let from_node = r.node.as_deref().filter(|_| !flight.awaiting.is_empty());
    if let Some(node) = from_node
        && r.status == CommandStatus::Succeeded
    {
        let flight = state
            .in_flight
            .get_mut(&r.command_id)
            .expect("looked up above");
        if !flight.awaiting.remove(node) {
            let plan = no_change(
                state,
                format!("result from node {node}, which the command does not name or has answered"),
            );
            return Ok(Planned {
                trigger_kind: "command_result",
                ref_id: r.command_id.clone(),
                plan,
                failure_id: None,
            });
        }
        if !flight.awaiting.is_empty() {
            let (action, left) = (flight.action, flight.awaiting.len());
            let plan = no_change(
                state,
                format!("{action:?} done on {node}; {left} more nodes to answer"),
            );
            return Ok(Planned {
                trigger_kind: "command_result",
                ref_id: r.command_id.clone(),
                plan,
                failure_id: None,
            });
        }
    }
    let plan = match r.status {
        CommandStatus::Accepted | CommandStatus::Unknown => {
            no_change(state, format!("{:?} acknowledged", flight.action))
        }
        CommandStatus::Succeeded => {
            state.in_flight.remove(&r.command_id);
            let seen = state
                .observed
                .entry(flight.action.symbol().to_string())
                .or_default();
            seen.count += 1;
            seen.total_s += r.duration_ms.max(0) as f64 / 1000.0;
            // Only a node still isolated goes to its repair: an answer that
            // comes late (its agent was down) must not undo a repair since.
            if flight.action == CommandAction::IsolateNode
                && let Some(node) = flight.node.as_deref().and_then(|n| state.nodes.get_mut(n))
                && node.health == Health::Isolated
            {
                node.health = Health::Repairing;
            }
            no_change(state, format!("{:?} succeeded", flight.action))
        }
        // Anyone who can write the commands topic can send an unsigned or
        // forged command with the id of a real one; its rejection says
        // nothing about the real command, which stays in flight.
        CommandStatus::Rejected
            if r.reason
                .as_deref()
                .is_some_and(|why| why.starts_with("unsigned") || why.starts_with("forged")) =>
        {
            no_change(
                state,
                format!(
                    "rejection of an unsigned or forged copy of {:?} ignored",
                    flight.action
                ),
            )
        }
        CommandStatus::Rejected => {
            state.in_flight.remove(&r.command_id);
            let why = r.reason.as_deref().unwrap_or("no reason given");
            no_change(
                state,
                format!(
                    "{:?} rejected by the executor ({why}); needs an operator",
                    flight.action
                ),
            )
        }
        CommandStatus::Failed => {
            state.in_flight.remove(&r.command_id);
            let why = r.reason.as_deref().unwrap_or("no reason given");
            // A milder action failed: take the next harsher one.
            let escalated = match flight.action {
                CommandAction::Reattempt => Some(Severity::Sev2),
                CommandAction::Restart if flight.node.is_some() => Some(Severity::Sev1),
                _ => None,
            };
            match (escalated, &flight.job) {
                (Some(severity), Some(_)) => {
                    let hit = Hit {
                        job: flight.job.clone(),
                        node: flight.node.clone(),
                        kind: crate::taxonomy::FailureKind::Unknown,
                        severity,
                        slowdown: None,
                    };
                    let mut plan = plan_failure(config, policy, state, &hit);
                    plan.reason = format!(
                        "{:?} failed ({why}); escalate to {severity}: {}",
                        flight.action, plan.reason
                    );
                    plan
                }
                _ => no_change(
                    state,
                    format!(
                        "{:?} failed ({why}); no harsher automatic action, needs an operator",
                        flight.action
                    ),
                ),
            }
        }
    };
    Ok(Planned {
        trigger_kind: "command_result",
        ref_id: r.command_id.clone(),
        plan,
        failure_id: flight.failure_id,
    })
}
