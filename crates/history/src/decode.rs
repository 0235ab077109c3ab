//! The one decoder from a record of a unicron topic to what it carries:
//! for the control-plane topics, the planner's input, a decision or a
//! command; for the detector's own topics, the source records explain cites.

use unicron_codec::{AvroCodec, DecodeError, KafkaConfig, PlannerInputs};
use unicron_core::planner::{Input, InputEvent};
use unicron_core::{AgentEvent, Command, Decision, LogRecord, TelemetryBatch};

use crate::names::TopicNames;

/// A decoded record.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A failure, a cluster event or a command result: what the planner takes.
    Input(InputEvent),
    Decision(Decision),
    Command(Command),
    Telemetry(TelemetryBatch),
    Log(LogRecord),
    Agent(AgentEvent),
}

impl Decoded {
    /// The record as explain shows a source or a trigger.
    pub fn to_json(&self) -> Option<serde_json::Value> {
        let value = match self {
            Decoded::Input(InputEvent::Failure(r)) => serde_json::to_value(r),
            Decoded::Input(InputEvent::Cluster(r)) => serde_json::to_value(r),
            Decoded::Input(InputEvent::Result(r)) => serde_json::to_value(r),
            Decoded::Decision(r) => serde_json::to_value(r),
            Decoded::Command(r) => serde_json::to_value(r),
            Decoded::Telemetry(r) => serde_json::to_value(r),
            Decoded::Log(r) => serde_json::to_value(r),
            Decoded::Agent(r) => serde_json::to_value(r),
        };
        value.ok()
    }
}

/// Decodes records by their topic's configured name.
#[derive(Debug)]
pub struct Decoder {
    names: TopicNames,
    inputs: PlannerInputs,
    decision: AvroCodec<Decision>,
    command: AvroCodec<Command>,
    telemetry: AvroCodec<TelemetryBatch>,
    log: AvroCodec<LogRecord>,
    agent: AvroCodec<AgentEvent>,
}

impl Decoder {
    pub fn new(kafka: &KafkaConfig) -> Decoder {
        Decoder::with_names(TopicNames::new(kafka))
    }

    pub fn with_names(names: TopicNames) -> Decoder {
        Decoder {
            inputs: PlannerInputs::new(names.topics.clone()),
            names,
            decision: AvroCodec::default(),
            command: AvroCodec::default(),
            telemetry: AvroCodec::default(),
            log: AvroCodec::default(),
            agent: AvroCodec::default(),
        }
    }

    pub fn names(&self) -> &TopicNames {
        &self.names
    }

    /// The five control-plane topics: planner inputs, decisions, commands.
    pub fn control_plane_topics(&self) -> [&str; 5] {
        let n = &self.names;
        [
            &n.failures,
            &n.cluster,
            &n.results,
            &n.decisions,
            &n.commands,
        ]
    }

    /// The detector's topics whose records explain cites as sources.
    pub fn source_topics(&self) -> [&str; 3] {
        let n = &self.names;
        [&n.telemetry, &n.logs, &n.agent]
    }

    /// The record of `topic`, or `None` for a topic this decoder does not know.
    pub fn decode(&self, topic: &str, payload: &[u8]) -> Option<Result<Decoded, DecodeError>> {
        if let Some(input) = self.inputs.decode(topic, payload) {
            return Some(input.map(Decoded::Input));
        }
        let n = &self.names;
        let decoded = if topic == n.decisions {
            self.decision.decode(payload).map(Decoded::Decision)
        } else if topic == n.commands {
            self.command.decode(payload).map(Decoded::Command)
        } else if topic == n.telemetry {
            self.telemetry.decode(payload).map(Decoded::Telemetry)
        } else if topic == n.logs {
            self.log.decode(payload).map(Decoded::Log)
        } else if topic == n.agent {
            self.agent.decode(payload).map(Decoded::Agent)
        } else {
            return None;
        };
        Some(decoded)
    }
}

/// A planner input at its place in the log.
pub fn planner_input(topic: &str, partition: i32, offset: i64, event: InputEvent) -> Input {
    Input {
        topic: topic.to_string(),
        partition,
        offset,
        event,
    }
}
