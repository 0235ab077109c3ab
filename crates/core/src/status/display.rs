//! One-line summaries of records for the timeline.

use crate::records::{Command, CommandResult, CommandStatus, Decision, FailureEvent};

/// `SEV1 ecc_error on n1 (job j)`.
pub(super) fn failure_summary(f: &FailureEvent) -> String {
    let mut text = format!("{} {}", f.severity.symbol(), f.kind.symbol());
    if let Some(node) = &f.node {
        text.push_str(&format!(" on {node}"));
    }
    if let Some(job) = &f.job {
        text.push_str(&format!(" (job {job})"));
    }
    text
}

/// The policy, trigger and reason, and how many commands and alternatives.
pub(super) fn decision_summary(d: &Decision) -> String {
    let commands = match d.command_ids.len() {
        0 => "no command".to_string(),
        1 => "1 command".to_string(),
        n => format!("{n} commands"),
    };
    format!(
        "{} on {}: {} ({}, {} alternatives)",
        d.policy,
        d.trigger.kind,
        d.reason,
        commands,
        d.alternatives.len()
    )
}

/// The action and what it acts on.
pub(super) fn command_summary(c: &Command) -> String {
    let mut text = c.action.symbol().to_string();
    if let Some(job) = &c.job {
        text.push_str(&format!(" job {job}"));
    }
    if !c.nodes.is_empty() {
        text.push_str(&format!(" nodes {}", c.nodes.join(",")));
    }
    text
}

/// The outcome, who reported it and why.
pub(super) fn result_summary(r: &CommandResult) -> String {
    let status = match r.status {
        CommandStatus::Accepted => "accepted",
        CommandStatus::Succeeded => "succeeded",
        CommandStatus::Failed => "failed",
        CommandStatus::Rejected => "rejected",
        CommandStatus::Unknown => "unknown",
    };
    match &r.reason {
        Some(reason) => format!("{status} by {}: {reason}", r.executor),
        None => format!("{status} by {}", r.executor),
    }
}
