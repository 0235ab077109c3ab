//! Slurm's JSON as recorded from real Slurm 22.05 and 24.11 (the 23.02+
//! shape: `state` an array holding the flags), and the events the poller
//! derives from it.

use std::collections::BTreeMap;

use unicron_core::ClusterEventKind;
use unicron_slurm::json::{parse_jobs, parse_nodes};
use unicron_slurm::watch::{self, Condition};

fn fixture(path: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn slurm_22_05_nodes_drain_and_not_responding_come_from_state_flags() {
    let nodes = parse_nodes(&fixture("slurm-22.05/sinfo.json")).unwrap();
    let names: Vec<_> = nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["n1", "n2", "n3"]);
    // Draining: the base state is still `mixed`, DRAIN is only a flag.
    assert!(nodes[1].states.contains("MIXED") && nodes[1].drained());
    assert!(nodes[1].drained_by_unicron());
    assert!(!nodes[0].drained() && !nodes[0].down());

    let later = parse_nodes(&fixture("slurm-22.05/sinfo-not-responding.json")).unwrap();
    let conditions = watch::conditions(&later);
    assert_eq!(conditions["n1"], Condition::InService);
    assert_eq!(conditions["n2"], Condition::DrainedByUnicron);
    assert_eq!(
        conditions["n3"],
        Condition::Down("Not responding (DOWN+NOT_RESPONDING)".into())
    );
}

#[test]
fn slurm_24_11_nodes_carry_flags_in_the_state_array() {
    let nodes = parse_nodes(&fixture("slurm-24.11/scontrol-show-nodes.json")).unwrap();
    let conditions = watch::conditions(&nodes);
    assert_eq!(
        conditions["jonn-node-ringo"],
        Condition::Down("Not responding (DOWN+NOT_RESPONDING)".into())
    );
    // Down and drained by an operator: down wins, the reason is kept.
    assert!(matches!(&conditions["node001"], Condition::Down(r) if r.starts_with("TRIX-DRAINER")));
    assert_eq!(conditions["node003"], Condition::InService);
}

#[test]
fn jobs_of_both_releases_with_their_node_lists() {
    let old = parse_jobs(&fixture("slurm-22.05/squeue.json")).unwrap();
    assert_eq!(old.len(), 1);
    assert_eq!((old[0].id, old[0].name.as_str()), (1, "gpt-small"));
    assert_eq!(old[0].state, "RUNNING");
    assert_eq!(old[0].nodes, ["n1", "n2", "n3"]);

    let new = parse_jobs(&fixture("slurm-24.11/squeue.json")).unwrap();
    assert_eq!(new.len(), 2);
    assert_eq!(new[0].id, 9685110);
    assert_eq!(new[0].state, "RUNNING");
    assert_eq!(new[0].nodes.len(), 12);
    assert_eq!(new[0].nodes[..3], ["dave4", "dave31", "dave40"]);
    assert_eq!(new[1].nodes, ["dave104"]);
}

#[test]
fn slurms_own_errors_and_garbage_are_errors() {
    let err = parse_nodes(r#"{"nodes": [], "errors": [{"error": "Unable to contact slurm controller", "error_number": 1}]}"#)
        .unwrap_err();
    assert!(err.contains("Unable to contact slurm controller"), "{err}");
    assert!(parse_nodes("not json").is_err());
    assert!(parse_jobs(r#"{"nodes": []}"#).unwrap_err().contains("jobs"));
}

#[test]
fn polls_report_changes_once_and_unknown_never_counts_as_healthy() {
    let first = watch::conditions(&parse_nodes(&fixture("slurm-22.05/sinfo.json")).unwrap());
    // First poll: only nodes out of service, and unicron's own drain is
    // not news to the planner.
    assert!(watch::node_changes(None, &first).is_empty());
    let second =
        watch::conditions(&parse_nodes(&fixture("slurm-22.05/sinfo-not-responding.json")).unwrap());
    let changes = watch::node_changes(Some(&first), &second);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].kind, ClusterEventKind::NodeDown);
    assert_eq!(changes[0].subject, "n3");
    // The same state again: nothing.
    assert!(watch::node_changes(Some(&second), &second).is_empty());
    // An operator drains n1, then n3 comes back.
    let mut third: BTreeMap<_, _> = second.clone();
    third.insert("n1".into(), Condition::Drained("fan (DRAIN+IDLE)".into()));
    third.insert("n3".into(), Condition::InService);
    let kinds: Vec<_> = watch::node_changes(Some(&second), &third)
        .into_iter()
        .map(|c| (c.subject, c.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("n1".to_string(), ClusterEventKind::NodeDrained),
            ("n3".to_string(), ClusterEventKind::NodeRepaired)
        ]
    );
}

#[test]
fn a_job_that_stops_running_is_reported_finished_by_name() {
    let jobs = parse_jobs(&fixture("slurm-22.05/squeue.json")).unwrap();
    let before = watch::running(&jobs);
    let mut requeued = jobs.clone();
    requeued[0].state = "PENDING".into();
    let changes = watch::job_changes(&before, &watch::running(&requeued), &requeued);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].kind, ClusterEventKind::JobFinished);
    assert_eq!(changes[0].subject, "gpt-small");
    assert_eq!(changes[0].reason, "Slurm job 1: PENDING");
    assert!(watch::job_changes(&before, &before, &jobs).is_empty());
}
