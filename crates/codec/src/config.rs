//! Kafka settings shared by every service.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The `[kafka]` section of the configuration.
///
/// Keys other than the ones below are librdkafka properties and are passed
/// through verbatim, so TLS and SASL work without code here: write
/// `security.protocol = "SASL_SSL"` (a dotted TOML key) or set
/// `UNICRON_KAFKA__SASL__USERNAME`. librdkafka rejects unknown properties
/// with a message naming them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct KafkaConfig {
    /// Bootstrap servers (`host:port,...`). Unset means the embedded broker.
    pub brokers: Option<String>,
    /// `client.id` of every client this process makes.
    pub client_id: String,
    /// Prefix of every unicron topic name (docs/design.md §3).
    pub topic_prefix: String,
    /// Records larger than this are dead-lettered without being decoded.
    pub max_record_bytes: usize,
    /// Bytes of a dead-lettered payload kept in the dead letter.
    pub dlq_payload_bytes: usize,
    /// `retention.ms` by topic (name without prefix) for topics that
    /// `unicron topics create` creates, over `topology/topics.toml`'s.
    /// Also the way round brokers that do not honour `-1` (forever).
    pub retention_ms: BTreeMap<String, i64>,
    /// Replicas of every topic `unicron topics create` creates. 3 keeps
    /// every acknowledged record through the loss of one broker (with
    /// `min_insync_replicas` 2 and the producers' `acks=all`); a smaller
    /// cluster must lower it, or creating topics fails saying so.
    pub replication_factor: i32,
    /// `min.insync.replicas` of the topics it creates; unset: one less
    /// than `replication_factor` (at least 1).
    pub min_insync_replicas: Option<i32>,
    /// Each cluster's writers (agents, executors, watchers) write their
    /// inputs to a topic of their own, `<prefix>in.<cluster>`, which
    /// a principal of that cluster alone may be allowed to write;
    /// `unicron ingress` passes on what speaks for the topic's cluster and
    /// dead-letters the rest (docs/operations.md, "Tenants").
    pub cluster_topics: bool,
    /// librdkafka properties, passed through.
    #[serde(flatten)]
    pub properties: BTreeMap<String, PropertyValue>,
}

/// A librdkafka property value as written in TOML: scalars, or a nested
/// table when the key was written dotted (`ssl.ca.location = ...`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PropertyValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
    Table(BTreeMap<String, PropertyValue>),
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: None,
            client_id: "unicron".to_string(),
            topic_prefix: "unicron.".to_string(),
            max_record_bytes: 1024 * 1024,
            dlq_payload_bytes: 64 * 1024,
            retention_ms: BTreeMap::new(),
            replication_factor: 3,
            min_insync_replicas: None,
            cluster_topics: false,
            properties: BTreeMap::new(),
        }
    }
}

impl KafkaConfig {
    /// Full name of a topic of the topology (`telemetry` → `unicron.telemetry`).
    pub fn topic(&self, name: &str) -> String {
        format!("{}{}", self.topic_prefix, name)
    }

    /// The `min.insync.replicas` of new topics.
    pub fn min_insync_replicas(&self) -> i32 {
        self.min_insync_replicas
            .unwrap_or((self.replication_factor - 1).max(1))
    }

    /// `replication_factor` and `min_insync_replicas` against each other:
    /// the field at fault and why.
    pub fn check_replication(&self) -> Result<(), (&'static str, String)> {
        let (rf, min_isr) = (self.replication_factor, self.min_insync_replicas());
        if rf < 1 {
            return Err((
                "kafka.replication_factor",
                format!("{rf} is not a replica count (1 or more)"),
            ));
        }
        if min_isr < 1 || min_isr > rf {
            return Err((
                "kafka.min_insync_replicas",
                format!("{min_isr} must be between 1 and kafka.replication_factor ({rf})"),
            ));
        }
        Ok(())
    }

    /// librdkafka properties as flat `key = value` strings, sorted by key.
    pub fn librdkafka_properties(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        flatten("", &self.properties, &mut out);
        out
    }
}

fn flatten(prefix: &str, table: &BTreeMap<String, PropertyValue>, out: &mut Vec<(String, String)>) {
    for (key, value) in table {
        let key = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            PropertyValue::Bool(b) => out.push((key, b.to_string())),
            PropertyValue::Int(i) => out.push((key, i.to_string())),
            PropertyValue::Float(f) => out.push((key, f.to_string())),
            PropertyValue::Text(s) => out.push((key, s.clone())),
            PropertyValue::Table(inner) => flatten(&key, inner, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_toml_keys_become_librdkafka_properties() {
        let config: KafkaConfig = toml::from_str(
            r#"
            brokers = "k1:9093"
            security.protocol = "SASL_SSL"
            sasl.mechanism = "SCRAM-SHA-512"
            "socket.timeout.ms" = 1000
            enable.ssl.certificate.verification = false
            "#,
        )
        .unwrap();
        assert_eq!(config.brokers.as_deref(), Some("k1:9093"));
        assert_eq!(config.topic_prefix, "unicron.");
        assert_eq!(
            config.librdkafka_properties(),
            vec![
                ("enable.ssl.certificate.verification".into(), "false".into()),
                ("sasl.mechanism".into(), "SCRAM-SHA-512".into()),
                ("security.protocol".into(), "SASL_SSL".into()),
                ("socket.timeout.ms".into(), "1000".into()),
            ]
        );
    }
}
