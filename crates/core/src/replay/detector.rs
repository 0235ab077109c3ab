//! Replaying the detector: failures re-derived from observations, in
//! event-time order or in the rounds the live instances recorded.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::{Comparison, Divergence, json};
use crate::detector::{Detector, DetectorInput, DetectorOutput, Observation, SourceRecord};
use crate::records::{DetectorRound, FailureEvent};

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
    pub source: SourceRecord,
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
    rounds: &[DetectorRound],
    records: &BTreeMap<(String, i32, i64), Vec<SourcedObservation>>,
    recorded: &[FailureEvent],
    detector: impl Fn() -> Detector,
    counted: impl Fn(&FailureEvent) -> bool,
) -> RoundReplay {
    let mut out = RoundReplay::default();
    let mut instances: BTreeMap<&str, Vec<&DetectorRound>> = BTreeMap::new();
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
        let mut rules_told = false;
        for (expected_seq, round) in (first_seq..).zip(list) {
            let Some(inputs) = round_inputs(round, records).filter(|_| round.seq == expected_seq)
            else {
                out.incomplete_instances += 1;
                break;
            };
            let outputs = d.apply_round(round, inputs);
            let _ = d.take_unclassified(); // derived, as the live service does
            let derived: Vec<FailureEvent> = outputs
                .into_iter()
                .filter_map(|o| match o.output {
                    DetectorOutput::Failure(f) => Some(f),
                    DetectorOutput::Rejected(_) => None,
                })
                .collect();
            // Rules other than the live detector's (another binary, or a
            // rules file no round carried): said once per instance.
            let version = d.rules().version();
            if !rules_told && !round.rules_version.is_empty() && round.rules_version != version {
                rules_told = true;
                out.comparison.differ(|| Divergence {
                    what: "rules".into(),
                    id: format!("{}#{}", round.detector, round.seq),
                    recorded: serde_json::Value::String(round.rules_version.clone()),
                    replayed: serde_json::Value::String(version.to_string()),
                });
            }
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
    round: &DetectorRound,
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
