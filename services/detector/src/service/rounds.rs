//! Rounds: what a batch of records becomes (the round record, then its
//! failures and dead letters), and the warm-up round a takeover starts with.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use unicron_codec::InboundRecord;
use unicron_core::detector::{DetectorInput, DetectorOutput, Observation, SourceRecord};
use unicron_core::{DetectorRound, FailureEvent, PartitionRef, RoundRange, RoundTick};
use unicron_runtime::{BatchEnd, Outgoing, Processor as _};

use super::DetectorProcessor;
use crate::error::DetectorError;
use crate::metrics::{DETECTION_LATENCY, FAILURES, ROUNDS, WARM_UP_RECORDS};

/// What the next round applies.
#[derive(Default)]
pub(super) struct PendingRound {
    /// This instance's name and the next round's number.
    pub(super) detector: String,
    pub(super) seq: i64,
    pub(super) reset: bool,
    pub(super) caught_up: Vec<PartitionRef>,
    pub(super) behind: Vec<PartitionRef>,
    pub(super) ticks: Vec<RoundTick>,
    pub(super) inputs: Vec<DetectorInput>,
    /// The records the inputs came from, for ranges and dead letters.
    pub(super) records: Vec<InboundRecord>,
    /// A warm-up read after a takeover, applied as a round of its own
    /// before the inputs: its inputs and the records they came from.
    pub(super) warm: Option<(Vec<DetectorInput>, Vec<InboundRecord>)>,
    /// Rules text the next round carries: the instance's first, and a
    /// changed `detector.rules_file` that compiled.
    pub(super) rules: Option<String>,
    /// When the round's first record was read (operational: idle ticks).
    pub(super) heard_at: Option<std::time::Instant>,
}

impl DetectorProcessor {
    /// Applies a pending warm-up as a round of its own: state only, timers
    /// held (a deadline that passed in it fires in the live rounds after,
    /// as a repeat the planner drops if the previous owner had called it).
    pub(super) fn run_warm_up(&mut self) -> Result<Option<Outgoing>, DetectorError> {
        let Some((inputs, records)) = self.round.warm.take() else {
            return Ok(None);
        };
        let pending = &mut self.round;
        let mut round = DetectorRound {
            detector: pending.detector.clone(),
            seq: pending.seq,
            reset: std::mem::take(&mut pending.reset),
            silence_held: true,
            ranges: ranges(&records),
            warm: true,
            read_ms: wall_ms(),
            rules: pending.rules.take(),
            ..DetectorRound::default()
        };
        pending.seq += 1;
        self.detector.hold_silence_timers(true);
        let outputs = self.detector.apply_round(&round, inputs);
        round.rules_version = self.detector.rules().version().to_string();
        // Old lines read again: surfaced when they were first read.
        let _ = self.detector.take_unclassified();
        debug_assert!(outputs.is_empty(), "a warm-up round publishes nothing");
        self.detector
            .hold_silence_timers(self.outage.held() || self.guard.held());
        ::metrics::counter!(ROUNDS.name).increment(1);
        Ok(Some(Outgoing::record(
            &self.topics,
            None,
            round.detector.clone(),
            &round,
        )?))
    }

    /// Applies the pending round: the round record, then its failures.
    pub(super) fn run_round(&mut self) -> Result<BatchEnd, DetectorError> {
        let mut end = BatchEnd::default();
        if let Some(warm) = self.run_warm_up()? {
            end.groups.push(vec![warm]);
        }
        let pending = &mut self.round;
        pending.heard_at = None;
        if pending.inputs.is_empty()
            && pending.ticks.is_empty()
            && pending.caught_up.is_empty()
            && pending.behind.is_empty()
            && !pending.reset
        {
            return Ok(end);
        }
        let mut round = DetectorRound {
            detector: pending.detector.clone(),
            seq: pending.seq,
            reset: std::mem::take(&mut pending.reset),
            silence_held: self.outage.held() || self.guard.held(),
            caught_up: std::mem::take(&mut pending.caught_up),
            ranges: ranges(&pending.records),
            ticks: std::mem::take(&mut pending.ticks),
            failures: Vec::new(),
            behind: std::mem::take(&mut pending.behind),
            warm: false,
            read_ms: wall_ms(),
            rules: pending.rules.take(),
            rules_version: String::new(),
            unclassified: Vec::new(),
        };
        pending.seq += 1;
        let records = std::mem::take(&mut pending.records);
        let inputs = std::mem::take(&mut pending.inputs);
        let outputs = self.detector.apply_round(&round, inputs);
        round.rules_version = self.detector.rules().version().to_string();
        round.unclassified = self.detector.take_unclassified();
        let mut failures = Vec::new();
        let mut rejected: BTreeMap<(String, i32, i64), Vec<String>> = BTreeMap::new();
        for out in outputs {
            match out.output {
                DetectorOutput::Failure(f) => failures.push(f),
                DetectorOutput::Rejected(reason) => {
                    if let Some(s) = out.source {
                        rejected
                            .entry((s.topic, s.partition, s.offset))
                            .or_default()
                            .push(reason);
                    }
                }
            }
        }
        round.failures = failures.iter().map(|f| f.id.clone()).collect();
        ::metrics::counter!(ROUNDS.name).increment(1);
        end.groups.push(vec![Outgoing::record(
            &self.topics,
            None,
            round.detector.clone(),
            &round,
        )?]);
        let mut published = Vec::new();
        for failure in &failures {
            published.push(Outgoing::record(
                &self.topics,
                None,
                failure.cluster.clone(),
                failure,
            )?);
            record_failure(failure, records.iter().find(|r| is_source(r, failure)));
        }
        if !published.is_empty() {
            end.groups.push(published);
        }
        for record in records {
            if let Some(reasons) =
                rejected.remove(&(record.topic.clone(), record.partition, record.offset))
            {
                let reason = match reasons.len() {
                    1 => reasons[0].clone(),
                    n => format!("{} (and {} more)", reasons[0], n - 1),
                };
                end.dead_letters.push((record, reason));
            }
        }
        Ok(end)
    }

    /// The observations of a warm-up read, and the records that had any;
    /// records that do not decode were dead-lettered by their first reader.
    pub(super) fn warm_inputs(
        &self,
        records: Vec<InboundRecord>,
    ) -> (Vec<DetectorInput>, Vec<InboundRecord>) {
        let mut inputs = Vec::new();
        let mut kept = Vec::new();
        for record in records {
            let Ok(decoded) = self.decode(&record) else {
                continue;
            };
            if decoded.observations.is_empty() {
                continue;
            }
            inputs.extend(inputs_of(&record, decoded.observations, false));
            kept.push(record);
        }
        tracing::info!(
            records = kept.len(),
            inputs = inputs.len(),
            "warm-up read: state rebuilt from records below the committed offsets"
        );
        ::metrics::counter!(WARM_UP_RECORDS.name).increment(kept.len() as u64);
        (inputs, kept)
    }
}

/// The detector's inputs of one record's observations.
pub(super) fn inputs_of(
    record: &InboundRecord,
    observations: Vec<Observation>,
    caught_up: bool,
) -> impl Iterator<Item = DetectorInput> + '_ {
    observations
        .into_iter()
        .enumerate()
        .map(move |(index, observation)| DetectorInput {
            source: SourceRecord {
                topic: record.topic.clone(),
                partition: record.partition,
                offset: record.offset,
                index: index as u32,
            },
            observation,
            caught_up,
        })
}

/// Whether `record` is the one the failure's first evidence points at.
fn is_source(record: &InboundRecord, failure: &FailureEvent) -> bool {
    failure.evidence.first().is_some_and(|e| {
        e.topic == record.topic && e.partition == record.partition && e.offset == record.offset
    })
}

/// Runs of consecutive offsets per partition among `records`.
fn ranges(records: &[InboundRecord]) -> Vec<RoundRange> {
    let mut sorted: Vec<&InboundRecord> = records.iter().collect();
    sorted
        .sort_by(|a, b| (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset)));
    sorted.dedup_by(|a, b| (&a.topic, a.partition, a.offset) == (&b.topic, b.partition, b.offset));
    let mut out: Vec<RoundRange> = Vec::new();
    for r in sorted {
        match out.last_mut() {
            Some(run)
                if run.topic == r.topic
                    && run.partition == r.partition
                    && run.last_offset + 1 == r.offset =>
            {
                run.last_offset = r.offset;
                run.last_caught_up = r.caught_up;
            }
            _ => out.push(RoundRange {
                topic: r.topic.clone(),
                partition: r.partition,
                first_offset: r.offset,
                last_offset: r.offset,
                last_caught_up: r.caught_up,
            }),
        }
    }
    out
}

/// Logs and counts a published failure; `record` is what triggered it
/// (an idle tick, with no Kafka timestamp, for timers).
fn record_failure(failure: &FailureEvent, record: Option<&InboundRecord>) {
    tracing::info!(
        id = %failure.id,
        kind = %failure.kind,
        severity = %failure.severity,
        node = ?failure.node,
        job = ?failure.job,
        "failure detected"
    );
    ::metrics::counter!(
        FAILURES.name,
        "kind" => failure.kind.symbol(),
        "severity" => failure.severity.symbol()
    )
    .increment(1);
    // Wall-clock age of the triggering record: operational only, never an
    // input to a decision.
    if let (Some(produced), Ok(now)) = (
        record.and_then(|r| r.timestamp_ms),
        SystemTime::now().duration_since(UNIX_EPOCH),
    ) {
        let age = (now.as_millis() as i64 - produced).max(0) as f64 / 1000.0;
        ::metrics::histogram!(DETECTION_LATENCY.name).record(age);
    }
}

/// The round's read time: the service's wall clock, recorded in the round
/// so that replay settles symptom groups exactly as the live run did.
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offsets of one partition make one range per run; the last record's
    /// caught-up flag is the run's.
    #[test]
    fn ranges_are_runs_of_consecutive_offsets() {
        let record = |topic: &str, partition, offset, caught_up| InboundRecord {
            topic: topic.into(),
            partition,
            offset,
            key: None,
            payload: Vec::new(),
            timestamp_ms: None,
            caught_up,
        };
        let got = ranges(&[
            record("t", 0, 5, false),
            record("u", 1, 9, true),
            record("t", 0, 3, false),
            record("t", 0, 4, true),
            record("t", 0, 4, true),
        ]);
        let brief: Vec<_> = got
            .iter()
            .map(|r| {
                (
                    r.topic.as_str(),
                    r.partition,
                    r.first_offset,
                    r.last_offset,
                    r.last_caught_up,
                )
            })
            .collect();
        assert_eq!(brief, vec![("t", 0, 3, 5, false), ("u", 1, 9, 9, true)]);
    }
}
