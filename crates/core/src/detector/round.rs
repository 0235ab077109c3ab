//! Rounds: how the detector applies what it has read so that replay gets
//! the same failures whatever order the live consumer read partitions in.
//!
//! The live service gathers the records it reads into rounds (one per
//! batch the consumer had ready), writes a [`DetectorRound`] naming them,
//! and applies them with [`Detector::apply_round`]; replay calls the same
//! function with the same records, read back from the log by the ranges.
//! Within a round records are applied in one canonical order (event time,
//! then topic, partition, offset), so the arrival order inside a round never
//! matters, and everything else that moves a timer (idle ticks, timer holds,
//! partitions found read to their end, a reset) is in the round too.

use std::collections::BTreeMap;

use crate::records::{AgentEvent, DetectorRound};

use super::{Detector, DetectorInput, DetectorOutput, SourceRecord};

/// The node idle ticks carry: they come from the detector, not a node.
pub const IDLE_TICK_NODE: &str = "unicron-detector";

/// One output of a round and the input it came from (`None`: an idle tick).
#[derive(Debug, Clone, PartialEq)]
pub struct RoundOutput {
    pub source: Option<SourceRecord>,
    pub output: DetectorOutput,
}

impl Detector {
    /// Applies one round. `inputs` are the observations of exactly the
    /// records `round.ranges` names, in any order. In order: a reset if the
    /// round says so, the rules it carries, the timer hold and read time, the partitions found caught up and
    /// those found behind, the inputs in canonical order (a record counts
    /// as caught up only if it is the last of its partition in the round
    /// and was read as the newest), then the idle ticks. A warm-up round
    /// builds state only: it returns nothing.
    pub fn apply_round(
        &mut self,
        round: &DetectorRound,
        mut inputs: Vec<DetectorInput>,
    ) -> Vec<RoundOutput> {
        if round.reset {
            self.reset();
        }
        if let Some(text) = &round.rules {
            // Validated before the live service recorded them; a file that
            // no longer compiles (another binary) keeps the rules in use,
            // and replay reports the version that differs.
            if let Ok(rules) = super::LogRules::with_user(text) {
                self.rules = rules;
            }
        }
        self.hold_silence_timers(round.silence_held);
        self.read_ms = self.read_ms.max(round.read_ms);
        for p in &round.caught_up {
            self.mark_caught_up(&p.topic, p.partition);
        }
        for p in &round.behind {
            self.mark_behind(&p.topic, p.partition);
        }
        let mut last: BTreeMap<(&str, i32), (i64, bool)> = BTreeMap::new();
        for r in &round.ranges {
            let entry = last
                .entry((r.topic.as_str(), r.partition))
                .or_insert((r.last_offset, r.last_caught_up));
            if r.last_offset >= entry.0 {
                *entry = (r.last_offset, r.last_caught_up);
            }
        }
        for input in &mut inputs {
            let s = &input.source;
            input.caught_up = last.get(&(s.topic.as_str(), s.partition)) == Some(&(s.offset, true));
        }
        // Keys are unique (a record's position and index): unstable is exact.
        inputs.sort_unstable_by(|a, b| canonical(a).cmp(&canonical(b)));
        let mut out = Vec::new();
        for input in &inputs {
            for output in self.apply(input) {
                out.push(RoundOutput {
                    source: Some(input.source.clone()),
                    output,
                });
            }
        }
        for (index, tick) in round.ticks.iter().enumerate() {
            let input = DetectorInput {
                source: SourceRecord {
                    topic: String::new(),
                    partition: -1,
                    offset: round.seq,
                    index: index as u32,
                },
                observation: super::Observation::Agent(AgentEvent::idle(
                    &tick.cluster,
                    IDLE_TICK_NODE,
                    tick.time_ms,
                )),
                caught_up: true,
            };
            out.extend(self.apply(&input).into_iter().map(|output| RoundOutput {
                source: None,
                output,
            }));
        }
        if round.warm {
            out.clear();
        }
        out
    }
}

impl Detector {
    /// The error-marked log lines no rule took since the last call, by
    /// cluster and template, the most frequent [`ROUND_UNCLASSIFIED`] of
    /// them (a round record stays small whatever floods): the service
    /// puts them in the round it records (replay calls it too, so its
    /// state matches).
    pub fn take_unclassified(&mut self) -> Vec<crate::records::UnclassifiedTemplate> {
        let mut out = Vec::new();
        for (cluster, view) in &mut self.clusters {
            out.extend(
                view.unclassified
                    .0
                    .drain()
                    .iter()
                    .map(|t| t.to_record(cluster)),
            );
        }
        out.sort_by(|a, b| {
            (b.count, &a.cluster, &a.template).cmp(&(a.count, &b.cluster, &b.template))
        });
        out.truncate(ROUND_UNCLASSIFIED);
        out
    }
}

/// Unclassified-error templates one round records at most, all clusters.
pub const ROUND_UNCLASSIFIED: usize = 64;

/// The order inputs of one round are applied in.
fn canonical(input: &DetectorInput) -> (i64, &str, i32, i64, u32) {
    let s = &input.source;
    (
        input.observation.time_ms(),
        s.topic.as_str(),
        s.partition,
        s.offset,
        s.index,
    )
}
