//! unicron's topics as types (docs/design.md §3): each [`Topic`] carries
//! one record type; [`Topics`] holds their full names, resolved once from
//! the configured prefix; [`Subscription`] is what a service reads, one of
//! ours or a site's own topic named in configuration.

use crate::config::KafkaConfig;
use crate::schemas::AvroRecord;

pub use crate::record_types::Topic;

impl Topic {
    fn index(self) -> usize {
        Topic::ALL
            .iter()
            .position(|t| *t == self)
            .expect("ALL lists every topic")
    }
}

/// Full topic names under one prefix, resolved once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    names: [String; crate::record_types::COUNT],
}

impl Topics {
    pub fn new(kafka: &KafkaConfig) -> Topics {
        Topics {
            names: Topic::ALL.map(|t| kafka.topic(t.suffix())),
        }
    }

    /// The full name of `topic`.
    pub fn name(&self, topic: Topic) -> &str {
        &self.names[topic.index()]
    }

    /// The full name of the topic records of type `T` go to.
    pub fn of<T: AvroRecord>(&self) -> &str {
        self.name(Topic::carrying(T::RECORD))
    }

    /// Which of ours a full topic name is.
    pub fn topic_of(&self, name: &str) -> Option<Topic> {
        Topic::ALL.into_iter().find(|t| self.name(*t) == name)
    }
}

/// A topic a service reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    Topic(Topic),
    /// A site's topic named in configuration, read under its own name;
    /// an optional one is subscribed by pattern, so it is joined when it is
    /// created later.
    External {
        name: String,
        optional: bool,
    },
}

impl Subscription {
    /// What librdkafka subscribes to: a name, or `^name$` for an optional
    /// external topic.
    pub fn resolve(&self, topics: &Topics) -> String {
        match self {
            Subscription::Topic(topic) => topics.name(*topic).to_string(),
            Subscription::External {
                name,
                optional: false,
            } => name.clone(),
            Subscription::External {
                name,
                optional: true,
            } => format!("^{}$", regex_escape(name)),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;

    #[test]
    fn each_record_type_names_the_one_topic_that_carries_it() {
        for topic in Topic::ALL {
            assert_eq!(Topic::carrying(topic.record()), topic);
        }
        let topics = Topics::new(&KafkaConfig::default());
        assert_eq!(
            topics.of::<unicron_core::FailureEvent>(),
            "unicron.failures"
        );
        assert_eq!(
            topics.of::<unicron_core::CommandResult>(),
            "unicron.command-results"
        );
    }

    #[test]
    fn every_topic_is_in_the_topology_with_its_record_type() {
        let topology = Topology::builtin();
        assert_eq!(topology.topics.len(), Topic::ALL.len());
        for topic in Topic::ALL {
            let spec = topology
                .topics
                .iter()
                .find(|s| s.name == topic.suffix())
                .unwrap_or_else(|| panic!("{topic:?} is not in topology/topics.toml"));
            assert_eq!(spec.record, topic.record().name(), "{topic:?}");
        }
    }

    #[test]
    fn names_carry_the_prefix_and_map_back() {
        let kafka = KafkaConfig {
            topic_prefix: "site.".into(),
            ..KafkaConfig::default()
        };
        let topics = Topics::new(&kafka);
        assert_eq!(topics.name(Topic::CommandResults), "site.command-results");
        assert_eq!(topics.topic_of("site.failures"), Some(Topic::Failures));
        assert_eq!(topics.topic_of("unicron.failures"), None);
    }

    #[test]
    fn optional_external_topics_are_subscribed_by_an_escaped_pattern() {
        let topics = Topics::new(&KafkaConfig::default());
        let optional = Subscription::External {
            name: "otlp.logs".into(),
            optional: true,
        };
        assert_eq!(optional.resolve(&topics), "^otlp\\.logs$");
        let required = Subscription::External {
            name: "otlp.logs".into(),
            optional: false,
        };
        assert_eq!(required.resolve(&topics), "otlp.logs");
        assert_eq!(
            Subscription::Topic(Topic::Agent).resolve(&topics),
            "unicron.agent"
        );
    }
}
