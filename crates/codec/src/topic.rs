//! unicron's topics as types (docs/design.md §3): each [`Topic`] carries
//! one record type; [`Topics`] holds their full names, resolved once from
//! the configured prefix; [`Subscription`] is what a service reads, one of
//! ours or a site's own topic named in configuration.

use crate::config::KafkaConfig;
use crate::schemas::AvroRecord;

pub use crate::record_types::Topic;

impl Topic {
    /// The topics a cluster's own writers fill: with
    /// `kafka.cluster_topics` each has a copy per cluster
    /// ([`Topics::bound`]).
    pub const INGRESS: [Topic; 5] = [
        Topic::Telemetry,
        Topic::Logs,
        Topic::Agent,
        Topic::Cluster,
        Topic::CommandResults,
    ];

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
    prefix: String,
}

impl Topics {
    pub fn new(kafka: &KafkaConfig) -> Topics {
        Topics {
            names: Topic::ALL.map(|t| kafka.topic(t.suffix())),
            prefix: kafka.topic_prefix.clone(),
        }
    }

    /// The names a writer of `cluster` uses: with `kafka.cluster_topics`
    /// its inputs ([`Topic::INGRESS`]) go to the cluster's own topics,
    /// which only its principal may write; otherwise the shared ones.
    pub fn bound(kafka: &KafkaConfig, cluster: &str) -> Topics {
        let mut topics = Topics::new(kafka);
        if kafka.cluster_topics {
            for topic in Topic::INGRESS {
                topics.names[topic.index()] = topics.ingress_name(cluster, topic);
            }
        }
        topics
    }

    /// `<prefix>in.<cluster>.<name>`: one cluster's copy of an ingress
    /// topic. All of a cluster's share the prefix `<prefix>in.<cluster>.`,
    /// which one prefixed ACL grants (`unicron acls`).
    pub fn ingress_name(&self, cluster: &str, topic: Topic) -> String {
        format!("{}{}", self.ingress_prefix(cluster), topic.suffix())
    }

    /// The prefix all of `cluster`'s ingress topics share.
    pub fn ingress_prefix(&self, cluster: &str) -> String {
        format!("{}in.{cluster}.", self.prefix)
    }

    /// The pattern every cluster's ingress topics match, as librdkafka
    /// subscribes to it.
    pub fn ingress_pattern(&self) -> String {
        let suffixes: Vec<String> = Topic::INGRESS
            .iter()
            .map(|t| regex_escape(t.suffix()))
            .collect();
        format!(
            "^{}in\\.[A-Za-z0-9_-]+\\.({})$",
            regex_escape(&self.prefix),
            suffixes.join("|")
        )
    }

    /// The cluster and topic of an ingress topic's full name.
    pub fn ingress_of(&self, name: &str) -> Option<(String, Topic)> {
        let rest = name.strip_prefix(&self.prefix)?.strip_prefix("in.")?;
        let (cluster, suffix) = rest.split_once('.')?;
        check_cluster_id(cluster).ok()?;
        let topic = Topic::INGRESS.into_iter().find(|t| t.suffix() == suffix)?;
        Some((cluster.to_string(), topic))
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

/// Whether `cluster` may name per-cluster topics: letters, digits, `_`
/// and `-` only. A dot would let the prefix of cluster `a` (`in.a.`) match
/// the topics of a cluster `a.b`.
pub fn check_cluster_id(cluster: &str) -> Result<(), String> {
    if cluster.is_empty() || cluster.len() > 100 {
        return Err(format!(
            "{cluster:?} must be 1 to 100 characters to name its own topics"
        ));
    }
    match cluster
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        Some(c) => Err(format!(
            "{cluster:?} has {c:?}: a cluster with its own topics has letters, digits, '_' and '-' only"
        )),
        None => Ok(()),
    }
}

/// A topic a service reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    Topic(Topic),
    /// Every topic matching a regular expression (starting with `^`), the
    /// ones created later included.
    Pattern(String),
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
            Subscription::Pattern(pattern) => pattern.clone(),
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
    fn a_bound_writer_names_its_clusters_ingress_topics_and_they_map_back() {
        let kafka = KafkaConfig {
            cluster_topics: true,
            ..KafkaConfig::default()
        };
        let bound = Topics::bound(&kafka, "site-a");
        assert_eq!(bound.name(Topic::Logs), "unicron.in.site-a.logs");
        assert_eq!(
            bound.of::<unicron_core::CommandResult>(),
            "unicron.in.site-a.command-results"
        );
        assert_eq!(
            bound.name(Topic::Commands),
            "unicron.commands",
            "read shared"
        );
        assert_eq!(
            Topics::bound(&KafkaConfig::default(), "site-a").name(Topic::Logs),
            "unicron.logs",
            "off by default"
        );
        let topics = Topics::new(&kafka);
        assert_eq!(
            topics.ingress_of("unicron.in.site-a.command-results"),
            Some(("site-a".to_string(), Topic::CommandResults))
        );
        for not_ingress in [
            "unicron.logs",
            "unicron.in.a.b.logs",
            "unicron.in.a.decisions",
            "other.in.a.logs",
        ] {
            assert_eq!(topics.ingress_of(not_ingress), None, "{not_ingress}");
        }
        let pattern = regex::Regex::new(&topics.ingress_pattern()).unwrap();
        assert!(pattern.is_match("unicron.in.site-a.telemetry"));
        assert!(!pattern.is_match("unicron.in.a.b.telemetry"));
        assert!(!pattern.is_match("unicron.in.a.failures"));
        assert!(!pattern.is_match("unicronXin.a.logs"));
    }

    #[test]
    fn cluster_ids_with_their_own_topics_have_no_dots() {
        assert!(check_cluster_id("gpu-east_1").is_ok());
        assert!(check_cluster_id("a.b").unwrap_err().contains("'.'"));
        assert!(check_cluster_id("").is_err());
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
