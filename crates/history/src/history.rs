//! The recorded history replay and explain read: every unicron topic, from
//! Kafka (what retention still holds) or from the Avro archive.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use unicron_codec::archive::ArchiveError;
use unicron_codec::schemas::AvroRecord;
use unicron_codec::{AvroCodec, KafkaConfig};
use unicron_core::detector::{Observation, SourceRecord};
use unicron_core::planner::{Input, InputEvent};
use unicron_core::replay::SourcedObservation;
use unicron_core::{
    AgentEvent, ClusterEvent, Command, CommandResult, Decision, DetectorRound, FailureEvent,
    LogRecord, TelemetryBatch,
};

use crate::names::TopicNames;

/// The history could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("reading {topic} from {brokers}")]
    Kafka {
        topic: String,
        brokers: String,
        #[source]
        source: crate::kafka::KafkaReadError,
    },
    #[error("reading {topic} from the archive {}", dir.display())]
    Archive {
        topic: String,
        dir: PathBuf,
        #[source]
        source: Box<ArchiveError>,
    },
}

/// One record and where it was in the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded<T> {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub record: T,
}

/// Where the history comes from.
#[derive(Debug, Clone)]
pub enum Origin<'a> {
    Kafka {
        config: &'a KafkaConfig,
        brokers: String,
    },
    Archive(&'a Path),
}

/// Every topic's records, decoded; undecodable ones are counted, not kept
/// (the services dead-lettered them when they were live).
#[derive(Debug, Default, Clone)]
pub struct History {
    pub telemetry: Vec<Recorded<TelemetryBatch>>,
    pub logs: Vec<Recorded<LogRecord>>,
    pub agent: Vec<Recorded<AgentEvent>>,
    /// Observations of the detector's external inputs (OTLP, Prometheus
    /// adapter, Vector, Fluent Bit topics), split as the service splits
    /// them; read from Kafka only (the archive keeps unicron's own topics).
    pub external: Vec<SourcedObservation>,
    pub failures: Vec<Recorded<FailureEvent>>,
    pub cluster: Vec<Recorded<ClusterEvent>>,
    pub results: Vec<Recorded<CommandResult>>,
    pub decisions: Vec<Recorded<Decision>>,
    pub commands: Vec<Recorded<Command>>,
    /// The detector's rounds; empty in a log written before rounds (replay
    /// then re-derives failures in event-time order).
    pub rounds: Vec<Recorded<DetectorRound>>,
    /// Why the rounds could not be read, if they could not (a deployment
    /// older than the topic).
    pub rounds_unreadable: Option<String>,
    pub undecodable: u64,
    /// Topic names as configured (with the prefix).
    pub names: TopicNames,
}

/// The observations of an external input topic, from Kafka. Records that
/// decode to nothing were dead-lettered when live and are counted here.
fn load_external(
    origin: &Origin<'_>,
    input: &unicron_codec::formats::ExternalInput,
    undecodable: &mut u64,
) -> Result<Vec<SourcedObservation>, HistoryError> {
    let Origin::Kafka { config, brokers } = origin else {
        return Ok(Vec::new());
    };
    let raw = crate::kafka::read_topic(config, brokers, &input.topic).map_err(|source| {
        HistoryError::Kafka {
            topic: input.topic.clone(),
            brokers: brokers.clone(),
            source,
        }
    })?;
    let mut out = Vec::new();
    for r in raw {
        let decoded = unicron_codec::formats::decode(input, &r.payload);
        if decoded.observations.is_empty() {
            *undecodable += 1;
        }
        for (index, observation) in decoded.observations.into_iter().enumerate() {
            out.push(SourcedObservation {
                source: SourceRecord {
                    topic: r.topic.clone(),
                    partition: r.partition,
                    offset: r.offset,
                    index: index as u32,
                },
                observation,
            });
        }
    }
    Ok(out)
}

fn load<T: AvroRecord>(
    origin: &Origin<'_>,
    topic: &str,
    undecodable: &mut u64,
) -> Result<Vec<Recorded<T>>, HistoryError> {
    match origin {
        Origin::Kafka { config, brokers } => {
            let codec = AvroCodec::<T>::default();
            let raw = crate::kafka::read_topic(config, brokers, topic).map_err(|source| {
                HistoryError::Kafka {
                    topic: topic.to_string(),
                    brokers: brokers.clone(),
                    source,
                }
            })?;
            let mut out = Vec::with_capacity(raw.len());
            for r in raw {
                match codec.decode(&r.payload) {
                    Ok(record) => out.push(Recorded {
                        topic: r.topic,
                        partition: r.partition,
                        offset: r.offset,
                        record,
                    }),
                    Err(_) => *undecodable += 1,
                }
            }
            Ok(out)
        }
        Origin::Archive(dir) => {
            let archived =
                unicron_codec::archive::read_topic::<T>(dir, topic).map_err(|source| {
                    HistoryError::Archive {
                        topic: topic.to_string(),
                        dir: dir.to_path_buf(),
                        source: Box::new(source),
                    }
                })?;
            Ok(archived
                .into_iter()
                .map(|a| Recorded {
                    topic: a.topic,
                    partition: a.partition,
                    offset: a.offset,
                    record: a.record,
                })
                .collect())
        }
    }
}

impl History {
    /// Loads every topic; `on_topic` hears each topic's name before it is
    /// read (for progress displays).
    pub fn load(
        origin: &Origin<'_>,
        names: TopicNames,
        on_topic: &dyn Fn(&str),
    ) -> Result<History, HistoryError> {
        let mut h = History {
            names: names.clone(),
            ..History::default()
        };
        let mut bad = 0;
        let read = |topic: &str| {
            on_topic(topic);
            topic.to_string()
        };
        h.telemetry = load(origin, &read(&names.telemetry), &mut bad)?;
        h.logs = load(origin, &read(&names.logs), &mut bad)?;
        h.agent = load(origin, &read(&names.agent), &mut bad)?;
        for input in &names.external {
            read(&input.topic);
            h.external.extend(load_external(origin, input, &mut bad)?);
        }
        h.failures = load(origin, &read(&names.failures), &mut bad)?;
        h.cluster = load(origin, &read(&names.cluster), &mut bad)?;
        h.results = load(origin, &read(&names.results), &mut bad)?;
        h.decisions = load(origin, &read(&names.decisions), &mut bad)?;
        h.commands = load(origin, &read(&names.commands), &mut bad)?;
        match load(origin, &read(&names.rounds), &mut bad) {
            Ok(rounds) => h.rounds = rounds,
            Err(error) => h.rounds_unreadable = Some(format!("{error:#}")),
        }
        h.undecodable = bad;
        Ok(h)
    }

    /// No record read.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records read, all topics.
    pub fn len(&self) -> u64 {
        (self.telemetry.len()
            + self.logs.len()
            + self.agent.len()
            + self.failures.len()
            + self.cluster.len()
            + self.results.len()
            + self.decisions.len()
            + self.commands.len()
            + self.rounds.len()
            + self.external.len()) as u64
    }

    /// The planner's inputs by (topic, partition, offset).
    pub fn planner_inputs(&self) -> BTreeMap<(String, i32, i64), Input> {
        let mut out = BTreeMap::new();
        let mut put = |topic: &str, partition: i32, offset: i64, event: InputEvent| {
            out.insert(
                (topic.to_string(), partition, offset),
                crate::decode::planner_input(topic, partition, offset, event),
            );
        };
        for r in &self.failures {
            put(
                &r.topic,
                r.partition,
                r.offset,
                InputEvent::Failure(r.record.clone()),
            );
        }
        for r in &self.cluster {
            put(
                &r.topic,
                r.partition,
                r.offset,
                InputEvent::Cluster(r.record.clone()),
            );
        }
        for r in &self.results {
            put(
                &r.topic,
                r.partition,
                r.offset,
                InputEvent::Result(r.record.clone()),
            );
        }
        out
    }

    /// The detector's inputs, as the detector service splits them.
    pub fn observations(&self, cluster: Option<&str>) -> Vec<SourcedObservation> {
        let keep = |c: &str| cluster.is_none_or(|want| want == c);
        let source = |topic: &str, partition: i32, offset: i64| SourceRecord {
            topic: topic.to_string(),
            partition,
            offset,
            index: 0,
        };
        let mut out = Vec::new();
        for r in self.telemetry.iter().filter(|r| keep(&r.record.cluster)) {
            out.push(SourcedObservation {
                source: source(&r.topic, r.partition, r.offset),
                observation: Observation::Telemetry(r.record.clone()),
            });
        }
        for r in self.logs.iter().filter(|r| keep(&r.record.cluster)) {
            out.push(SourcedObservation {
                source: source(&r.topic, r.partition, r.offset),
                observation: Observation::Log(r.record.clone()),
            });
        }
        for r in self.agent.iter().filter(|r| keep(&r.record.cluster)) {
            out.push(SourcedObservation {
                source: source(&r.topic, r.partition, r.offset),
                observation: Observation::Agent(r.record.clone()),
            });
        }
        out.extend(
            self.external
                .iter()
                .filter(|o| keep(o.observation.cluster()))
                .cloned(),
        );
        out
    }
}
