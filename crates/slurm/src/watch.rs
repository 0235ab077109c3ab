//! What changed between two polls of Slurm, as cluster events. Pure: the
//! poller feeds it views, tests feed it recorded JSON.

use std::collections::BTreeMap;

use unicron_core::ClusterEventKind;
use unicron_core::scheduler_view;
pub use unicron_core::scheduler_view::{Change, Condition};

use crate::json::{JobView, NodeView};

/// The planner's view of a Slurm node.
pub fn condition(node: &NodeView) -> Condition {
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

/// Conditions by node name.
pub fn conditions(nodes: &[NodeView]) -> BTreeMap<String, Condition> {
    nodes
        .iter()
        .map(|n| (n.name.clone(), condition(n)))
        .collect()
}

/// Node events from `before` (`None`: the first poll) to `now`.
pub fn node_changes(
    before: Option<&BTreeMap<String, Condition>>,
    now: &BTreeMap<String, Condition>,
) -> Vec<Change> {
    scheduler_view::node_changes(before, now, "back in service in Slurm")
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
