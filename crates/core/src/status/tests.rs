use std::collections::BTreeMap;

use super::*;
use crate::planner::{Input, Output, Planner, PolicyName};
use crate::records::{
    ClusterEvent, ClusterEventKind, CommandAction, CommandResult, CommandStatus, FailureEvent,
    FailureKind, JobSpec, ThroughputPoint, Trigger,
};
use crate::signing::CommandSigner;

const T0: i64 = 1_764_000_000_000;

/// A live run: inputs go through a real planner and every record it
/// writes is logged after its input, as the topics hold them.
struct Run {
    planner: Planner,
    offsets: BTreeMap<String, i64>,
    log: Vec<Read>,
}

impl Run {
    fn new() -> Run {
        let config = PlannerConfig {
            policy: PolicyName::Unicron,
            ..PlannerConfig::default()
        };
        Run {
            planner: Planner::new(config, CommandSigner::from_seed("t", [1; 32])),
            offsets: BTreeMap::new(),
            log: Vec::new(),
        }
    }

    fn read(&mut self, topic: &str, record: Record) -> Read {
        let offset = self.offsets.entry(topic.to_string()).or_insert(0);
        *offset += 1;
        Read {
            topic: topic.into(),
            partition: 0,
            offset: *offset,
            record,
        }
    }

    fn feed(&mut self, topic: &str, event: InputEvent) -> Vec<Command> {
        let read = self.read(topic, Record::Input(event.clone()));
        let input = Input {
            topic: read.topic.clone(),
            partition: 0,
            offset: read.offset,
            event,
        };
        self.log.push(read);
        let mut commands = Vec::new();
        for output in self.planner.apply(&input) {
            let read = match output {
                Output::Decision(d) => self.read("unicron.decisions", Record::Decision(d)),
                Output::Command(c) => {
                    commands.push(c.clone());
                    self.read("unicron.commands", Record::Command(c))
                }
                Output::Rejected(_) => continue,
            };
            self.log.push(read);
        }
        commands
    }

    /// Four 8-GPU nodes and one job on them.
    fn cluster(&mut self, cluster: &str) {
        for n in 1..=4 {
            let mut e = ClusterEvent::new(cluster, T0 + n, ClusterEventKind::NodeJoined);
            e.node = Some(format!("n{n}"));
            e.gpus = Some(8);
            self.feed("unicron.cluster", InputEvent::Cluster(e));
        }
        let mut e = ClusterEvent::new(cluster, T0 + 10, ClusterEventKind::JobSubmitted);
        e.job_id = Some("j".into());
        e.job = Some(JobSpec {
            weight: 1.0,
            min_gpus: 8,
            max_gpus: 32,
            unit_gpus: 8,
            dp_degree: 1,
            checkpoint_interval_s: 1800,
            throughput: vec![
                ThroughputPoint {
                    gpus: 8,
                    flops: 1e15,
                },
                ThroughputPoint {
                    gpus: 32,
                    flops: 3e15,
                },
            ],
        });
        self.feed("unicron.cluster", InputEvent::Cluster(e));
    }

    fn fail(&mut self, cluster: &str, id: &str, kind: FailureKind, at: i64) -> Vec<Command> {
        let f = failure(cluster, id, kind, at);
        self.feed("unicron.failures", InputEvent::Failure(f))
    }

    fn answer(&mut self, c: &Command, status: CommandStatus, at: i64) -> Vec<Command> {
        let r = CommandResult {
            command_id: c.id.clone(),
            cluster: c.cluster.clone(),
            time_ms: at,
            status,
            reason: None,
            duration_ms: 2000,
            executor: "e1".into(),
            node: None,
        };
        self.feed("unicron.command-results", InputEvent::Result(r))
    }
}

fn failure(cluster: &str, id: &str, kind: FailureKind, at: i64) -> FailureEvent {
    crate::testing::failure(id, cluster, "n1", kind, at - 500, at)
}

fn incidents_of(log: &[Read]) -> IncidentLog {
    let mut incidents = IncidentLog::new();
    for read in log {
        incidents.apply(&read.record);
    }
    incidents
}

/// A failure, its decision, command and results, and the no-op
/// decisions on those results: one incident, recovered.
#[test]
fn one_failure_is_one_incident_with_its_chain() {
    let mut run = Run::new();
    run.cluster("a");
    let t = T0 + 60_000;
    let commands = run.fail("a", "f1", FailureKind::EccError, t);
    assert!(!commands.is_empty());
    let open = incidents_of(&run.log).incidents(None, 10);
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].state, IncidentState::Open);
    assert_eq!(open[0].time_to_recovery_ms, None);

    let mut last = t;
    for (i, c) in commands.iter().enumerate() {
        last = t + 5_000 + 2_000 * i as i64;
        assert!(run.answer(c, CommandStatus::Succeeded, last).is_empty());
    }
    let log = incidents_of(&run.log);
    let all = log.incidents(None, 10);
    assert_eq!(all.len(), 1, "cluster events made no incident: {all:#?}");
    let i = &all[0];
    assert_eq!((i.id.as_str(), i.cluster.as_str()), ("f1", "a"));
    assert_eq!(
        (i.kind.as_str(), i.severity.as_str()),
        ("ecc_error", "SEV1")
    );
    assert_eq!(i.state, IncidentState::Recovered);
    assert!(i.decided.starts_with("isolate_node"), "{}", i.decided);
    assert_eq!(i.commands.len(), commands.len());
    assert!(
        i.commands
            .iter()
            .all(|c| c.outcome == CommandOutcome::Succeeded && c.results.len() == 1)
    );
    // The failure's decision, then one that changes nothing per result.
    assert_eq!(i.decisions.len(), 1 + commands.len());
    assert!(i.decisions[0].changes && i.decisions[0].trigger_kind == "failure");
    assert_eq!(i.folded(), commands.len());
    // From the first evidence to the last success, in event time.
    assert_eq!(i.recovered_ms, Some(last));
    assert_eq!(i.time_to_recovery_ms, Some(last - (t - 500)));
}

#[test]
fn out_of_order_arrival_still_gives_newest_first() {
    let mut run = Run::new();
    for cluster in ["a", "b"] {
        run.cluster(cluster);
    }
    // Failures on both clusters, each answered.
    let times = [(T0 + 90_000, "a"), (T0 + 30_000, "b"), (T0 + 60_000, "a")];
    for (n, (at, cluster)) in times.iter().enumerate() {
        let kind = [FailureKind::NcclTimeout, FailureKind::CudaError][n % 2];
        for c in run.fail(cluster, &format!("f{n}"), kind, *at) {
            run.answer(&c, CommandStatus::Succeeded, at + 4_000);
        }
    }
    let in_order = incidents_of(&run.log).incidents(None, 10);
    let ids: Vec<&str> = in_order.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["f0", "f2", "f1"], "newest detection first");
    assert!(in_order.iter().all(|i| i.state == IncidentState::Recovered));

    // Reversed: every result, command and decision before its cause.
    let reversed: Vec<Read> = run.log.iter().rev().cloned().collect();
    assert_eq!(incidents_of(&reversed).incidents(None, 10), in_order);
    // A stride through the log: the topics interleaved at random.
    let n = run.log.len();
    let step = (7..).find(|s| gcd(*s, n) == 1).expect("a coprime step");
    let stride: Vec<Read> = (0..n).map(|i| run.log[(i * step) % n].clone()).collect();
    assert_eq!(incidents_of(&stride).incidents(None, 10), in_order);
    let log = incidents_of(&reversed);
    assert_eq!(log.parked(), 0, "nothing left waiting");
    let a: Vec<String> = log
        .incidents(Some("a"), 10)
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(a, ["f0", "f2"]);
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Hand-made records of one failure, for logs too big for the planner.
fn chain(cluster: &str, n: i64, at: i64, result: CommandStatus) -> Vec<Record> {
    let id = format!("f{n}");
    let cid = format!("c:{cluster}:{n}");
    let decision = |id: &str, kind: &str, on: &str, commands: Vec<String>| Decision {
        id: id.into(),
        cluster: cluster.into(),
        time_ms: at,
        trigger: Trigger {
            kind: kind.into(),
            ref_id: on.into(),
            topic: "t".into(),
            partition: 0,
            offset: n,
        },
        inputs_digest: String::new(),
        policy: "unicron".into(),
        policy_version: "1".into(),
        alternatives: vec![],
        chosen_index: None,
        assignment: BTreeMap::new(),
        reason: String::new(),
        command_ids: commands,
    };
    let command = Command {
        id: cid.clone(),
        cluster: cluster.into(),
        decision_id: format!("d1:{n}"),
        time_ms: at,
        action: CommandAction::Reattempt,
        job: Some("j".into()),
        nodes: vec![],
        restore_from: None,
        causation: vec![id.clone(), format!("unicron.failures/0/{n}")],
        key_id: String::new(),
        signature: vec![],
        rendezvous: None,
        snapshots: None,
    };
    let result = CommandResult {
        command_id: cid.clone(),
        cluster: cluster.into(),
        time_ms: at + 1_000,
        status: result,
        reason: None,
        duration_ms: 1_000,
        executor: "e".into(),
        node: None,
    };
    vec![
        Record::Input(InputEvent::Failure(failure(
            cluster,
            &id,
            FailureKind::NcclTimeout,
            at,
        ))),
        Record::Decision(decision(
            &format!("d1:{n}"),
            "failure",
            &id,
            vec![cid.clone()],
        )),
        Record::Command(command),
        Record::Input(InputEvent::Result(result)),
        Record::Decision(decision(&format!("d2:{n}"), "command_result", &cid, vec![])),
    ]
}

#[test]
fn the_window_holds_with_100_clusters() {
    let mut log = IncidentLog::new();
    let mut n = 0;
    for round in 0..30 {
        for c in 0..100 {
            n += 1;
            // Outputs before the failure half the time.
            let mut records = chain(
                &format!("c{c}"),
                n,
                T0 + 1_000 * n,
                CommandStatus::Succeeded,
            );
            if n % 2 == 0 {
                records.rotate_left(1);
            }
            for r in &records {
                log.apply(r);
            }
        }
        assert!(log.len() <= INCIDENTS, "round {round}: {}", log.len());
    }
    assert_eq!(log.len(), INCIDENTS);
    let kept = log.incidents(None, usize::MAX);
    assert_eq!(kept.len(), INCIDENTS);
    // The newest are kept, newest first, each with its chain.
    assert_eq!(kept[0].detected_ms, T0 + 1_000 * n);
    assert_eq!(
        kept[INCIDENTS - 1].detected_ms,
        T0 + 1_000 * (n - INCIDENTS as i64 + 1)
    );
    assert!(kept.iter().all(|i| i.state == IncidentState::Recovered));
    assert!(log.parked() <= PENDING_PARTS);
    assert!(log.command_failure.len() <= INCIDENTS * CHAIN);

    // One flapping cluster keeps at most its cap and pushes no one out.
    for _ in 0..200 {
        n += 1;
        for r in chain("noisy", n, T0 + 1_000 * n, CommandStatus::Succeeded) {
            log.apply(&r);
        }
    }
    assert_eq!(
        log.incidents(Some("noisy"), usize::MAX).len(),
        INCIDENTS_PER_CLUSTER
    );
    assert_eq!(log.len(), INCIDENTS);
    assert_eq!(log.incidents(Some("c99"), 1).len(), 1);
}

#[test]
fn decisions_that_change_nothing_make_no_incident() {
    let mut run = Run::new();
    // Nodes joining and a job submitted: decisions, start commands,
    // their results and the no-op decisions on those.
    run.cluster("a");
    let starts: Vec<Command> = run
        .log
        .iter()
        .filter_map(|r| match &r.record {
            Record::Command(c) => Some(c.clone()),
            _ => None,
        })
        .collect();
    for c in &starts {
        run.answer(c, CommandStatus::Succeeded, T0 + 20_000);
    }
    assert!(!starts.is_empty(), "the job is started");
    let log = incidents_of(&run.log);
    assert!(log.is_empty());
    // Read backwards too: what waited for the start commands is dropped
    // once they show they answer no failure.
    let reversed: Vec<Read> = run.log.iter().rev().cloned().collect();
    let log = incidents_of(&reversed);
    assert!(log.is_empty());
    assert_eq!(log.parked(), 0);
}

#[test]
fn a_failed_command_needs_an_operator_unless_escalated() {
    let records = chain("a", 1, T0, CommandStatus::Failed);
    let mut log = IncidentLog::new();
    for r in &records {
        log.apply(r);
    }
    let i = &log.incidents(None, 1)[0];
    assert_eq!(i.state, IncidentState::NeedsOperator);
    assert_eq!(i.time_to_recovery_ms, None);

    // The planner escalates instead: a restart on the failed result.
    let mut run = Run::new();
    run.cluster("a");
    let first = run.fail("a", "f1", FailureKind::NcclTimeout, T0 + 60_000);
    assert_eq!(first[0].action, CommandAction::Reattempt);
    let harsher = run.answer(&first[0], CommandStatus::Failed, T0 + 65_000);
    assert!(!harsher.is_empty());
    let log = incidents_of(&run.log);
    assert_eq!(log.incidents(None, 1)[0].state, IncidentState::Open);
    for c in &harsher {
        run.answer(c, CommandStatus::Succeeded, T0 + 90_000);
    }
    let i = &incidents_of(&run.log).incidents(None, 1)[0];
    assert_eq!(i.state, IncidentState::Recovered);
    assert_eq!(i.decided, "reattempt, restart");
    assert_eq!(i.time_to_recovery_ms, Some(90_000 - 60_000 + 500));
}

#[test]
fn the_summary_counts_a_clusters_nodes_jobs_and_open_incidents() {
    let mut run = Run::new();
    run.cluster("a");
    run.fail("a", "f1", FailureKind::EccError, T0 + 60_000);
    let mut view = StatusView::new(PlannerConfig::default());
    for read in run.log.clone() {
        view.apply(read);
    }
    let summaries = view.summaries();
    assert_eq!(summaries.len(), 1);
    let a = &summaries[0];
    assert_eq!(a.nodes.total, 4);
    assert_eq!(a.nodes.isolated, 1);
    assert_eq!(a.jobs.total, 1);
    assert_eq!(a.jobs.recovering, 1);
    assert_eq!((a.open_incidents, a.incidents), (1, 1));
    assert_eq!(a.last_incident_ms, Some(T0 + 60_000));
    assert_eq!(view.cluster("a").map(|c| c.nodes.len()), Some(4));
    assert!(view.cluster("b").is_none());
    assert_eq!(view.incidents(Some("a"), 5).len(), 1);
    assert!(view.incidents(Some("b"), 5).is_empty());
}

/// The page says which detectors hold their silence timers, from their
/// latest round, and forgets an instance that stopped writing rounds.
#[test]
fn the_latest_round_of_each_detector_says_whether_it_holds_its_timers() {
    let mut view = StatusView::new(PlannerConfig::default());
    let round = |detector: &str, seq: i64, held: bool| crate::records::DetectorRound {
        detector: detector.into(),
        seq,
        silence_held: held,
        ..Default::default()
    };
    view.apply_round(&round("d1", 0, false));
    view.apply_round(&round("d2", 0, true));
    assert_eq!(view.detector_timers_held(), ["d2"]);
    view.apply_round(&round("d2", 1, false));
    view.apply_round(&round("d1", 1, true));
    assert_eq!(view.detector_timers_held(), ["d1"]);
    for seq in 2..2_100 {
        view.apply_round(&round("d3", seq, false));
    }
    assert!(view.detector_timers_held().is_empty(), "d1 stopped");
}
