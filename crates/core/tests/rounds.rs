//! The detector applied in rounds: the same records read in different
//! interleavings across partitions, and redelivered after a crash, give
//! the same failures with the same ids, and replaying the recorded rounds
//! re-derives exactly what each live run emitted.

use std::collections::{BTreeMap, BTreeSet};

use unicron_core::detector::{
    Detector, DetectorConfig, DetectorInput, DetectorOutput, LogRules, Observation, SourceRecord,
};
use unicron_core::replay::{SourcedObservation, by_record, replay_rounds};
use unicron_core::*;

const T0: i64 = 1_767_225_600_000;
const AGENT: &str = "unicron.agent";
const LOGS: &str = "unicron.logs";

fn config() -> DetectorConfig {
    DetectorConfig {
        allowed_lateness_s: 5.0,
        ..DetectorConfig::default()
    }
}

fn detector() -> Detector {
    Detector::new(config(), LogRules::builtin())
}

/// A record as the broker holds it: where, what, and when it became
/// readable (ms after T0).
#[derive(Clone)]
struct Stored {
    source: SourceRecord,
    observation: Observation,
    arrives: i64,
}

/// A log being written: each record at the next offset of its partition.
#[derive(Default)]
struct Log {
    records: Vec<Stored>,
    offsets: BTreeMap<(String, i32), i64>,
}

impl Log {
    fn put(&mut self, topic: &str, partition: i32, observation: Observation, arrives: i64) {
        let offset = self
            .offsets
            .entry((topic.to_string(), partition))
            .or_insert(0);
        self.records.push(Stored {
            source: SourceRecord {
                topic: topic.into(),
                partition,
                offset: *offset,
                index: 0,
            },
            observation,
            arrives,
        });
        *offset += 1;
    }
}

/// Three nodes of one job, each on its own agent partition, heartbeating
/// and finishing an iteration every second; n3 dies at 20 s and n1 logs
/// an NCCL timeout at 26 s (a symptom of the loss, absorbed by it). `late_ms` delays partition 1's arrivals.
fn log_of_a_cluster(late_ms: i64) -> Vec<Stored> {
    let mut log = Log::default();
    let mut put = |topic: &str, partition: i32, observation: Observation, arrives: i64| {
        log.put(topic, partition, observation, arrives)
    };
    for s in 0..40 {
        for (p, node) in ["n1", "n2", "n3"].into_iter().enumerate() {
            if node == "n3" && s >= 20 {
                continue;
            }
            let t = T0 + s * 1000 + p as i64 * 10;
            let arrives = t - T0 + if p == 1 { late_ms } else { 0 };
            let mut beat = AgentEvent::new("c1", node, t, AgentEventKind::Heartbeat);
            beat.job = Some("j1".into());
            put(AGENT, p as i32, Observation::Agent(beat), arrives);
            let mut done = AgentEvent::new("c1", node, t + 1, AgentEventKind::IterationDone);
            done.job = Some("j1".into());
            done.rank = Some(p as i32);
            done.iteration = Some(s);
            done.iteration_time_ms = Some(1000.0);
            put(AGENT, p as i32, Observation::Agent(done), arrives + 1);
        }
        if s == 26 {
            let line = LogRecord {
                cluster: "c1".into(),
                node: "n1".into(),
                time_ms: T0 + s * 1000 + 500,
                job: Some("j1".into()),
                rank: Some(0),
                gpu: None,
                source: "stderr".into(),
                attributes: BTreeMap::new(),
                line: "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.".into(),
            };
            put(LOGS, 0, Observation::Log(line), s * 1000 + 500);
        }
    }
    log.records
}

/// A live detector instance: reads what has arrived, in arrival order
/// (ties by partition), `batch` records a round, as the service does.
struct Live {
    detector: Detector,
    name: String,
    seq: i64,
    rounds: Vec<DetectorRound>,
    published: Vec<FailureEvent>,
}

impl Live {
    fn new(name: &str) -> Live {
        Live {
            detector: detector(),
            name: name.into(),
            seq: 0,
            rounds: Vec::new(),
            published: Vec::new(),
        }
    }

    /// Applies `batch` (records read together) as one round; `publish`
    /// false: the instance dies after writing the round, before its
    /// failures are out.
    fn round(&mut self, batch: &[(Stored, bool)], publish: bool) {
        self.round_with(batch, publish, Vec::new());
    }

    /// A round that also names the partitions found behind since the last
    /// (what the service's tick notices).
    fn round_with(&mut self, batch: &[(Stored, bool)], publish: bool, behind: Vec<PartitionRef>) {
        let behind = behind.into_iter().map(|p| (p, false)).collect::<Vec<_>>();
        self.round_as(batch, publish, behind, false);
    }

    /// A warm-up round after a takeover: `batch` is read again from below
    /// the committed offsets, state only, timers held.
    fn warm_up(&mut self, batch: &[(Stored, bool)]) {
        self.round_as(batch, true, Vec::new(), true);
    }

    /// A round of only partitions found read to their end (the service's
    /// tick, for a partition with nothing new to read).
    fn found_caught_up(&mut self, caught_up: Vec<PartitionRef>) {
        let found = caught_up.into_iter().map(|p| (p, true)).collect();
        self.round_as(&[], true, found, false);
    }

    /// `found`: partitions found behind (`false`) or read to their end.
    fn round_as(
        &mut self,
        batch: &[(Stored, bool)],
        publish: bool,
        found: Vec<(PartitionRef, bool)>,
        warm: bool,
    ) {
        let (caught_up, behind): (Vec<_>, Vec<_>) = found.into_iter().partition(|(_, c)| *c);
        let strip = |v: Vec<(PartitionRef, bool)>| v.into_iter().map(|(p, _)| p).collect();
        let (caught_up, behind): (Vec<PartitionRef>, Vec<PartitionRef>) =
            (strip(caught_up), strip(behind));
        let mut ranges: Vec<RoundRange> = Vec::new();
        let mut sorted: Vec<&(Stored, bool)> = batch.iter().collect();
        sorted.sort_by_key(|(s, _)| (s.source.topic.clone(), s.source.partition, s.source.offset));
        for (s, caught_up) in sorted {
            match ranges.last_mut() {
                Some(r)
                    if r.topic == s.source.topic
                        && r.partition == s.source.partition
                        && r.last_offset + 1 == s.source.offset =>
                {
                    r.last_offset = s.source.offset;
                    r.last_caught_up = *caught_up;
                }
                _ => ranges.push(RoundRange {
                    topic: s.source.topic.clone(),
                    partition: s.source.partition,
                    first_offset: s.source.offset,
                    last_offset: s.source.offset,
                    last_caught_up: *caught_up,
                }),
            }
        }
        let mut round = DetectorRound {
            detector: self.name.clone(),
            seq: self.seq,
            ranges,
            behind,
            caught_up,
            reset: warm,
            silence_held: warm,
            warm,
            ..DetectorRound::default()
        };
        self.seq += 1;
        let inputs = batch
            .iter()
            .map(|(s, caught_up)| DetectorInput {
                source: s.source.clone(),
                observation: s.observation.clone(),
                caught_up: *caught_up,
            })
            .collect();
        let failures: Vec<FailureEvent> = self
            .detector
            .apply_round(&round, inputs)
            .into_iter()
            .map(|o| match o.output {
                DetectorOutput::Failure(f) => f,
                DetectorOutput::Rejected(r) => panic!("rejected: {r}"),
            })
            .collect();
        round.failures = failures.iter().map(|f| f.id.clone()).collect();
        self.rounds.push(round);
        if publish {
            self.published.extend(failures);
        }
    }
}

/// Reads `log` in arrival order, `batch` records a round; a record is
/// caught up when nothing newer on its partition had arrived by the time
/// its batch was read.
fn batches(log: &[Stored], batch: usize) -> Vec<Vec<(Stored, bool)>> {
    read_behind(log, |_| 0, batch)
        .into_iter()
        .map(|(records, _)| records)
        .collect()
}

fn observations(log: &[Stored]) -> BTreeMap<(String, i32, i64), Vec<SourcedObservation>> {
    let all: Vec<SourcedObservation> = log
        .iter()
        .map(|s| SourcedObservation {
            source: s.source.clone(),
            observation: s.observation.clone(),
        })
        .collect();
    by_record(&all)
}

fn run(log: &[Stored], batch: usize) -> Live {
    let mut live = Live::new("d-a");
    for b in batches(log, batch) {
        live.round(&b, true);
    }
    live
}

/// What a failure is, without when it happened to be noticed.
fn found(failures: &[FailureEvent]) -> BTreeSet<(String, String, Option<String>, i64)> {
    failures
        .iter()
        .map(|f| {
            (
                f.id.clone(),
                f.kind.to_string(),
                f.node.clone(),
                f.first_evidence_ms,
            )
        })
        .collect()
}

#[test]
fn two_interleavings_give_the_same_failures_and_ids_and_each_replays_exactly() {
    let in_step = log_of_a_cluster(0);
    let skewed = log_of_a_cluster(3_000);
    let a = run(&in_step, 4);
    let b = run(&skewed, 7);
    let lost: Vec<_> = a
        .published
        .iter()
        .filter(|f| f.kind == FailureKind::LostConnection)
        .collect();
    assert_eq!(lost.len(), 1, "{:#?}", a.published);
    assert_eq!(lost[0].node.as_deref(), Some("n3"));
    assert_eq!(found(&a.published), found(&b.published));

    for (live, log) in [(&a, &in_step), (&b, &skewed)] {
        let replayed = replay_rounds(
            &live.rounds,
            &observations(log),
            &live.published,
            detector,
            |_| true,
        );
        assert_eq!(replayed.comparison.diverged, 0, "{:?}", replayed.comparison);
        assert!(replayed.comparison.identical > 0);
        assert_eq!(
            replayed.failures, live.published,
            "exactly, detection times too"
        );
    }
}

#[test]
fn a_crash_and_redelivery_repeat_the_same_ids_and_replay_still_agrees() {
    let log = log_of_a_cluster(1_000);
    let whole = run(&log, 5);
    let all = batches(&log, 5);
    let cut = all.len() * 3 / 5;
    let mut first = Live::new("d-1");
    for (i, b) in all[..cut].iter().enumerate() {
        // Dies after writing its last round, before publishing it.
        first.round(b, i + 1 < cut);
    }
    // The next instance starts afresh and reads everything again (its
    // group's committed offsets were at the start).
    let mut second = Live::new("d-2");
    for b in &all {
        second.round(b, true);
    }
    let mut published = first.published.clone();
    published.extend(second.published.clone());
    let ids = |f: &[FailureEvent]| f.iter().map(|f| f.id.clone()).collect::<BTreeSet<_>>();
    assert_eq!(ids(&published), ids(&whole.published));

    let mut rounds = first.rounds.clone();
    rounds.extend(second.rounds.clone());
    let replayed = replay_rounds(&rounds, &observations(&log), &published, detector, |_| true);
    assert_eq!(replayed.comparison.diverged, 0, "{:?}", replayed.comparison);
}

/// A detector that takes over partitions after n3's last heartbeat was
/// read and committed by another never reads that heartbeat live. Warmed
/// by the records of the ten seconds below the commit, it finds n3 lost;
/// without, it never does. The warm-up publishes nothing itself, and
/// replay of its rounds agrees.
#[test]
fn a_takeover_warmed_by_the_records_below_the_commit_finds_a_node_lost_before_it() {
    let log = log_of_a_cluster(0);
    let all = batches(&log, 4);
    let last_of_n3 = |b: &Vec<(Stored, bool)>| {
        b.iter().any(|(s, _)| match &s.observation {
            Observation::Agent(e) => e.node == "n3" && e.time_ms >= T0 + 19_000,
            _ => false,
        })
    };
    let cut = all.iter().position(last_of_n3).unwrap() + 1;
    let committed: Vec<(Stored, bool)> = all[..cut].iter().flatten().cloned().collect();
    let cut_ms = committed
        .iter()
        .map(|(s, _)| s.observation.time_ms())
        .max()
        .unwrap();
    let mut first = Live::new("d-1");
    for b in &all[..cut] {
        first.round(b, true);
    }
    assert!(
        first
            .published
            .iter()
            .all(|f| f.kind != FailureKind::LostConnection),
        "n3's deadline had not passed before the takeover"
    );

    let lost = |live: &Live| {
        live.published
            .iter()
            .filter(|f| f.kind == FailureKind::LostConnection)
            .map(|f| f.node.clone().unwrap())
            .collect::<Vec<_>>()
    };
    let n3_partition = || {
        vec![PartitionRef {
            topic: AGENT.into(),
            partition: 2,
        }]
    };
    let mut cold = Live::new("d-cold");
    cold.found_caught_up(n3_partition());
    for b in &all[cut..] {
        cold.round(b, true);
    }
    assert_eq!(
        lost(&cold),
        Vec::<String>::new(),
        "the gap a warm-up closes"
    );

    let mut warm = Live::new("d-warm");
    let window: Vec<(Stored, bool)> = committed
        .into_iter()
        .filter(|(s, _)| s.observation.time_ms() >= cut_ms - 10_000)
        .map(|(s, _)| (s, false))
        .collect();
    warm.warm_up(&window);
    assert!(warm.published.is_empty(), "a warm-up publishes nothing");
    // n3's partition has nothing new: the first tick finds it read to its end.
    warm.found_caught_up(n3_partition());
    for b in &all[cut..] {
        warm.round(b, true);
    }
    assert_eq!(lost(&warm), ["n3"]);

    let replayed = replay_rounds(
        &warm.rounds,
        &observations(&log),
        &warm.published,
        detector,
        |_| true,
    );
    assert_eq!(replayed.comparison.diverged, 0, "{:?}", replayed.comparison);
    assert_eq!(replayed.failures, warm.published);
}

/// The check can fail: a round that names a record the live run did not
/// apply makes replay disagree.
#[test]
fn replay_finds_a_round_that_does_not_match_the_records() {
    let log = log_of_a_cluster(0);
    let live = run(&log, 4);
    let mut rounds = live.rounds.clone();
    let target = rounds
        .iter()
        .position(|r| !r.failures.is_empty())
        .expect("a round emitted a failure");
    rounds[target].failures.clear();
    let replayed = replay_rounds(
        &rounds,
        &observations(&log),
        &live.published,
        detector,
        |_| true,
    );
    assert!(replayed.comparison.diverged >= 1);
    assert_eq!(replayed.comparison.first_divergence.unwrap().what, "round");
}

/// The log lines of [`log_of_two_symptoms_and_a_death`]: (second, node,
/// rank and logs partition, line).
const LINES: [(i64, &str, i32, &str); 3] = [
    (
        50,
        "n1",
        0,
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
    ),
    (
        58,
        "n2",
        1,
        "RuntimeError: The client socket has failed to connect to [n0061]:29500 (errno: 111 - Connection refused).",
    ),
    (
        70,
        "n3",
        2,
        "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1943, GPU has fallen off the bus.",
    ),
];

/// Six nodes of one job, each on its own agent partition, heartbeating
/// every second for 140 s; n1 logs an NCCL timeout at 50 s and n2 a refused
/// connection at 58 s (two faults, 8 s apart), n3's GPU falls off the bus at
/// 70 s, and n4 dies at 100 s.
fn log_of_two_symptoms_and_a_death() -> Vec<Stored> {
    let mut log = Log::default();
    let mut put = |topic: &str, partition: i32, observation: Observation, at: i64| {
        log.put(topic, partition, observation, at - T0)
    };
    let line = |node: &str, rank: i32, time_ms: i64, line: &str| LogRecord {
        cluster: "c1".into(),
        node: node.into(),
        time_ms,
        job: Some("j1".into()),
        rank: Some(rank),
        gpu: None,
        source: "stderr".into(),
        attributes: BTreeMap::new(),
        line: line.into(),
    };
    for s in 0..140 {
        for p in 0..6 {
            let node = format!("n{}", p + 1);
            if node == "n4" && s >= 100 {
                continue;
            }
            let t = T0 + s * 1000 + p as i64 * 10;
            let mut beat = AgentEvent::new("c1", &node, t, AgentEventKind::Heartbeat);
            beat.job = Some("j1".into());
            put(AGENT, p, Observation::Agent(beat), t);
        }
        for (at, node, rank, text) in LINES {
            if s == at {
                let t = T0 + s * 1000 + 500;
                put(LOGS, rank, Observation::Log(line(node, rank, t, text)), t);
            }
        }
    }
    log.records
}

/// A round's records and the partitions the service found behind before it.
type ReadRound = (Vec<(Stored, bool)>, Vec<PartitionRef>);

/// Reads `log` as a consumer that is `lag(record)` ms behind the broker on
/// each record's partition, `batch` records a round; a record is caught up
/// when nothing newer on its partition was on the broker when it was read,
/// and each round names the partitions with records on the broker not yet
/// read (the service's tick).
fn read_behind(log: &[Stored], lag: impl Fn(&Stored) -> i64, batch: usize) -> Vec<ReadRound> {
    let read_time = |s: &Stored| s.arrives + lag(s);
    let mut order: Vec<&Stored> = log.iter().collect();
    order.sort_by_key(|s| {
        (
            read_time(s),
            s.source.topic.clone(),
            s.source.partition,
            s.source.offset,
        )
    });
    let mut read_until = i64::MIN;
    order
        .chunks(batch)
        .map(|chunk| {
            let behind: BTreeSet<PartitionRef> = log
                .iter()
                .filter(|o| o.arrives <= read_until && read_time(o) > read_until)
                .map(|o| PartitionRef {
                    topic: o.source.topic.clone(),
                    partition: o.source.partition,
                })
                .collect();
            let read_at = chunk.iter().map(|s| read_time(s)).max().unwrap();
            read_until = read_at;
            let records = chunk
                .iter()
                .map(|s| {
                    let newer_on_broker = log.iter().any(|o| {
                        o.source.topic == s.source.topic
                            && o.source.partition == s.source.partition
                            && o.source.offset > s.source.offset
                            && o.arrives <= read_at
                    });
                    ((*s).clone(), !newer_on_broker)
                })
                .collect();
            (records, behind.into_iter().collect())
        })
        .collect()
}

/// A backlog is no evidence: the consumer reads n6's heartbeat partition
/// three minutes late from 20 s on. Its heartbeats wait unread, so n6 is
/// not the silent peer behind n1's NCCL timeout, and n2's refused
/// connection 8 s later is a fault of its own even though n1's window is
/// still open (the watermark is held back); n3's Xid 12 s after that is
/// not their root cause for the same reason. n4, which really died, is
/// found lost once the backlog is read. The same records read in order
/// give the same failures, and the lagging run replays exactly.
#[test]
fn a_backlog_makes_late_verdicts_never_false_ones() {
    let log = log_of_two_symptoms_and_a_death();
    let lagging = |s: &Stored| {
        if s.source.topic == AGENT && s.source.partition == 5 && s.arrives >= 20_000 {
            180_000
        } else {
            0
        }
    };
    let mut behind = Live::new("d-behind");
    for (records, partitions) in read_behind(&log, lagging, 6) {
        behind.round_with(&records, true, partitions);
    }
    let in_order = run(&log, 6);
    let brief = |live: &Live| {
        live.published
            .iter()
            .map(|f| (f.kind, f.node.clone().unwrap_or_default()))
            .collect::<BTreeSet<_>>()
    };
    let expected: BTreeSet<_> = [
        (FailureKind::NcclTimeout, "n1".to_string()),
        (FailureKind::ConnectionRefused, "n2".to_string()),
        (FailureKind::GpuDriverError, "n3".to_string()),
        (FailureKind::LostConnection, "n4".to_string()),
    ]
    .into();
    assert_eq!(brief(&behind), expected, "{:#?}", behind.published);
    assert_eq!(behind.published.len(), 4, "{:#?}", behind.published);
    assert_eq!(found(&behind.published), found(&in_order.published));
    let replayed = replay_rounds(
        &behind.rounds,
        &observations(&log),
        &behind.published,
        detector,
        |_| true,
    );
    assert_eq!(replayed.comparison.diverged, 0, "{:?}", replayed.comparison);
    assert_eq!(replayed.failures, behind.published);
}
