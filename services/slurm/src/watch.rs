//! What changed between two polls of Slurm, as cluster events. Pure: the
//! poller feeds it views, tests feed it recorded JSON.

use std::collections::BTreeMap;

use unicron_core::ClusterEventKind;

use crate::json::{JobView, NodeView};

/// A node as far as the planner is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// Schedulable: up and not drained.
    InService,
    /// DOWN, NOT_RESPONDING or FAIL, with Slurm's reason.
    Down(String),
    /// Drained by unicron: the planner took it out itself.
    DrainedByUnicron,
    /// Drained by someone else, with their reason.
    Drained(String),
}

impl Condition {
    pub fn of(node: &NodeView) -> Condition {
        let reason = || {
            let mut words: Vec<&str> = node.states.iter().map(String::as_str).collect();
            words.sort_unstable();
            if node.reason.is_empty() {
                words.join("+")
            } else {
                format!("{} ({})", node.reason, words.join("+"))
            }
        };
        if node.down() {
            Condition::Down(reason())
        } else if node.drained_by_unicron() {
            Condition::DrainedByUnicron
        } else if node.drained() {
            Condition::Drained(reason())
        } else {
            Condition::InService
        }
    }
}

/// One event the poller publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: ClusterEventKind,
    /// The node (node events) or the job's name (job_finished).
    pub subject: String,
    pub reason: String,
}

/// Conditions by node name.
pub fn conditions(nodes: &[NodeView]) -> BTreeMap<String, Condition> {
    nodes
        .iter()
        .map(|n| (n.name.clone(), Condition::of(n)))
        .collect()
}

/// Node events from `before` (`None`: the first poll) to `now`. A first
/// poll reports only nodes out of service; a node that vanished from the
/// listing is not reported.
pub fn node_changes(
    before: Option<&BTreeMap<String, Condition>>,
    now: &BTreeMap<String, Condition>,
) -> Vec<Change> {
    let mut changes = Vec::new();
    for (node, condition) in now {
        let was = before.and_then(|b| b.get(node));
        let event = match (was, condition) {
            (Some(w), c) if w == c => None,
            (Some(Condition::Down(_)), Condition::Down(_)) => None,
            (_, Condition::Down(r)) => Some((ClusterEventKind::NodeDown, r.clone())),
            // Still out, for another reason: the planner holds it already.
            (Some(Condition::Down(_) | Condition::Drained(_)), Condition::Drained(_)) => None,
            (_, Condition::Drained(r)) => Some((ClusterEventKind::NodeDrained, r.clone())),
            (_, Condition::DrainedByUnicron) => None,
            (Some(_), Condition::InService) => Some((
                ClusterEventKind::NodeRepaired,
                "back in service in Slurm".to_string(),
            )),
            (None, Condition::InService) => None,
        };
        if let Some((kind, reason)) = event {
            changes.push(Change {
                kind,
                subject: node.clone(),
                reason,
            });
        }
    }
    changes
}

/// Running jobs by id: name and nodes.
pub fn running(jobs: &[JobView]) -> BTreeMap<u64, JobView> {
    jobs.iter()
        .filter(|j| j.state == "RUNNING")
        .map(|j| (j.id, j.clone()))
        .collect()
}

/// `job_finished` for each job that ran at the last poll and runs no more
/// (ended, cancelled, requeued: its allocation is gone), named by the
/// Slurm job's name, which is the unicron job id.
pub fn job_changes(
    before: &BTreeMap<u64, JobView>,
    now_running: &BTreeMap<u64, JobView>,
    all: &[JobView],
) -> Vec<Change> {
    before
        .iter()
        .filter(|(id, _)| !now_running.contains_key(id))
        .map(|(id, job)| {
            let state = all
                .iter()
                .find(|j| j.id == *id)
                .map_or("gone from squeue", |j| j.state.as_str());
            Change {
                kind: ClusterEventKind::JobFinished,
                subject: job.name.clone(),
                reason: format!("Slurm job {id}: {state}"),
            }
        })
        .collect()
}
