//! The detector's step: telemetry, logs, agent events and external
//! records in; failures out. Its state is soft (rebuilt from the stream),
//! so it runs without a store, at least once; failure ids are derived
//! from input offsets, so a repeat is dropped downstream.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use unicron_bus::formats::{self, ExternalInput};
use unicron_bus::{
    AvroCodec, DecodeError, InboundRecord, KafkaConfig, Subscription, Topic, Topics,
};
use unicron_core::detector::{Detector, DetectorInput, DetectorOutput, Observation, Source};
use unicron_core::{AgentEvent, FailureEvent, LogRecord, TelemetryBatch};
use unicron_runtime::{
    Applied, BusStatus, Durability, Injected, Never, Processor, Reading, RuntimeOptions, Step,
    Store,
};

use crate::error::DetectorError;
use crate::settings::DetectorSettings;

const SERVICE: &str = "detector";

/// How each subscribed topic is decoded.
enum Decoder {
    Telemetry(AvroCodec<TelemetryBatch>),
    Logs(AvroCodec<LogRecord>),
    Agent(AvroCodec<AgentEvent>),
    External(ExternalInput),
}

impl Decoder {
    /// Observations of one record, plus problems with parts of it.
    fn decode(&self, payload: &[u8]) -> Result<formats::Decoded, DecodeError> {
        let one = |observation| formats::Decoded {
            observations: vec![observation],
            problems: Vec::new(),
        };
        Ok(match self {
            Decoder::Telemetry(c) => one(Observation::Telemetry(c.decode(payload)?)),
            Decoder::Logs(c) => one(Observation::Log(c.decode(payload)?)),
            Decoder::Agent(c) => one(Observation::Agent(c.decode(payload)?)),
            Decoder::External(input) => formats::decode(input, payload),
        })
    }
}

/// Runs the detector until `shutdown` completes or an unrecoverable error.
pub async fn run(
    kafka: &KafkaConfig,
    brokers: &str,
    settings: &DetectorSettings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DetectorError> {
    settings.validate()?;
    let rules = settings.rules()?;
    let topics = Topics::new(kafka);
    let mut decoders: BTreeMap<String, Decoder> = BTreeMap::new();
    decoders.insert(
        topics.name(Topic::Telemetry).to_string(),
        Decoder::Telemetry(AvroCodec::default()),
    );
    decoders.insert(
        topics.name(Topic::Logs).to_string(),
        Decoder::Logs(AvroCodec::default()),
    );
    decoders.insert(
        topics.name(Topic::Agent).to_string(),
        Decoder::Agent(AvroCodec::default()),
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
        decoders.insert(input.topic.clone(), Decoder::External(input.clone()));
    }
    let options = RuntimeOptions {
        service: SERVICE,
        group_id: settings.group_id.clone(),
        subscriptions,
        durability: Durability::AtLeastOnce,
    };
    tracing::info!(group = %settings.group_id, topics = ?options.subscriptions, rules = rules.len(), "detector starting");
    let mut processor = DetectorProcessor {
        detector: Detector::new(settings.tuning.clone(), rules),
        decoders,
        failures_topic: topics.name(Topic::Failures).to_string(),
        agent_topic: topics.name(Topic::Agent).to_string(),
        agent_codec: AvroCodec::default(),
        failure_codec: AvroCodec::default(),
        // Lost connections are counted from the runtime's start.
        outage: OutageHold::new(Duration::from_secs_f64(settings.outage_grace_s), 0),
        idle: IdleTicks::new(Duration::from_secs_f64(settings.idle_tick_s)),
        assigned: Vec::new(),
    };
    let kafka = with_topic_discovery(kafka, settings.new_topic_check_s);
    unicron_runtime::run(&kafka, brokers, &options, &mut processor, shutdown).await
}

struct DetectorProcessor {
    detector: Detector,
    decoders: BTreeMap<String, Decoder>,
    failures_topic: String,
    agent_topic: String,
    agent_codec: AvroCodec<AgentEvent>,
    failure_codec: AvroCodec<FailureEvent>,
    outage: OutageHold,
    idle: IdleTicks,
    /// The partitions the detector's state was built from.
    assigned: Vec<(String, i32)>,
}

impl Processor for DetectorProcessor {
    type Input = formats::Decoded;
    type Action = Never;
    type Outcome = Never;
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
        let started = Instant::now();
        for observation in &decoded.observations {
            self.idle.heard_from(observation.cluster(), started);
        }
        let mut problems = decoded.problems;
        let mut failures = Vec::new();
        for (index, observation) in decoded.observations.into_iter().enumerate() {
            let input = DetectorInput {
                source: Source {
                    topic: record.topic.clone(),
                    partition: record.partition,
                    offset: record.offset,
                    index: index as u32,
                },
                observation,
                caught_up: record.caught_up,
            };
            for output in self.detector.apply(&input) {
                match output {
                    DetectorOutput::Failure(f) => failures.push(f),
                    DetectorOutput::Rejected(reason) => problems.push(reason),
                }
            }
        }
        metrics::histogram!("unicron_detector_apply_seconds")
            .record(started.elapsed().as_secs_f64());
        for failure in &failures {
            let payload = self.failure_codec.encode(failure)?;
            step.publish(&self.failures_topic, failure.cluster.as_bytes(), payload);
            record_failure(failure, record);
        }
        for problem in problems {
            step.dead_letter(problem);
        }
        Ok(Applied::Done)
    }

    async fn act(&mut self, action: &Never) -> Never {
        match *action {}
    }

    fn finish(&mut self, action: Never, _: Never, _: &mut Step<'_>) -> Result<(), DetectorError> {
        match action {}
    }

    fn describe_metrics(&self) {
        describe_metrics();
    }

    /// Partitions moved: state about nodes read elsewhere now is stale.
    /// A rebalance that gives back the same partitions (a coordinator that
    /// moved with a broker restart, a member that joined and left) keeps
    /// it: its held symptoms and timers came from records whose offsets
    /// are committed already, and forgetting them would lose failures.
    async fn reassigned(
        &mut self,
        assigned: &[(String, i32)],
        _store: Option<&Store>,
    ) -> Result<(), DetectorError> {
        if assigned.is_empty() || assigned == self.assigned.as_slice() {
            return Ok(());
        }
        tracing::info!(
            partitions = assigned.len(),
            "assignment changed: detector state reset"
        );
        self.detector.reset();
        self.assigned = assigned.to_vec();
        Ok(())
    }

    fn observe(&mut self, status: BusStatus) {
        self.outage
            .update(&mut self.detector, status.connection_losses, status.now);
    }

    fn tick_every(&self) -> Option<Duration> {
        self.idle.enabled().then(|| self.idle.check_every())
    }

    /// Idle ticks: written to the agent topic and applied here at once
    /// (with several detectors the tick's partition may be another's).
    /// Reading one back, here or in replay, moves the clock to the same time.
    fn tick(&mut self, reading: &Reading<'_>) -> Vec<Injected> {
        for (topic, partition) in self.detector.behind_partitions() {
            if reading.caught_up(&topic, partition) {
                self.detector.mark_caught_up(&topic, partition);
            }
        }
        let mut injected = Vec::new();
        for tick in self.idle.due(&self.detector, reading.status.now) {
            match self.agent_codec.encode(&tick) {
                Ok(payload) => {
                    metrics::counter!("unicron_detector_idle_ticks_total").increment(1);
                    injected.push(Injected {
                        topic: self.agent_topic.clone(),
                        key: tick.cluster.clone().into_bytes(),
                        payload,
                    });
                }
                Err(error) => tracing::error!(%error, "cannot encode an idle tick"),
            }
        }
        injected
    }
}

/// Holds the detector's silence timers from a lost broker connection until
/// `grace` after the first record read since the latest loss.
struct OutageHold {
    grace: Duration,
    losses: u64,
    until: Option<Instant>,
}

impl OutageHold {
    fn new(grace: Duration, losses: u64) -> OutageHold {
        OutageHold {
            grace,
            losses,
            until: None,
        }
    }

    fn update(&mut self, detector: &mut Detector, losses: u64, now: Instant) {
        if losses != self.losses && !self.grace.is_zero() {
            self.losses = losses;
            self.until = Some(now + self.grace);
            if !detector.silence_timers_held() {
                tracing::warn!(
                    grace_s = self.grace.as_secs_f64(),
                    "broker connection lost: heartbeat and hang timers held"
                );
                detector.hold_silence_timers(true);
                metrics::gauge!(TIMERS_HELD).set(1.0);
            }
        } else if self.until.is_some_and(|until| now >= until) {
            self.until = None;
            tracing::info!("heartbeat and hang timers released");
            detector.hold_silence_timers(false);
            metrics::gauge!(TIMERS_HELD).set(0.0);
        }
    }
}

const TIMERS_HELD: &str = "unicron_detector_silence_timers_held";

/// The node name idle ticks carry: they come from the detector, not a node.
pub const IDLE_TICK_NODE: &str = "unicron-detector";

/// Idle ticks: when a cluster with a pending timer has had no record for
/// `after` of wall time on inputs read to their end, its clock moves by
/// that much, through a record on the agent topic that this detector (and
/// replay) reads back. Wall time enters the detector only this way.
struct IdleTicks {
    after: Duration,
    last_heard: BTreeMap<String, Instant>,
}

impl IdleTicks {
    fn new(after: Duration) -> IdleTicks {
        IdleTicks {
            after,
            last_heard: BTreeMap::new(),
        }
    }

    fn enabled(&self) -> bool {
        !self.after.is_zero()
    }

    /// How often to look for idle clusters (a tick is at most this late).
    fn check_every(&self) -> Duration {
        (self.after / 4).max(Duration::from_millis(100))
    }

    fn heard_from(&mut self, cluster: &str, now: Instant) {
        match self.last_heard.get_mut(cluster) {
            Some(at) => *at = now,
            None => {
                self.last_heard.insert(cluster.to_string(), now);
            }
        }
    }

    /// The ticks due at `now`. None while silence timers are held: an
    /// outage is no evidence of silence.
    fn due(&mut self, detector: &Detector, now: Instant) -> Vec<AgentEvent> {
        if detector.silence_timers_held() {
            return Vec::new();
        }
        let mut ticks = Vec::new();
        for (cluster, clock_ms) in detector.idle_candidates() {
            let Some(heard) = self.last_heard.get_mut(&cluster) else {
                self.last_heard.insert(cluster, now);
                continue;
            };
            let quiet = now.saturating_duration_since(*heard);
            if quiet < self.after {
                continue;
            }
            *heard = now;
            ticks.push(AgentEvent::idle(
                &cluster,
                IDLE_TICK_NODE,
                clock_ms + quiet.as_millis() as i64,
            ));
        }
        ticks
    }
}

/// Logs and counts a published failure; `record` is what triggered it
/// (an idle tick, with no Kafka timestamp, for timers).
fn record_failure(failure: &FailureEvent, record: &InboundRecord) {
    tracing::info!(
        id = %failure.id,
        kind = %failure.kind,
        severity = %failure.severity,
        node = ?failure.node,
        job = ?failure.job,
        "failure detected"
    );
    metrics::counter!(
        "unicron_detector_failures_total",
        "kind" => failure.kind.symbol(),
        "severity" => failure.severity.symbol()
    )
    .increment(1);
    // Wall-clock age of the triggering record: operational only, never an
    // input to a decision.
    if let (Some(produced), Ok(now)) = (
        record.timestamp_ms,
        SystemTime::now().duration_since(UNIX_EPOCH),
    ) {
        let age = (now.as_millis() as i64 - produced).max(0) as f64 / 1000.0;
        metrics::histogram!("unicron_detector_detection_latency_seconds").record(age);
    }
}

/// librdkafka's property that sets how soon a pattern subscription sees a
/// topic created after it.
const METADATA_REFRESH: &str = "topic.metadata.refresh.interval.ms";

/// `kafka` with the metadata refresh at `every_s`, unless the site set it.
fn with_topic_discovery(kafka: &KafkaConfig, every_s: f64) -> KafkaConfig {
    let mut kafka = kafka.clone();
    if !kafka
        .librdkafka_properties()
        .iter()
        .any(|(key, _)| key == METADATA_REFRESH)
    {
        kafka.properties.insert(
            METADATA_REFRESH.into(),
            unicron_bus::config::PropertyValue::Int((every_s * 1000.0).round() as i64),
        );
    }
    kafka
}

fn describe_metrics() {
    metrics::describe_counter!(
        "unicron_detector_failures_total",
        "Failure events published, by kind and severity."
    );
    metrics::describe_gauge!(
        TIMERS_HELD,
        "1 while heartbeat and hang timers wait after a lost broker connection."
    );
    metrics::gauge!(TIMERS_HELD).set(0.0);
    metrics::describe_counter!(
        "unicron_detector_idle_ticks_total",
        "Idle ticks written for clusters whose inputs went quiet with a timer pending."
    );
    metrics::describe_histogram!(
        "unicron_detector_apply_seconds",
        "Time to classify and correlate one input record, seconds."
    );
    metrics::describe_histogram!(
        "unicron_detector_detection_latency_seconds",
        "Wall-clock time from the triggering record's Kafka timestamp to its failure event, seconds."
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use unicron_core::detector::LogRules;

    /// A rebalance that hands back the same partitions keeps what the
    /// detector holds (here a heartbeat deadline); a different assignment
    /// starts afresh.
    #[tokio::test]
    async fn only_a_changed_assignment_resets_the_detector() {
        use unicron_core::detector::{DetectorInput, Observation, Source};
        use unicron_core::{AgentEvent, AgentEventKind};
        let mut processor = DetectorProcessor {
            detector: Detector::new(Default::default(), LogRules::builtin()),
            decoders: BTreeMap::new(),
            failures_topic: "unicron.failures".into(),
            agent_topic: "unicron.agent".into(),
            agent_codec: AvroCodec::default(),
            failure_codec: AvroCodec::default(),
            outage: OutageHold::new(Duration::from_secs(30), 0),
            idle: IdleTicks::new(Duration::from_secs(2)),
            assigned: Vec::new(),
        };
        let agent = |p: i32| ("unicron.agent".to_string(), p);
        processor
            .reassigned(&[agent(0), agent(1)], None)
            .await
            .unwrap();
        let heartbeat = AgentEvent::new("c1", "n1", 1_767_225_600_000, AgentEventKind::Heartbeat);
        processor.detector.apply(&DetectorInput {
            source: Source {
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
        processor
            .reassigned(&[agent(0), agent(1)], None)
            .await
            .unwrap();
        assert_eq!(processor.detector.idle_candidates().len(), 1, "kept");
        processor.reassigned(&[agent(0)], None).await.unwrap();
        assert!(processor.detector.idle_candidates().is_empty(), "reset");
    }

    #[test]
    fn a_connection_loss_holds_the_timers_until_grace_after_the_latest_loss() {
        let mut detector = Detector::new(Default::default(), LogRules::builtin());
        let mut hold = OutageHold::new(Duration::from_secs(30), 4);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        hold.update(&mut detector, 4, at(0));
        assert!(!detector.silence_timers_held(), "no loss yet");
        hold.update(&mut detector, 5, at(1));
        assert!(detector.silence_timers_held());
        hold.update(&mut detector, 5, at(20));
        assert!(detector.silence_timers_held());
        // Another loss within the hold extends it from then.
        hold.update(&mut detector, 7, at(25));
        hold.update(&mut detector, 7, at(54));
        assert!(detector.silence_timers_held());
        hold.update(&mut detector, 7, at(55));
        assert!(
            !detector.silence_timers_held(),
            "released 30 s after the latest loss"
        );
    }

    #[test]
    fn a_zero_grace_never_holds() {
        let mut detector = Detector::new(Default::default(), LogRules::builtin());
        let mut hold = OutageHold::new(Duration::ZERO, 0);
        hold.update(&mut detector, 3, Instant::now());
        assert!(!detector.silence_timers_held());
    }
}
