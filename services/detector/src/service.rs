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
use unicron_core::detector::{Detector, Observation};
use unicron_core::{LogRecord, PartitionRef, TelemetryBatch};
use unicron_runtime::{
    Applied, BatchEnd, BusStatus, Durability, Never, Processor, Reading, RuntimeOptions, Step,
    with_topic_discovery,
};

use crate::error::DetectorError;
use crate::holds::{IdleTicks, LagGuard, OutageHold};
use crate::metrics::{IDLE_TICKS, LAG_GUARD, METRICS, REJECTED, ROUND_SECONDS, TIMERS_HELD};
use crate::rules_watch::RulesWatch;
use crate::settings::{DetectorService, DetectorSettings};
use crate::warm_up::WarmUpSource;

mod rounds;
use rounds::{PendingRound, inputs_of};

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
    let DetectorService {
        settings,
        rules,
        rules_text,
    } = detector;
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
    processor.rules_watch = RulesWatch::new(settings.rules_file.clone(), rules_text);
    processor.round.rules = Some(processor.rules_watch.text().to_string());
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
    rules_watch: RulesWatch,
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
            rules_watch: RulesWatch::new(None, String::new()),
        }
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
        // Read once a round: idle ticks count whole seconds.
        let now = *self.round.heard_at.get_or_insert_with(Instant::now);
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
            if problem.starts_with(formats::FOREIGN_CLUSTER) {
                ::metrics::counter!(REJECTED.name, "reason" => formats::FOREIGN_CLUSTER)
                    .increment(1);
            }
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
        if reading.backlog {
            // Amid a backlog only the lag guard and the outage hold move:
            // they must hold the timers while the backlog lasts. Partitions
            // are left as the records read say: a high watermark may be
            // stale, and flagging partitions behind here slowed rounds to
            // a third of their rate at 300 clusters.
            self.update_guard(reading);
            return Ok(());
        }
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
        self.update_guard(reading);
        if let Some(text) = self.rules_watch.poll(Instant::now()) {
            self.round.rules = Some(text);
        }
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
    /// The lag guard and the outage hold, from the reader's lag and state.
    fn update_guard(&mut self, reading: &Reading<'_>) {
        let lag = reading
            .partitions()
            .filter_map(|(topic, partition)| reading.lag(topic, partition))
            .max()
            .unwrap_or(0);
        self.guard.update(lag, self.detector.partition_delay_ms());
        self.outage.update_time(reading.status.now);
        self.publish_hold();
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
}
