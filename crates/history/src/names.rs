//! The topics a history reads, by their configured names.

use unicron_codec::{KafkaConfig, Topic, Topics};

/// The full names of the topics a history reads, resolved once.
#[derive(Debug, Clone)]
pub struct TopicNames {
    pub topics: Topics,
    pub telemetry: String,
    pub logs: String,
    pub agent: String,
    pub failures: String,
    pub cluster: String,
    pub results: String,
    pub decisions: String,
    pub commands: String,
    pub rounds: String,
    /// The detector's external inputs, by full topic name.
    pub external: Vec<unicron_codec::formats::ExternalInput>,
}

impl Default for TopicNames {
    /// The names under the default prefix.
    fn default() -> Self {
        TopicNames::new(&KafkaConfig::default())
    }
}

impl TopicNames {
    pub fn new(kafka: &KafkaConfig) -> TopicNames {
        let topics = Topics::new(kafka);
        let name = |topic| topics.name(topic).to_string();
        TopicNames {
            telemetry: name(Topic::Telemetry),
            logs: name(Topic::Logs),
            agent: name(Topic::Agent),
            failures: name(Topic::Failures),
            cluster: name(Topic::Cluster),
            results: name(Topic::CommandResults),
            decisions: name(Topic::Decisions),
            commands: name(Topic::Commands),
            rounds: name(Topic::DetectorRounds),
            external: Vec::new(),
            topics,
        }
    }

    /// These names plus the detector's external inputs.
    pub fn with_inputs(mut self, inputs: &[unicron_codec::formats::ExternalInput]) -> TopicNames {
        self.external = inputs.to_vec();
        self
    }
}
