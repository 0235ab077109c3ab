//! Symptom groups settle in processing time: under a backlog the watermark
//! crosses a correlation window within one round, and the log line that
//! explains an exit can be fetched a moment after the exit, from another
//! partition that looked read to its end. The group waits
//! `symptom_settle_s` of the rounds' read time, so the line is read into
//! it instead of becoming a second failure of the same node; replay of the
//! same rounds agrees.

use std::collections::BTreeMap;

use unicron_core::detector::{
    Detector, DetectorConfig, DetectorInput, LogRules, Observation, SourceRecord,
};
use unicron_core::*;

const T0: i64 = 1_767_225_600_000;
/// The service's wall clock when the backlog is read.
const READ0: i64 = 1_767_300_000_000;

/// One input record: topic, partition, offset and what it says.
type Record = (&'static str, i32, i64, Observation);

fn heartbeats(from_s: i64, to_s: i64, offset: &mut i64) -> Vec<Record> {
    let mut out = Vec::new();
    for s in from_s..to_s {
        for (p, node) in ["n1", "n2", "n3"].into_iter().enumerate() {
            let mut beat = AgentEvent::new("c1", node, T0 + s * 1000, AgentEventKind::Heartbeat);
            beat.job = Some("j1".into());
            out.push(("unicron.agent", p as i32, *offset, Observation::Agent(beat)));
        }
        *offset += 1;
    }
    out
}

/// n1's process exits with code 1 at 10 s, on agent partition 0.
fn exit(offset: i64) -> Record {
    let mut exit = AgentEvent::new("c1", "n1", T0 + 10_000, AgentEventKind::ProcessExit);
    exit.job = Some("j1".into());
    exit.rank = Some(0);
    exit.exit_code = Some(1);
    ("unicron.agent", 0, offset, Observation::Agent(exit))
}

/// The CUDA error n1 printed just before, on logs partition 0.
fn cuda_line(offset: i64) -> Record {
    let line = LogRecord {
        cluster: "c1".into(),
        node: "n1".into(),
        time_ms: T0 + 9_900,
        job: Some("j1".into()),
        rank: Some(0),
        gpu: Some(3),
        source: "training".into(),
        attributes: BTreeMap::new(),
        line: "RuntimeError: CUDA error: an illegal memory access was encountered".into(),
    };
    ("unicron.logs", 0, offset, Observation::Log(line))
}

/// A start-up log line on logs partition 0, so that partition is one the
/// cluster's records come from (read to its end).
fn hello_line() -> Record {
    let line = LogRecord {
        cluster: "c1".into(),
        node: "n1".into(),
        time_ms: T0,
        job: Some("j1".into()),
        rank: Some(0),
        gpu: None,
        source: "training".into(),
        attributes: BTreeMap::new(),
        line: "step 0 loss 11.2".into(),
    };
    ("unicron.logs", 0, 0, Observation::Log(line))
}

/// The rounds the live service would write: each names its records (all
/// read as their partition's newest) and its read time.
fn rounds(batches: &[(i64, Vec<Record>)]) -> Vec<(DetectorRound, Vec<DetectorInput>)> {
    batches
        .iter()
        .enumerate()
        .map(|(seq, (read_ms, records))| {
            let mut ends: BTreeMap<(&str, i32), (i64, i64)> = BTreeMap::new();
            for (topic, p, offset, _) in records {
                let e = ends.entry((topic, *p)).or_insert((*offset, *offset));
                e.0 = e.0.min(*offset);
                e.1 = e.1.max(*offset);
            }
            let round = DetectorRound {
                detector: "d1".into(),
                seq: seq as i64,
                ranges: ends
                    .into_iter()
                    .map(|((topic, partition), (first, last))| RoundRange {
                        topic: topic.into(),
                        partition,
                        first_offset: first,
                        last_offset: last,
                        last_caught_up: true,
                    })
                    .collect(),
                read_ms: *read_ms,
                ..DetectorRound::default()
            };
            let inputs = records
                .iter()
                .map(|(topic, partition, offset, observation)| DetectorInput {
                    source: SourceRecord {
                        topic: (*topic).into(),
                        partition: *partition,
                        offset: *offset,
                        index: 0,
                    },
                    observation: observation.clone(),
                    caught_up: true,
                })
                .collect();
            (round, inputs)
        })
        .collect()
}

/// The failures (kind, node) each round emits.
fn run(config: &DetectorConfig, batches: &[(i64, Vec<Record>)]) -> Vec<Vec<(FailureKind, String)>> {
    let mut detector = Detector::new(config.clone(), LogRules::builtin());
    rounds(batches)
        .into_iter()
        .map(|(round, inputs)| {
            detector
                .apply_round(&round, inputs)
                .into_iter()
                .filter_map(|out| match out.output {
                    unicron_core::detector::DetectorOutput::Failure(f) => {
                        Some((f.kind, f.node.unwrap_or_default()))
                    }
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// The backlog: the exit and 20 s of heartbeats after it read in one
/// round; then a round of heartbeats `beats_after_ms` of wall time later
/// (if any); then the CUDA line with more heartbeats, `line_after_ms`
/// after the first.
fn backlog(beats_after_ms: Option<i64>, line_after_ms: i64) -> Vec<(i64, Vec<Record>)> {
    let mut offset = 1;
    let mut first = vec![hello_line()];
    first.extend(heartbeats(0, 10, &mut offset));
    first.push(exit(offset));
    offset += 1;
    first.extend(heartbeats(10, 30, &mut offset));
    let mut batches = vec![(READ0, first)];
    if let Some(after) = beats_after_ms {
        batches.push((READ0 + after, heartbeats(30, 31, &mut offset)));
    }
    let mut last = heartbeats(31, 32, &mut offset);
    last.push(cuda_line(1));
    batches.push((READ0 + line_after_ms, last));
    batches
}

fn n1(kind: FailureKind) -> (FailureKind, String) {
    (kind, "n1".into())
}

#[test]
fn a_root_cause_fetched_just_after_its_exit_is_read_into_it() {
    let config = DetectorConfig::default();
    let out = run(&config, &backlog(Some(300), 600));
    assert_eq!(out[0], vec![], "the exit's group waits to settle");
    assert_eq!(out[1], vec![], "still within the settle time");
    assert_eq!(out[2], vec![n1(FailureKind::IllegalMemoryAccess)]);
    // Replay of the same rounds emits the same.
    assert_eq!(run(&config, &backlog(Some(300), 600)), out);
}

#[test]
fn without_settling_the_late_line_is_a_second_failure() {
    let config = DetectorConfig {
        symptom_settle_s: 0.0,
        ..DetectorConfig::default()
    };
    let out = run(&config, &backlog(None, 300));
    assert_eq!(out[0], vec![n1(FailureKind::ExitedAbnormally)]);
    assert_eq!(out[1], vec![n1(FailureKind::IllegalMemoryAccess)]);
}

#[test]
fn a_settled_group_closes_and_a_later_line_is_its_own() {
    // Heartbeats read after the settle time close the group; a line read
    // after that is late, and a failure of its own.
    let out = run(&DetectorConfig::default(), &backlog(Some(2_000), 2_500));
    assert_eq!(out[0], vec![]);
    assert_eq!(out[1], vec![n1(FailureKind::ExitedAbnormally)]);
    assert_eq!(out[2], vec![n1(FailureKind::IllegalMemoryAccess)]);
}

#[test]
fn rounds_without_a_read_time_do_not_settle() {
    // Rounds written before the read time was recorded decode with 0.
    let mut batches = backlog(None, 300);
    for (read_ms, _) in &mut batches {
        *read_ms = 0;
    }
    let out = run(&DetectorConfig::default(), &batches);
    assert_eq!(out[0], vec![n1(FailureKind::ExitedAbnormally)]);
}

/// Ranks 0-2 of j1 (on n1-n3) finish an iteration a second up to 10 s;
/// then n1 prints an NCCL timeout and the job stalls, while the nodes go on
/// heartbeating to 40 s. All read within one settle time (a fast replay, a
/// simulator running ahead of the wall clock).
fn nccl_timeout_then_stall() -> Vec<(i64, Vec<Record>)> {
    let mut records = vec![hello_line()];
    let mut offset = 1;
    for s in 0..=10 {
        for (p, node) in ["n1", "n2", "n3"].into_iter().enumerate() {
            let mut done =
                AgentEvent::new("c1", node, T0 + s * 1000, AgentEventKind::IterationDone);
            done.job = Some("j1".into());
            done.rank = Some(p as i32);
            done.iteration = Some(s);
            done.iteration_time_ms = Some(1000.0);
            records.push(("unicron.agent", p as i32, offset, Observation::Agent(done)));
        }
        offset += 1;
    }
    records.extend(heartbeats(0, 40, &mut offset));
    let line = LogRecord {
        cluster: "c1".into(),
        node: "n1".into(),
        time_ms: T0 + 10_500,
        job: Some("j1".into()),
        rank: Some(0),
        gpu: None,
        source: "training".into(),
        attributes: BTreeMap::new(),
        line: "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.".into(),
    };
    records.push(("unicron.logs", 0, 1, Observation::Log(line)));
    vec![(READ0, records)]
}

#[test]
fn a_hang_of_a_job_ends_its_symptoms_settle_and_they_are_the_verdict() {
    let config = DetectorConfig {
        hang_min_stall_s: 0.0,
        ..DetectorConfig::default()
    };
    let out = run(&config, &nccl_timeout_then_stall());
    assert_eq!(out[0], vec![n1(FailureKind::NcclTimeout)]);
    assert_eq!(run(&config, &nccl_timeout_then_stall()), out, "replay");
}
