//! The detector's consume → classify → publish loop.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use unicron_bus::consumer::InboundRecord;
use unicron_bus::dlq::DeadLetterSink;
use unicron_bus::formats::{self, ExternalInput};
use unicron_bus::rebalance::RebalanceCounter;
use unicron_bus::{AvroCodec, BusError, Consumer, DecodeError, KafkaConfig, Producer};
use unicron_core::detector::{Detector, DetectorInput, DetectorOutput, Observation, Source};
use unicron_core::{AgentEvent, FailureEvent, LogRecord, TelemetryBatch};

use crate::settings::DetectorSettings;

const SERVICE: &str = "detector";

/// Errors that stop the detector. Bad records never do: they are dead-lettered.
#[derive(Debug, thiserror::Error)]
pub enum DetectorError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Bus(#[from] BusError),
}

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
    describe_metrics();
    unicron_bus::metrics::register(SERVICE);
    let mut decoders: BTreeMap<String, Decoder> = BTreeMap::new();
    decoders.insert(
        kafka.topic("telemetry"),
        Decoder::Telemetry(AvroCodec::default()),
    );
    decoders.insert(kafka.topic("logs"), Decoder::Logs(AvroCodec::default()));
    decoders.insert(kafka.topic("agent"), Decoder::Agent(AvroCodec::default()));
    let mut subscriptions: Vec<String> = decoders.keys().cloned().collect();
    for input in &settings.inputs {
        // Optional topics are subscribed by pattern: librdkafka joins them
        // when they exist, and picks them up at a metadata refresh when
        // they are created later.
        subscriptions.push(if input.optional {
            format!("^{}$", regex_escape(&input.topic))
        } else {
            input.topic.clone()
        });
        decoders.insert(input.topic.clone(), Decoder::External(input.clone()));
    }
    let failures_topic = kafka.topic("failures");
    let agent_topic = kafka.topic("agent");
    let agent_codec: AvroCodec<AgentEvent> = AvroCodec::default();
    let failure_codec: AvroCodec<FailureEvent> = AvroCodec::default();
    let producer = Producer::new(kafka, brokers)?;
    let dlq = DeadLetterSink::new(
        producer.clone(),
        kafka.topic("dlq"),
        SERVICE,
        kafka.dlq_payload_bytes,
    );
    let context = RebalanceCounter::default();
    let consumer = Consumer::with_context(
        &with_topic_discovery(kafka, settings.new_topic_check_s),
        brokers,
        &settings.group_id,
        context.clone(),
    )?;
    let topics: Vec<&str> = subscriptions.iter().map(String::as_str).collect();
    consumer.subscribe(&topics)?;
    tracing::info!(group = %settings.group_id, topics = ?subscriptions, rules = rules.len(), "detector running");

    let mut detector = Detector::new(settings.tuning.clone(), rules);
    let mut generation = context.generation();
    let mut outage = OutageHold::new(
        Duration::from_secs_f64(settings.outage_grace_s),
        context.connection_losses(),
    );
    let mut idle = IdleTicks::new(Duration::from_secs_f64(settings.idle_tick_s));
    // The offset last read per partition, to find ones that caught up.
    let mut last_read: BTreeMap<(String, i32), i64> = BTreeMap::new();
    let mut idle_check = tokio::time::interval(idle.check_every());
    idle_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Ready while this loop runs; not ready once it ends, however it ends.
    let _ready = unicron_bus::metrics::ReadyGuard::new(SERVICE);
    tokio::pin!(shutdown);
    loop {
        let record = tokio::select! {
            record = consumer.recv() => record?,
            _ = idle_check.tick(), if idle.enabled() => {
                for (topic, partition) in detector.behind_partitions() {
                    if last_read
                        .get(&(topic.clone(), partition))
                        .is_some_and(|offset| consumer.caught_up_with(&topic, partition, *offset))
                    {
                        detector.mark_caught_up(&topic, partition);
                    }
                }
                for tick in idle.due(&detector, Instant::now()) {
                    let at = producer
                        .send(&agent_topic, &tick.cluster, &tick, &agent_codec)
                        .await?;
                    metrics::counter!("unicron_detector_idle_ticks_total").increment(1);
                    // Applied here at once: with several detectors the
                    // tick's partition may be another's. Reading it back
                    // (here or in replay) moves the clock to the same time.
                    let input = DetectorInput {
                        source: Source {
                            topic: agent_topic.clone(),
                            partition: at.partition,
                            offset: at.offset,
                            index: 0,
                        },
                        observation: Observation::Agent(tick),
                        caught_up: true,
                    };
                    for output in detector.apply(&input) {
                        if let DetectorOutput::Failure(failure) = output {
                            producer
                                .send(&failures_topic, &failure.cluster, &failure, &failure_codec)
                                .await?;
                            record_failure(&failure, None);
                        }
                    }
                }
                continue;
            }
            () = &mut shutdown => break,
        };
        if context.generation() != generation {
            // Partitions moved: state about nodes read elsewhere now is stale.
            generation = context.generation();
            detector.reset();
        }
        outage.update(&mut detector, context.connection_losses(), Instant::now());
        let decoded = match consumer.oversized(&record) {
            Some(error) => Err(error),
            None => match decoders.get(&record.topic) {
                Some(decoder) => decoder.decode(&record.payload),
                None => Err(DecodeError::Invalid {
                    record: "record",
                    reason: format!("no decoder for topic {}", record.topic),
                }),
            },
        };
        let decoded = match decoded {
            Ok(decoded) => decoded,
            Err(error) => {
                dlq.send(&record, &error).await?;
                consumer.mark_done(&record)?;
                continue;
            }
        };
        tracing::debug!(
            topic = %record.topic,
            offset = record.offset,
            observations = decoded.observations.len(),
            problems = ?decoded.problems,
            "decoded"
        );
        last_read.insert((record.topic.clone(), record.partition), record.offset);
        let mut problems = decoded.problems;
        let started = Instant::now();
        for observation in &decoded.observations {
            idle.heard_from(observation.cluster(), started);
        }
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
            for output in detector.apply(&input) {
                match output {
                    DetectorOutput::Failure(f) => failures.push(f),
                    DetectorOutput::Rejected(reason) => problems.push(reason),
                }
            }
        }
        metrics::histogram!("unicron_detector_apply_seconds")
            .record(started.elapsed().as_secs_f64());
        for failure in &failures {
            producer
                .send(&failures_topic, &failure.cluster, failure, &failure_codec)
                .await?;
            record_failure(failure, Some(&record));
        }
        if !problems.is_empty() {
            let more = problems.len() - 1;
            let reason = if more == 0 {
                problems.remove(0)
            } else {
                format!("{} (and {more} more)", problems[0])
            };
            dlq.send_reason(&record, &reason).await?;
        }
        consumer.mark_done(&record)?;
    }
    consumer.commit_now()?;
    tracing::info!("detector stopped");
    Ok(())
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
/// (none for an idle tick's timers).
fn record_failure(failure: &FailureEvent, record: Option<&InboundRecord>) {
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
        record.and_then(|r| r.timestamp_ms),
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

fn regex_escape(topic: &str) -> String {
    topic
        .chars()
        .flat_map(|c| {
            let escape = !(c.is_ascii_alphanumeric() || c == '_' || c == '-');
            escape.then_some('\\').into_iter().chain(std::iter::once(c))
        })
        .collect()
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
