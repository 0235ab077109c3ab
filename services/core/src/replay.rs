//! Re-deriving recorded decisions from their inputs, with no I/O.
//!
//! The planner is replayed exactly. Every input it applies yields one
//! decision that names the input (`trigger`: topic, partition, offset), and
//! a cluster's decisions are on one partition in the order they were taken.
//! So the recorded decision stream is the planner's input order, and
//! applying each trigger in that order to a fresh planner must give the same
//! decisions and commands, byte for byte. Signatures are not compared (the
//! auditor has no signing key); `key_id` and `signature` are blanked on both
//! sides.
//!
//! The detector is replayed in event-time order. Its failure ids and
//! detection times depend on the order the live consumer happened to read
//! partitions in, which no log records, so failures are compared by what was
//! found: cluster, kind, severity, node, job and first-evidence time.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::detector::{Detector, DetectorInput, DetectorOutput, Observation, Source};
use crate::planner::{Input, Output, Planner};
use crate::records::{Command, Decision, FailureEvent};

/// One decision as recorded, with the input it names and its commands.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedStep {
    /// The trigger record; `None` if it is no longer in the log or archive.
    pub input: Option<Input>,
    pub decision: Decision,
    pub commands: Vec<Command>,
}

/// The first place replay and record disagree, both versions as JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Divergence {
    pub what: String,
    pub id: String,
    pub recorded: serde_json::Value,
    pub replayed: serde_json::Value,
}

/// Outcome of comparing one stream.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Comparison {
    pub compared: u64,
    pub identical: u64,
    pub diverged: u64,
    /// Decisions whose input is gone (retention) and that could not be checked.
    pub missing_inputs: u64,
    pub first_divergence: Option<Divergence>,
}

impl Comparison {
    fn same(&mut self) {
        self.compared += 1;
        self.identical += 1;
    }

    fn differ(&mut self, divergence: impl FnOnce() -> Divergence) {
        self.compared += 1;
        self.diverged += 1;
        if self.first_divergence.is_none() {
            self.first_divergence = Some(divergence());
        }
    }
}

fn unsigned(command: &Command) -> Command {
    Command {
        key_id: String::new(),
        signature: Vec::new(),
        ..command.clone()
    }
}

fn json<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

/// What one planner step produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Replayed {
    pub decision: Option<Decision>,
    pub commands: Vec<Command>,
}

fn split(outputs: Vec<Output>) -> Replayed {
    let mut out = Replayed::default();
    for output in outputs {
        match output {
            Output::Decision(d) => out.decision = Some(d),
            Output::Command(c) => out.commands.push(c),
            Output::Rejected(_) => {}
        }
    }
    out
}

/// Applies every recorded step's input to `planner` in order and compares
/// what it decides with what was recorded. `counted` says which steps'
/// comparisons are reported (a time window); every step is applied, since
/// later decisions depend on the state earlier ones built.
pub fn replay_planner(
    planner: &mut Planner,
    steps: &[RecordedStep],
    counted: impl Fn(&RecordedStep) -> bool,
) -> (Comparison, Vec<Replayed>) {
    let mut comparison = Comparison::default();
    let mut replayed = Vec::with_capacity(steps.len());
    for step in steps {
        let Some(input) = &step.input else {
            if counted(step) {
                comparison.missing_inputs += 1;
            }
            replayed.push(Replayed::default());
            continue;
        };
        let out = split(planner.apply(input));
        if counted(step) {
            compare_step(&mut comparison, step, &out);
        }
        replayed.push(out);
    }
    (comparison, replayed)
}

fn compare_step(comparison: &mut Comparison, step: &RecordedStep, out: &Replayed) {
    let recorded = &step.decision;
    match &out.decision {
        Some(d) if d == recorded => {}
        other => {
            return comparison.differ(|| Divergence {
                what: "decision".into(),
                id: recorded.id.clone(),
                recorded: json(recorded),
                replayed: json(other),
            });
        }
    }
    let want: Vec<Command> = step.commands.iter().map(unsigned).collect();
    let got: Vec<Command> = out.commands.iter().map(unsigned).collect();
    if want == got {
        comparison.same();
    } else {
        let index = want
            .iter()
            .zip(&got)
            .position(|(a, b)| a != b)
            .unwrap_or(want.len().min(got.len()));
        comparison.differ(|| Divergence {
            what: "command".into(),
            id: want
                .get(index)
                .or(got.get(index))
                .map(|c| c.id.clone())
                .unwrap_or_default(),
            recorded: json(&want.get(index)),
            replayed: json(&got.get(index)),
        });
    }
}

/// The recorded decisions in the order they were taken, each with its
/// trigger input (looked up by topic, partition, offset) and its commands.
/// Decisions and commands a planner restart published twice are kept once.
pub fn steps<'a>(
    decisions: impl IntoIterator<Item = &'a Decision>,
    inputs: &BTreeMap<(String, i32, i64), Input>,
    commands: impl IntoIterator<Item = &'a Command>,
    cluster: Option<&str>,
) -> Vec<RecordedStep> {
    let mut by_decision: BTreeMap<&str, Vec<&Command>> = BTreeMap::new();
    let mut seen_commands = BTreeSet::new();
    for c in commands {
        if seen_commands.insert(c.id.as_str()) {
            by_decision
                .entry(c.decision_id.as_str())
                .or_default()
                .push(c);
        }
    }
    let mut seen = BTreeSet::new();
    decisions
        .into_iter()
        .filter(|d| cluster.is_none_or(|c| c == d.cluster))
        .filter(|d| seen.insert(d.id.as_str()))
        .map(|d| {
            let t = &d.trigger;
            RecordedStep {
                input: inputs
                    .get(&(t.topic.clone(), t.partition, t.offset))
                    .cloned(),
                decision: d.clone(),
                commands: by_decision
                    .get(d.id.as_str())
                    .map(|cs| cs.iter().map(|c| (*c).clone()).collect())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// What identifies a failure independently of read order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct FailureKey {
    pub cluster: String,
    pub kind: String,
    pub severity: String,
    pub node: Option<String>,
    pub job: Option<String>,
    pub first_evidence_ms: i64,
}

impl FailureKey {
    pub fn of(f: &FailureEvent) -> FailureKey {
        FailureKey {
            cluster: f.cluster.clone(),
            kind: f.kind.to_string(),
            severity: f.severity.to_string(),
            node: f.node.clone(),
            job: f.job.clone(),
            first_evidence_ms: f.first_evidence_ms,
        }
    }
}

/// One observation and where it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct SourcedObservation {
    pub source: Source,
    pub observation: Observation,
}

impl SourcedObservation {
    /// The event time the detector orders by: the newest time it carries.
    pub fn time_ms(&self) -> i64 {
        self.observation.time_ms()
    }
}

/// Runs `detector` over `observations` in event-time order (ties by topic,
/// partition, offset) and returns every failure it reports.
pub fn detect_in_order(
    detector: &mut Detector,
    mut observations: Vec<SourcedObservation>,
) -> Vec<FailureEvent> {
    observations.sort_by(|a, b| {
        (
            a.time_ms(),
            &a.source.topic,
            a.source.partition,
            a.source.offset,
            a.source.index,
        )
            .cmp(&(
                b.time_ms(),
                &b.source.topic,
                b.source.partition,
                b.source.offset,
                b.source.index,
            ))
    });
    let mut failures = Vec::new();
    for o in observations {
        for output in detector.apply(&DetectorInput {
            source: o.source,
            observation: o.observation,
            caught_up: true,
        }) {
            if let DetectorOutput::Failure(f) = output {
                failures.push(f);
            }
        }
    }
    failures
}

/// Compares recorded and re-derived failures by [`FailureKey`]; each
/// missing or extra key is one divergence.
pub fn compare_failures(
    recorded: &[FailureEvent],
    replayed: &[FailureEvent],
    counted: impl Fn(&FailureEvent) -> bool,
) -> Comparison {
    let mut comparison = Comparison::default();
    let index = |list: &[FailureEvent]| -> BTreeMap<FailureKey, FailureEvent> {
        list.iter()
            .filter(|f| counted(f))
            .map(|f| (FailureKey::of(f), f.clone()))
            .collect()
    };
    let (want, got) = (index(recorded), index(replayed));
    let keys: BTreeSet<&FailureKey> = want.keys().chain(got.keys()).collect();
    for key in keys {
        match (want.get(key), got.get(key)) {
            (Some(_), Some(_)) => comparison.same(),
            (a, b) => comparison.differ(|| Divergence {
                what: "failure".into(),
                id: a.or(b).map(|f| f.id.clone()).unwrap_or_default(),
                recorded: json(&a),
                replayed: json(&b),
            }),
        }
    }
    comparison
}

/// The WAF a decision stream gave a cluster over time: each chosen plan's
/// WAF held until the next decision, up to `until_ms`. Weighted FLOPs.
pub fn accumulated_waf<'a>(
    decisions: impl IntoIterator<Item = &'a Decision>,
    until_ms: i64,
) -> f64 {
    let mut by_cluster: BTreeMap<&str, Vec<(i64, f64)>> = BTreeMap::new();
    for d in decisions {
        let waf = d
            .chosen_index
            .and_then(|i| d.alternatives.get(i as usize))
            .map_or(0.0, |a| a.waf);
        by_cluster
            .entry(&d.cluster)
            .or_default()
            .push((d.time_ms, waf));
    }
    let mut total = 0.0;
    for points in by_cluster.values() {
        for (i, (t, waf)) in points.iter().enumerate() {
            let end = points
                .get(i + 1)
                .map_or(until_ms, |(next, _)| *next)
                .min(until_ms);
            if end > *t {
                total += waf * (end - t) as f64 / 1000.0;
            }
        }
    }
    total
}

/// How a what-if run's commands differ from the recorded ones, by
/// (action, job, nodes) per trigger.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CommandDiff {
    pub added: u64,
    pub removed: u64,
    pub examples: Vec<String>,
}

pub fn diff_commands(steps: &[RecordedStep], what_if: &[Replayed]) -> CommandDiff {
    let describe = |c: &Command| {
        format!(
            "{} {} [{}]",
            c.action.symbol(),
            c.job.as_deref().unwrap_or("-"),
            c.nodes.join(",")
        )
    };
    let mut diff = CommandDiff::default();
    for (step, other) in steps.iter().zip(what_if) {
        let mut recorded: Vec<String> = step.commands.iter().map(describe).collect();
        let mut alternative: Vec<String> = other.commands.iter().map(describe).collect();
        recorded.sort();
        alternative.sort();
        for c in &alternative {
            if let Some(at) = recorded.iter().position(|r| r == c) {
                recorded.remove(at);
            } else {
                diff.added += 1;
                if diff.examples.len() < 5 {
                    diff.examples
                        .push(format!("+ {c} (after {})", step.decision.trigger.ref_id));
                }
            }
        }
        diff.removed += recorded.len() as u64;
        for c in recorded {
            if diff.examples.len() < 5 {
                diff.examples
                    .push(format!("- {c} (after {})", step.decision.trigger.ref_id));
            }
        }
    }
    diff
}

/// What catching up with decisions taken elsewhere did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CatchUp {
    pub applied: u64,
    /// Decisions this planner did not reproduce (another policy or config).
    pub diverged: u64,
    pub first_divergence: Option<String>,
}

/// Brings `planner` to the state of the instance that took `steps`: each
/// recorded decision's input, applied in decision order, exactly as replay
/// does. A planner that takes over a partition uses it, so its state is the
/// previous owner's and not whatever its own read order would build.
pub fn catch_up(planner: &mut Planner, steps: &[(Input, Decision)]) -> CatchUp {
    let mut out = CatchUp::default();
    for (input, recorded) in steps {
        let replayed = split(planner.apply(input)).decision;
        out.applied += 1;
        if replayed.as_ref() != Some(recorded) {
            out.diverged += 1;
            if out.first_divergence.is_none() {
                out.first_divergence = Some(recorded.id.clone());
            }
        }
    }
    out
}

/// What replaying the detector's rounds found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoundReplay {
    /// One per round compared: the failures it emitted, by id, in order,
    /// and each recorded failure event against the one replay derived.
    pub comparison: Comparison,
    /// Every failure replay derived.
    pub failures: Vec<FailureEvent>,
    /// Detector instances whose rounds name a record no longer in the log
    /// or archive (or a round that is gone): from there on not compared.
    pub incomplete_instances: u64,
}

/// Replays `rounds` (in log order) against the input `records` by
/// (topic, partition, offset): each detector instance from a fresh
/// `detector()`, its rounds in sequence, through
/// [`Detector::apply_round`], exactly as the live service applied them.
/// Compares each round's failure ids with those it recorded and each
/// `recorded` failure event with the one derived; `counted` selects the
/// failures (a window) whose comparison is reported.
pub fn replay_rounds(
    rounds: &[crate::records::DetectorRound],
    records: &BTreeMap<(String, i32, i64), Vec<SourcedObservation>>,
    recorded: &[FailureEvent],
    detector: impl Fn() -> Detector,
    counted: impl Fn(&FailureEvent) -> bool,
) -> RoundReplay {
    let mut out = RoundReplay::default();
    let mut instances: BTreeMap<&str, Vec<&crate::records::DetectorRound>> = BTreeMap::new();
    for r in rounds {
        instances.entry(r.detector.as_str()).or_default().push(r);
    }
    let recorded_by_id: BTreeMap<&str, Vec<&FailureEvent>> =
        recorded.iter().fold(BTreeMap::new(), |mut m, f| {
            m.entry(f.id.as_str()).or_default().push(f);
            m
        });
    let mut named: BTreeSet<&str> = BTreeSet::new();
    for (_, mut list) in instances {
        list.sort_by_key(|r| r.seq);
        list.dedup_by_key(|r| r.seq);
        let mut d = detector();
        let first_seq = list.first().map_or(0, |r| r.seq);
        for (expected_seq, round) in (first_seq..).zip(list) {
            let Some(inputs) = round_inputs(round, records).filter(|_| round.seq == expected_seq)
            else {
                out.incomplete_instances += 1;
                break;
            };
            let derived: Vec<FailureEvent> = d
                .apply_round(round, inputs)
                .into_iter()
                .filter_map(|o| match o.output {
                    DetectorOutput::Failure(f) => Some(f),
                    DetectorOutput::Rejected(_) => None,
                })
                .collect();
            named.extend(round.failures.iter().map(String::as_str));
            let in_window = |id: &str| {
                derived
                    .iter()
                    .find(|f| f.id == id)
                    .or_else(|| recorded_by_id.get(id).and_then(|l| l.first().copied()))
                    .is_none_or(&counted)
            };
            let want: Vec<&str> = round
                .failures
                .iter()
                .map(String::as_str)
                .filter(|id| in_window(id))
                .collect();
            let got: Vec<&str> = derived
                .iter()
                .map(|f| f.id.as_str())
                .filter(|id| in_window(id))
                .collect();
            if !(want.is_empty() && got.is_empty()) {
                if want == got {
                    out.comparison.same();
                } else {
                    out.comparison.differ(|| Divergence {
                        what: "round".into(),
                        id: format!("{}#{}", round.detector, round.seq),
                        recorded: json(&want),
                        replayed: json(&got),
                    });
                }
            }
            // The event as published (a crash may have kept it from the
            // log; the round still names it).
            for f in derived.iter().filter(|f| counted(f)) {
                if let Some(copies) = recorded_by_id.get(f.id.as_str())
                    && !copies.contains(&f)
                {
                    out.comparison.differ(|| Divergence {
                        what: "failure".into(),
                        id: f.id.clone(),
                        recorded: json(copies[0]),
                        replayed: json(f),
                    });
                }
            }
            out.failures.extend(derived);
        }
    }
    // A failure event no round names came from no detector's rounds.
    if !rounds.is_empty() {
        for f in recorded.iter().filter(|f| counted(f)) {
            if !named.contains(f.id.as_str()) && out.incomplete_instances == 0 {
                out.comparison.differ(|| Divergence {
                    what: "failure".into(),
                    id: f.id.clone(),
                    recorded: json(f),
                    replayed: serde_json::Value::Null,
                });
            }
        }
    }
    out
}

/// The observations of every record `round` names, or `None` if one is
/// missing from `records`.
fn round_inputs(
    round: &crate::records::DetectorRound,
    records: &BTreeMap<(String, i32, i64), Vec<SourcedObservation>>,
) -> Option<Vec<DetectorInput>> {
    let mut inputs = Vec::new();
    for range in &round.ranges {
        for offset in range.first_offset..=range.last_offset {
            let observations = records.get(&(range.topic.clone(), range.partition, offset))?;
            inputs.extend(observations.iter().map(|o| DetectorInput {
                source: o.source.clone(),
                observation: o.observation.clone(),
                caught_up: false,
            }));
        }
    }
    Some(inputs)
}

/// Observations by the record they came from, for [`replay_rounds`].
pub fn by_record(
    observations: &[SourcedObservation],
) -> BTreeMap<(String, i32, i64), Vec<SourcedObservation>> {
    let mut out: BTreeMap<(String, i32, i64), Vec<SourcedObservation>> = BTreeMap::new();
    for o in observations {
        out.entry((o.source.topic.clone(), o.source.partition, o.source.offset))
            .or_default()
            .push(o.clone());
    }
    out
}
