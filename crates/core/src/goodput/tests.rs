use std::collections::BTreeMap;

use super::*;
use crate::records::{
    ClusterEvent, Command, CommandResult, Decision, FailureKind, RestoreReport, SnapshotHeld,
    Trigger,
};
use crate::status::Record;

const T0: i64 = 1_780_000_000_000;

fn at(s: f64) -> i64 {
    T0 + (s * 1000.0) as i64
}

fn submitted(s: f64) -> Record {
    let mut e = ClusterEvent::new("a", at(s), ClusterEventKind::JobSubmitted);
    e.job_id = Some("j".into());
    Record::Input(InputEvent::Cluster(e))
}

fn placed(s: f64, nodes: usize) -> Record {
    Record::Decision(Decision {
        id: format!("d{s}"),
        cluster: "a".into(),
        time_ms: at(s),
        trigger: Trigger {
            kind: "cluster_event".into(),
            ref_id: "j".into(),
            topic: "unicron.cluster".into(),
            partition: 0,
            offset: 0,
        },
        inputs_digest: String::new(),
        policy: "unicron".into(),
        policy_version: "4".into(),
        alternatives: Vec::new(),
        chosen_index: None,
        assignment: BTreeMap::from([(
            "j".to_string(),
            (0..nodes).map(|n| format!("n{n}")).collect(),
        )]),
        reason: String::new(),
        command_ids: Vec::new(),
    })
}

fn stored(s: f64, step: i64, rank: i32, block_ms: i64) -> Record {
    let mut e = ClusterEvent::new("a", at(s), ClusterEventKind::SnapshotsStored);
    e.node = Some(format!("n{rank}"));
    e.snapshots = vec![SnapshotHeld {
        job: "j".into(),
        rank,
        step,
        generation: 1,
        local_world: 1,
        bytes: 1 << 20,
        replica: false,
        block_us: block_ms * 1000,
        step_us: 0,
        transfer_us: 0,
    }];
    Record::Input(InputEvent::Cluster(e))
}

fn failed(id: &str, first: f64, detected: f64) -> Record {
    let mut f = crate::testing::failure(
        id.to_string(),
        "a",
        "n2",
        FailureKind::EccError,
        at(first),
        at(detected),
    );
    f.job = Some("j".into());
    Record::Input(InputEvent::Failure(f))
}

fn start(id: &str, s: f64, cause: &str) -> Record {
    Record::Command(Command {
        id: id.into(),
        cluster: "a".into(),
        decision_id: "d".into(),
        time_ms: at(s),
        action: CommandAction::Reconfigure,
        job: Some("j".into()),
        nodes: Vec::new(),
        restore_from: None,
        causation: vec![cause.into()],
        key_id: String::new(),
        signature: Vec::new(),
        rendezvous: None,
        snapshots: None,
    })
}

/// A rank's restore after the start `command` issued at `from` s.
fn restored(command: &str, from: f64, rank: i32, restore_s: f64, step: Option<i64>) -> Record {
    let mut e = ClusterEvent::new("a", at(from + restore_s), ClusterEventKind::JobRestored);
    e.restored = Some(Box::new(RestoreReport {
        job: "j".into(),
        rank,
        generation: 2,
        command_id: command.into(),
        action: "reconfigure".into(),
        source: "memory".into(),
        step,
        bytes: 0,
        restore_ms: (restore_s * 1000.0) as i64,
    }));
    Record::Input(InputEvent::Cluster(e))
}

fn heard(s: f64) -> Record {
    Record::Input(InputEvent::Cluster(ClusterEvent::new(
        "a",
        at(s),
        ClusterEventKind::Unknown,
    )))
}

/// Submitted at 0, placed on 4 nodes at 1 s, snapshots at steps 10 and 20
/// (100 ms each), a failure at 120 s detected at 122 s, restarted on 3
/// nodes from step 20 (its slowest rank's first step at 130 s); the log
/// ends at 200 s.
fn one_failure() -> Vec<Record> {
    vec![
        submitted(0.0),
        placed(1.0, 4),
        stored(50.0, 10, 0, 100),
        stored(50.1, 10, 1, 80),
        stored(100.0, 20, 0, 100),
        failed("f1", 120.0, 122.0),
        placed(122.0, 3),
        start("c1", 122.0, "f1"),
        restored("c1", 122.0, 0, 6.0, Some(20)),
        restored("c1", 122.0, 1, 8.0, Some(20)),
        heard(200.0),
    ]
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn a_failure_splits_into_detection_recovery_redone_and_a_smaller_job() {
    let mut g = Goodput::new(8);
    for r in one_failure() {
        g.apply(&r);
    }
    let s = g.job_split("a", "j").unwrap();
    assert!(close(s.wall_s, 200.0), "{s:?}");
    assert!(close(s.detection_s, 2.0), "{s:?}");
    assert!(close(s.recovery_s, 8.0), "the slowest rank: {s:?}");
    assert!(
        close(s.redone_s, 20.0),
        "step 20 was stored at 100 s: {s:?}"
    );
    assert!(close(s.snapshot_s, 0.2), "slowest rank per step: {s:?}");
    // Pending for 1 s, then a quarter short from 130 s to 200 s.
    assert!(close(s.waiting_s, 1.0 + 70.0 * 0.25), "{s:?}");
    let sum =
        s.productive_s + s.snapshot_s + s.detection_s + s.recovery_s + s.redone_s + s.waiting_s;
    assert!(close(sum, s.wall_s), "{s:?}");
    assert_eq!((s.failures, s.checkpoint_restores), (1, 0));
}

#[test]
fn the_split_is_the_same_in_any_reading_order() {
    let mut forward = Goodput::new(8);
    let mut backward = Goodput::new(8);
    for r in one_failure() {
        forward.apply(&r);
    }
    for r in one_failure().into_iter().rev() {
        backward.apply(&r);
    }
    assert_eq!(forward.splits(), backward.splits());
}

#[test]
fn a_failure_that_stopped_nothing_costs_nothing_and_a_checkpoint_is_counted() {
    let mut g = Goodput::new(8);
    for r in [
        submitted(0.0),
        placed(0.0, 2),
        failed("kept", 10.0, 11.0),
        failed("f2", 50.0, 52.0),
        start("c2", 52.0, "f2"),
        restored("c2", 52.0, 0, 18.0, None),
        heard(100.0),
    ] {
        g.apply(&r);
    }
    let s = g.job_split("a", "j").unwrap();
    assert_eq!((s.failures, s.checkpoint_restores), (1, 1));
    assert!(close(s.detection_s, 2.0), "{s:?}");
    assert!(close(s.recovery_s, 18.0), "{s:?}");
    assert!(close(s.redone_s, 0.0), "{s:?}");
    // A job without agent reports recovers at its command's result.
    let mut g = Goodput::new(8);
    for r in [
        submitted(0.0),
        placed(0.0, 2),
        failed("f3", 50.0, 52.0),
        start("c3", 52.0, "f3"),
        Record::Input(InputEvent::Result(CommandResult {
            command_id: "c3".into(),
            cluster: "a".into(),
            time_ms: at(70.0),
            status: CommandStatus::Succeeded,
            reason: None,
            duration_ms: 18_000,
            executor: "e".into(),
            node: None,
        })),
        heard(100.0),
    ] {
        g.apply(&r);
    }
    let s = g.job_split("a", "j").unwrap();
    assert!(close(s.recovery_s, 18.0), "{s:?}");
    assert!(close(s.productive_s, 100.0 - 20.0), "{s:?}");
    assert!(close(g.cluster_split("a").wall_s, 100.0));
}
