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
    /// A writer of one cluster with `kafka.cluster_topics`: its inputs go
    /// to the cluster's own topic, keys marked with their record's topic.
    bound: bool,
}

/// Between the record's topic name and its key, in a key on a cluster's
/// own topic (`logs/node-7`).
const KEY_SEPARATOR: u8 = b'/';

impl Topics {
    pub fn new(kafka: &KafkaConfig) -> Topics {
        Topics {
            names: Topic::ALL.map(|t| kafka.topic(t.suffix())),
            prefix: kafka.topic_prefix.clone(),
            bound: false,
        }
    }

    /// The names a writer of `cluster` uses: with `kafka.cluster_topics`
    /// all its inputs ([`Topic::INGRESS`]) go to the cluster's own topic,
    /// which only its principals may write, each record's key marked with
    /// the shared topic it belongs on ([`Topics::key`]); otherwise the
    /// shared topics.
    pub fn bound(kafka: &KafkaConfig, cluster: &str) -> Topics {
        let mut topics = Topics::new(kafka);
        if kafka.cluster_topics {
            let own = topics.ingress_name(cluster);
            for topic in Topic::INGRESS {
                topics.names[topic.index()] = own.clone();
            }
            topics.bound = true;
        }
        topics
    }

    /// The key a record of `topic` is written with: `key` itself, or on a
    /// cluster's own topic `<topic name>/<key>`, which tells the ingress
    /// which shared topic (and record type) it belongs to. One topic a
    /// cluster rather than five: hundreds of clusters would otherwise be
    /// thousands of partitions.
    pub fn key(&self, topic: Topic, key: &[u8]) -> Vec<u8> {
        if !(self.bound && Topic::INGRESS.contains(&topic)) {
            return key.to_vec();
        }
        let mut marked = Vec::with_capacity(topic.suffix().len() + 1 + key.len());
        marked.extend_from_slice(topic.suffix().as_bytes());
        marked.push(KEY_SEPARATOR);
        marked.extend_from_slice(key);
        marked
    }

    /// [`key`](Topics::key) of a text key.
    pub fn key_str(&self, topic: Topic, key: &str) -> String {
        if !(self.bound && Topic::INGRESS.contains(&topic)) {
            return key.to_string();
        }
        format!("{}{}{key}", topic.suffix(), KEY_SEPARATOR as char)
    }

    /// The topic and the original key of a key on a cluster's own topic.
    pub fn split_key(key: &[u8]) -> Option<(Topic, &[u8])> {
        let at = key.iter().position(|b| *b == KEY_SEPARATOR)?;
        let (name, rest) = (&key[..at], &key[at + 1..]);
        let topic = Topic::INGRESS
            .into_iter()
            .find(|t| t.suffix().as_bytes() == name)?;
        Some((topic, rest))
    }

    /// `<prefix>in.<cluster>`: one cluster's own topic, which a literal
    /// ACL grants to that cluster's principals alone (`unicron acls`).
    pub fn ingress_name(&self, cluster: &str) -> String {
        format!("{}in.{cluster}", self.prefix)
    }

    /// The prefix every cluster's own topic starts with (the ingress's
    /// read ACL).
    pub fn ingress_prefix(&self) -> String {
        format!("{}in.", self.prefix)
    }

    /// The pattern every cluster's own topic matches, as librdkafka
    /// subscribes to it.
    pub fn ingress_pattern(&self) -> String {
        format!("^{}in\\.[A-Za-z0-9_-]+$", regex_escape(&self.prefix))
    }

    /// The cluster of a cluster's own topic, by its full name.
    pub fn ingress_of(&self, name: &str) -> Option<String> {
        let cluster = name.strip_prefix(&self.prefix)?.strip_prefix("in.")?;
        check_cluster_id(cluster).ok()?;
        Some(cluster.to_string())
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
    fn a_bound_writer_names_its_clusters_topic_and_marks_keys() {
        let kafka = KafkaConfig {
            cluster_topics: true,
            ..KafkaConfig::default()
        };
        let bound = Topics::bound(&kafka, "site-a");
        assert_eq!(bound.name(Topic::Logs), "unicron.in.site-a");
        assert_eq!(
            bound.of::<unicron_core::CommandResult>(),
            "unicron.in.site-a"
        );
        assert_eq!(bound.key(Topic::Logs, b"n7"), b"logs/n7");
        assert_eq!(
            Topics::split_key(b"command-results/site-a"),
            Some((Topic::CommandResults, &b"site-a"[..]))
        );
        assert_eq!(Topics::split_key(b"decisions/x"), None);
        assert_eq!(Topics::split_key(b"n7"), None);
        assert_eq!(
            bound.name(Topic::Commands),
            "unicron.commands",
            "read shared"
        );
        assert_eq!(bound.key(Topic::Commands, b"c"), b"c");
        let unbound = Topics::bound(&KafkaConfig::default(), "site-a");
        assert_eq!(unbound.name(Topic::Logs), "unicron.logs", "off by default");
        assert_eq!(unbound.key(Topic::Logs, b"n7"), b"n7");
        let topics = Topics::new(&kafka);
        assert_eq!(
            topics.ingress_of("unicron.in.site-a"),
            Some("site-a".into())
        );
        for not_ingress in ["unicron.logs", "unicron.in.a.b", "other.in.a"] {
            assert_eq!(topics.ingress_of(not_ingress), None, "{not_ingress}");
        }
        let pattern = regex::Regex::new(&topics.ingress_pattern()).unwrap();
        assert!(pattern.is_match("unicron.in.site-a"));
        assert!(!pattern.is_match("unicron.in.a.b"));
        assert!(!pattern.is_match("unicronXin.a"));
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
