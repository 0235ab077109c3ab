//! The detector's step: telemetry, logs, agent events and external
//! records in; failures out. Its state is soft (rebuilt from the stream),
//! so it runs without a store, at least once; failure ids are derived from
//! what was found, so a repeat is dropped downstream.
//!
//! Records are applied in rounds (`unicron_core::detector::round`): each
//! batch the consumer had ready, plus the idle ticks and timer holds of the
//! moment, becomes one round record on the rounds topic, written before the
//! failures it names; replay applies the same rounds to the same records.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use unicron_codec::formats::{self, ExternalInput};
use unicron_codec::{
    AvroCodec, DecodeError, InboundRecord, KafkaConfig, Subscription, Topic, Topics,
};
use unicron_core::AgentEvent;
use unicron_core::detector::{Detector, DetectorInput, DetectorOutput, Observation, SourceRecord};
use unicron_core::{
    DetectorRound, FailureEvent, LogRecord, PartitionRef, RoundRange, RoundTick, TelemetryBatch,
};
use unicron_runtime::{
    Applied, BatchEnd, BusStatus, Durability, Never, Outgoing, Processor, Reading, RuntimeOptions,
    Step,
};

use crate::discovery::with_topic_discovery;
use crate::error::DetectorError;
use crate::holds::{IdleTicks, LagGuard, OutageHold};
use crate::metrics::{
    DETECTION_LATENCY, FAILURES, IDLE_TICKS, LAG_GUARD, METRICS, ROUND_SECONDS, ROUNDS,
    TIMERS_HELD, WARM_UP_RECORDS,
};
use crate::settings::{DetectorService, DetectorSettings};
use crate::warm_up::WarmUpSource;

/// The detector's name in readiness, logs and `unicron_bus::metrics::joined`.
pub const SERVICE: &str = "detector";

/// How each subscribed topic is decoded.
enum TopicDecoder {
    Telemetry(AvroCodec<TelemetryBatch>),
    Logs(AvroCodec<LogRecord>),
    Agent(AvroCodec<AgentEvent>),
    External(ExternalInput),
}

impl TopicDecoder {
    /// Observations of one record, plus problems with parts of it.
    fn decode(&self, payload: &[u8]) -> Result<formats::Decoded, DecodeError> {
        let one = |observation| formats::Decoded {
            observations: vec![observation],
            problems: Vec::new(),
        };
        Ok(match self {
            TopicDecoder::Telemetry(c) => one(Observation::Telemetry(c.decode(payload)?)),
            TopicDecoder::Logs(c) => one(Observation::Log(c.decode(payload)?)),
            TopicDecoder::Agent(c) => one(Observation::Agent(c.decode(payload)?)),
            TopicDecoder::External(input) => formats::decode(input, payload),
        })
    }
}

/// Runs the detector (built by [`DetectorSettings::build`]) until
/// `shutdown` completes or an unrecoverable error.
pub async fn run(
    kafka: &KafkaConfig,
    brokers: &str,
    detector: DetectorService,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DetectorError> {
    let DetectorService { settings, rules } = detector;
    let settings = &settings;
    let topics = Topics::new(kafka);
    let mut decoders: BTreeMap<String, TopicDecoder> = BTreeMap::new();
    decoders.insert(
        topics.name(Topic::Telemetry).to_string(),
        TopicDecoder::Telemetry(AvroCodec::default()),
    );
    decoders.insert(
        topics.name(Topic::Logs).to_string(),
        TopicDecoder::Logs(AvroCodec::default()),
    );
    decoders.insert(
        topics.name(Topic::Agent).to_string(),
        TopicDecoder::Agent(AvroCodec::default()),
    );
    let mut subscriptions: Vec<Subscription> = [Topic::Agent, Topic::Logs, Topic::Telemetry]
        .into_iter()
        .map(Subscription::Topic)
        .collect();
    for input in &settings.inputs {
        subscriptions.push(Subscription::External {
            name: input.topic.clone(),
            optional: input.optional,
        });
        decoders.insert(input.topic.clone(), TopicDecoder::External(input.clone()));
    }
    let mut options = RuntimeOptions::new(
        SERVICE,
        &settings.group_id,
        subscriptions,
        Durability::AtLeastOnce,
    );
    options.max_batch = settings.round_max_records;
    tracing::info!(group = %settings.group_id, topics = ?options.subscriptions, rules = rules.len(), "detector starting");
    let mut processor = DetectorProcessor::new(
        Detector::new(settings.tuning.clone(), rules),
        decoders,
        &topics,
        settings,
        instance_name(&settings.group_id),
    );
    if settings.warm_up_s > 0.0 {
        processor.warm_up = Some(WarmUpSource {
            kafka: kafka.clone(),
            brokers: brokers.to_string(),
            group: settings.group_id.clone(),
            window: Duration::from_secs_f64(settings.warm_up_s),
            max_records: settings.warm_up_max_records as i64,
        });
    }
    let kafka = with_topic_discovery(kafka, settings.new_topic_check_s);
    unicron_runtime::run(&kafka, brokers, &options, &mut processor, shutdown).await
}

struct DetectorProcessor {
    detector: Detector,
    decoders: BTreeMap<String, TopicDecoder>,
    /// Where rounds and failures go (by record type).
    topics: Topics,
    outage: OutageHold,
    guard: LagGuard,
    idle: IdleTicks,
    /// The partitions the detector's state was built from.
    assigned: Vec<(String, i32)>,
    round: PendingRound,
    /// Where a takeover's warm-up reads (`None`: no warm-up).
    warm_up: Option<WarmUpSource>,
    /// The co-partitioned inputs' full names: agent, logs, telemetry.
    inputs: [String; 3],
    /// Where the last warm-up's read of each partition ended: a partition
    /// known only from it is read to its end while its high watermark is
    /// still there.
    warm_ends: BTreeMap<(String, i32), i64>,
}

/// What the next round applies.
#[derive(Default)]
struct PendingRound {
    /// This instance's name and the next round's number.
    detector: String,
    seq: i64,
    reset: bool,
    caught_up: Vec<PartitionRef>,
    behind: Vec<PartitionRef>,
    ticks: Vec<RoundTick>,
    inputs: Vec<DetectorInput>,
    /// The records the inputs came from, for ranges and dead letters.
    records: Vec<InboundRecord>,
    /// A warm-up read after a takeover, applied as a round of its own
    /// before the inputs: its inputs and the records they came from.
    warm: Option<(Vec<DetectorInput>, Vec<InboundRecord>)>,
}

impl DetectorProcessor {
    fn new(
        detector: Detector,
        decoders: BTreeMap<String, TopicDecoder>,
        topics: &Topics,
        settings: &DetectorSettings,
        instance: String,
    ) -> DetectorProcessor {
        DetectorProcessor {
            detector,
            decoders,
            topics: topics.clone(),
            // Lost connections are counted from the runtime's start.
            outage: OutageHold::new(Duration::from_secs_f64(settings.outage_grace_s), 0),
            guard: LagGuard::new(settings.lag_guard_records, settings.lag_guard_s),
            idle: IdleTicks::new(Duration::from_secs_f64(settings.idle_tick_s)),
            assigned: Vec::new(),
            round: PendingRound {
                detector: instance,
                ..PendingRound::default()
            },
            warm_up: None,
            inputs: [Topic::Agent, Topic::Logs, Topic::Telemetry]
                .map(|t| topics.name(t).to_string()),
            warm_ends: BTreeMap::new(),
        }
    }

    /// Applies a pending warm-up as a round of its own: state only, timers
    /// held (a deadline that passed in it fires in the live rounds after,
    /// as a repeat the planner drops if the previous owner had called it).
    fn run_warm_up(&mut self) -> Result<Option<Outgoing>, DetectorError> {
        let Some((inputs, records)) = self.round.warm.take() else {
            return Ok(None);
        };
        let pending = &mut self.round;
        let round = DetectorRound {
            detector: pending.detector.clone(),
            seq: pending.seq,
            reset: std::mem::take(&mut pending.reset),
            silence_held: true,
            ranges: ranges(&records),
            warm: true,
            ..DetectorRound::default()
        };
        pending.seq += 1;
        self.detector.hold_silence_timers(true);
        let outputs = self.detector.apply_round(&round, inputs);
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
    fn run_round(&mut self) -> Result<BatchEnd, DetectorError> {
        let mut end = BatchEnd::default();
        if let Some(warm) = self.run_warm_up()? {
            end.groups.push(vec![warm]);
        }
        let pending = &mut self.round;
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
        };
        pending.seq += 1;
        let records = std::mem::take(&mut pending.records);
        let inputs = std::mem::take(&mut pending.inputs);
        let outputs = self.detector.apply_round(&round, inputs);
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
}

/// Why `assigned` may split a node's records between instances: the
/// co-partitioned inputs (telemetry, logs, agent) held at different
/// partition numbers. `None` when they line up.
fn split_inputs(inputs: &[String; 3], assigned: &[(String, i32)]) -> Option<String> {
    let held = |topic: &String| -> Vec<i32> {
        assigned
            .iter()
            .filter(|(t, _)| t == topic)
            .map(|(_, p)| *p)
            .collect()
    };
    let first = held(&inputs[0]);
    inputs[1..].iter().find(|t| held(t) != first).map(|t| {
        format!(
            "this detector holds partitions {first:?} of {} but {:?} of {t}: a node's records may \
             reach two instances (give the inputs one partition count, and keep \
             kafka.partition.assignment.strategy `range`)",
            inputs[0],
            held(t)
        )
    })
}

/// The detector's inputs of one record's observations.
fn inputs_of(
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

/// A name no other run of a detector shares: its rounds are its own.
fn instance_name(group: &str) -> String {
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{group}-{}-{started}", std::process::id())
}

impl Processor for DetectorProcessor {
    type Input = formats::Decoded;
    type Action = Never;
    type Error = DetectorError;

    fn decode(&self, record: &InboundRecord) -> Result<formats::Decoded, DecodeError> {
        match self.decoders.get(&record.topic) {
            Some(decoder) => decoder.decode(&record.payload),
            None => Err(DecodeError::Invalid {
                record: "record",
                reason: format!("no decoder for topic {}", record.topic),
            }),
        }
    }

    /// Queues the record's observations for the round that ends this
    /// batch; problems with parts of it are dead-lettered now.
    fn apply(
        &mut self,
        decoded: formats::Decoded,
        step: &mut Step<'_>,
    ) -> Result<Applied<Never>, DetectorError> {
        let record = step.record();
        tracing::debug!(
            topic = %record.topic,
            offset = record.offset,
            observations = decoded.observations.len(),
            problems = ?decoded.problems,
            "decoded"
        );
        let now = Instant::now();
        for observation in &decoded.observations {
            self.idle.heard_from(observation.cluster(), now);
        }
        if !decoded.observations.is_empty() {
            self.round.records.push(record.clone());
        }
        self.round
            .inputs
            .extend(inputs_of(record, decoded.observations, record.caught_up));
        for problem in decoded.problems {
            step.dead_letter(problem);
        }
        Ok(Applied::Done)
    }

    fn end_batch(&mut self) -> Result<BatchEnd, DetectorError> {
        let started = Instant::now();
        let end = self.run_round()?;
        ::metrics::histogram!(ROUND_SECONDS.name).record(started.elapsed().as_secs_f64());
        Ok(end)
    }

    fn describe_metrics(&self) {
        describe_metrics();
    }

    /// Partitions moved: state about nodes read elsewhere now is stale.
    /// A rebalance that keeps every partition this instance had (a
    /// coordinator that moved with a broker restart, a member that joined
    /// and left, a newly created input topic joining) keeps it: its held
    /// symptoms and timers came from records whose offsets are committed
    /// already, and forgetting them would lose failures.
    async fn reassigned(&mut self, assigned: &[(String, i32)]) -> Result<(), DetectorError> {
        if assigned.is_empty() {
            return Ok(());
        }
        if self.assigned.iter().all(|p| assigned.contains(p)) && !self.assigned.is_empty() {
            if assigned.len() > self.assigned.len() {
                tracing::info!(
                    partitions = assigned.len(),
                    "assignment grew: detector state kept"
                );
                self.assigned = assigned.to_vec();
            }
            return Ok(());
        }
        tracing::info!(
            partitions = assigned.len(),
            "assignment changed: detector state reset"
        );
        if let Some(why) = split_inputs(&self.inputs, assigned) {
            tracing::warn!("{why}");
        }
        self.detector.reset();
        self.round.reset = true;
        self.assigned = assigned.to_vec();
        self.round.warm = None;
        self.warm_ends.clear();
        if let Some(source) = &self.warm_up {
            match source.read(assigned).await {
                Ok(warm) if warm.records.is_empty() => {}
                Ok(warm) => {
                    self.round.warm = Some(self.warm_inputs(warm.records));
                    self.warm_ends = warm.ends;
                }
                Err(error) => tracing::warn!(
                    %error,
                    "warm-up not read: nodes silent since before the takeover go unnoticed"
                ),
            }
        }
        Ok(())
    }

    fn observe(&mut self, status: BusStatus) {
        self.outage.update(status.connection_losses, status.now);
        self.publish_hold();
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(self.idle.check_every())
    }

    /// Notes partitions found read to their end and those found behind
    /// again (records arrived that the consumer has not read), updates the
    /// lag guard and queues idle ticks: all go into the round the runtime
    /// ends next.
    fn tick(&mut self, reading: &Reading<'_>) -> Result<(), DetectorError> {
        for (topic, partition) in self.detector.behind_partitions() {
            let read_live = reading
                .partitions()
                .any(|(t, p)| t == topic && p == partition);
            let warm_end = self.warm_ends.get(&(topic.clone(), partition)).copied();
            if reading.caught_up(&topic, partition)
                || (!read_live
                    && warm_end.is_some()
                    && reading.high_watermark(&topic, partition) == warm_end)
            {
                self.detector.mark_caught_up(&topic, partition);
                let p = PartitionRef { topic, partition };
                self.round.behind.retain(|b| *b != p);
                self.round.caught_up.push(p);
            }
        }
        let fallen_behind: Vec<PartitionRef> = reading
            .partitions()
            .filter(|(topic, partition)| {
                self.detector.partition_behind(topic, *partition) == Some(false)
                    && !reading.caught_up(topic, *partition)
            })
            .map(|(topic, partition)| PartitionRef {
                topic: topic.to_string(),
                partition,
            })
            .collect();
        for p in fallen_behind {
            self.detector.mark_behind(&p.topic, p.partition);
            self.round.caught_up.retain(|c| *c != p);
            self.round.behind.push(p);
        }
        let lag = reading
            .partitions()
            .filter_map(|(topic, partition)| reading.lag(topic, partition))
            .max()
            .unwrap_or(0);
        self.guard.update(lag, self.detector.partition_delay_ms());
        self.outage.update_time(reading.status.now);
        self.publish_hold();
        if self.outage.held() || self.guard.held() {
            return Ok(());
        }
        let ticks = self.idle.due(&self.detector, reading.status.now);
        ::metrics::counter!(IDLE_TICKS.name).increment(ticks.len() as u64);
        self.round.ticks.extend(ticks);
        Ok(())
    }
}

impl DetectorProcessor {
    /// The observations of a warm-up read, and the records that had any;
    /// records that do not decode were dead-lettered by their first reader.
    fn warm_inputs(&self, records: Vec<InboundRecord>) -> (Vec<DetectorInput>, Vec<InboundRecord>) {
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

    /// Tells operators (log, metric) when the silence timers' hold changes;
    /// the detector itself learns it from the next round.
    fn publish_hold(&mut self) {
        let held = self.outage.held() || self.guard.held();
        if held != self.detector.silence_timers_held() {
            if held {
                tracing::warn!(
                    outage = self.outage.held(),
                    lag_guard = self.guard.held(),
                    "heartbeat and hang timers held"
                );
            } else {
                tracing::info!("heartbeat and hang timers released");
            }
            self.detector.hold_silence_timers(held);
            ::metrics::gauge!(TIMERS_HELD.name).set(if held { 1.0 } else { 0.0 });
        }
    }
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

fn describe_metrics() {
    unicron_bus::metrics::describe_all(METRICS);
    // The holds start released; a scrape before the first change shows 0.
    ::metrics::gauge!(TIMERS_HELD.name).set(0.0);
    ::metrics::gauge!(LAG_GUARD.name).set(0.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use unicron_core::detector::LogRules;

    /// A rebalance that hands back the same partitions, or more, keeps
    /// what the detector holds (here a heartbeat deadline); one that takes
    /// a partition away starts afresh.
    #[tokio::test]
    async fn only_a_changed_assignment_resets_the_detector() {
        use unicron_core::detector::{DetectorInput, Observation, SourceRecord};
        use unicron_core::{AgentEvent, AgentEventKind};
        let mut processor = DetectorProcessor::new(
            Detector::new(Default::default(), LogRules::builtin()),
            BTreeMap::new(),
            &Topics::new(&KafkaConfig::default()),
            &DetectorSettings::default(),
            "d".into(),
        );
        let agent = |p: i32| ("unicron.agent".to_string(), p);
        processor.reassigned(&[agent(0), agent(1)]).await.unwrap();
        let heartbeat = AgentEvent::new("c1", "n1", 1_767_225_600_000, AgentEventKind::Heartbeat);
        processor.detector.apply(&DetectorInput {
            source: SourceRecord {
                topic: "unicron.agent".into(),
                partition: 0,
                offset: 7,
                index: 0,
            },
            observation: Observation::Agent(heartbeat),
            caught_up: true,
        });
        assert_eq!(
            processor.detector.idle_candidates().len(),
            1,
            "a deadline is pending"
        );
        processor.reassigned(&[agent(0), agent(1)]).await.unwrap();
        assert_eq!(processor.detector.idle_candidates().len(), 1, "kept");
        // A topic created later (an optional input) joins: nothing is lost.
        let otlp = ("otlp_logs".to_string(), 0);
        processor
            .reassigned(&[agent(0), agent(1), otlp.clone()])
            .await
            .unwrap();
        assert_eq!(processor.detector.idle_candidates().len(), 1, "grown");
        processor.reassigned(&[agent(0), otlp]).await.unwrap();
        assert!(processor.detector.idle_candidates().is_empty(), "reset");
    }

    /// Partition p of all three inputs on one instance lines up; an
    /// `agent` topic left at fewer partitions, or another assignor, is
    /// named.
    #[test]
    fn an_assignment_that_splits_a_nodes_inputs_is_named() {
        let inputs = ["a".to_string(), "l".to_string(), "t".to_string()];
        let held = |spec: &[(&str, &[i32])]| -> Vec<(String, i32)> {
            spec.iter()
                .flat_map(|(t, ps)| ps.iter().map(|p| (t.to_string(), *p)))
                .collect()
        };
        let lined_up = held(&[("a", &[0, 1]), ("l", &[0, 1]), ("t", &[0, 1])]);
        assert_eq!(split_inputs(&inputs, &lined_up), None);
        let old_agent = held(&[
            ("a", &[0, 1, 2]),
            ("l", &[0, 1, 2, 3]),
            ("t", &[0, 1, 2, 3]),
        ]);
        let why = split_inputs(&inputs, &old_agent).unwrap();
        assert!(
            why.contains("[0, 1, 2] of a but [0, 1, 2, 3] of l"),
            "{why}"
        );
    }

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
