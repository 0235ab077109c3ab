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

mod catch_up;
mod detector;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

pub use catch_up::{CatchUp, catch_up};
pub use detector::{
    FailureKey, RoundReplay, SourcedObservation, by_record, compare_failures, detect_in_order,
    replay_rounds,
};

use crate::planner::{Input, Output, Planner};
use crate::records::{Command, Decision};

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
        // Equal but for the policy version is the same decision: the
        // version names the logic, and the same output for this input shows
        // a later version did not change it (the report notes the versions).
        Some(d) if d == recorded || same_but_version(d, recorded) => {}
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

fn same_but_version(replayed: &Decision, recorded: &Decision) -> bool {
    replayed.policy_version != recorded.policy_version
        && Decision {
            policy_version: recorded.policy_version.clone(),
            ..replayed.clone()
        } == *recorded
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
