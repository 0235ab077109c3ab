//! A scheduler's view of its nodes (Slurm, Kubernetes), and what changed
//! between two views as cluster events. Pure: each watcher maps its
//! scheduler's objects to a [`Condition`] and publishes [`node_changes`].

use std::collections::BTreeMap;

use crate::{ClusterEvent, ClusterEventKind};

/// A node as far as the planner is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// Schedulable: up and not held.
    InService,
    /// The scheduler holds it dead (Slurm DOWN, Kubernetes NotReady), with
    /// its reason.
    Down(String),
    /// Held by unicron (its drain, its taint): the planner took it out.
    DrainedByUnicron,
    /// Held by someone else (a drain, a cordon, a taint), with their reason.
    Drained(String),
}

/// One event a watcher publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: ClusterEventKind,
    /// The node (node events) or the job's name (job_finished).
    pub subject: String,
    pub reason: String,
}

impl Change {
    /// The cluster event for this change at `time_ms`, its reason prefixed
    /// with the scheduler's name (`slurm`, `kubernetes`).
    pub fn event(&self, cluster: &str, time_ms: i64, scheduler: &str) -> ClusterEvent {
        let mut event = ClusterEvent::new(cluster, time_ms, self.kind);
        match self.kind {
            ClusterEventKind::JobFinished => event.job_id = Some(self.subject.clone()),
            _ => event.node = Some(self.subject.clone()),
        }
        event.reason = Some(format!("{scheduler}: {}", self.reason));
        event
    }
}

/// Node events from `before` (`None`: the first view) to `now`. A first
/// view reports only nodes out of service; a node that vanished from the
/// listing is not reported. `back` is the reason given a node back in
/// service (`back in service in Slurm`).
pub fn node_changes(
    before: Option<&BTreeMap<String, Condition>>,
    now: &BTreeMap<String, Condition>,
    back: &str,
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
            (Some(_), Condition::InService) => {
                Some((ClusterEventKind::NodeRepaired, back.to_string()))
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn view(pairs: &[(&str, Condition)]) -> BTreeMap<String, Condition> {
        pairs
            .iter()
            .map(|(n, c)| (n.to_string(), c.clone()))
            .collect()
    }

    #[test]
    fn a_first_view_reports_only_nodes_out_and_a_return_is_a_repair() {
        let first = view(&[
            ("a", Condition::InService),
            ("b", Condition::Down("NotReady".into())),
            ("c", Condition::DrainedByUnicron),
        ]);
        let changes = node_changes(None, &first, "back");
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].kind, ClusterEventKind::NodeDown);
        let second = view(&[
            ("a", Condition::Drained("cordoned".into())),
            ("b", Condition::InService),
            ("c", Condition::InService),
        ]);
        let kinds: Vec<_> = node_changes(Some(&first), &second, "back")
            .into_iter()
            .map(|c| (c.subject, c.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("a".to_string(), ClusterEventKind::NodeDrained),
                ("b".to_string(), ClusterEventKind::NodeRepaired),
                ("c".to_string(), ClusterEventKind::NodeRepaired),
            ]
        );
        assert!(node_changes(Some(&second), &second, "back").is_empty());
    }
}
