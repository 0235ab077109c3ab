//! `topology/topics.toml`: every topic, its key, record, partitions and
//! retention, and who reads and writes it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Deserialize;

use crate::error::CodecError;
use crate::schemas::RecordType;

/// The topology committed in `topology/topics.toml`.
pub const TOPICS_TOML: &str = include_str!("../../../topology/topics.toml");

/// One topic of the topology. `name` is without the configured prefix.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicSpec {
    pub name: String,
    pub key: String,
    pub record: String,
    pub partitions: i32,
    pub cleanup_policy: String,
    pub retention_ms: i64,
    pub producers: Vec<String>,
    pub consumers: Vec<String>,
    /// Topics in one group must have the same partition count (docs/design.md §3).
    #[serde(default)]
    pub co_partition_group: Option<String>,
    /// Kafka's `message.timestamp.type` for the topics `unicron topics
    /// create` makes; unset: the broker's default (`CreateTime`).
    #[serde(default)]
    pub timestamp_type: Option<String>,
}

/// Kafka's `retention.ms`: positive, or -1 for forever. The one rule for
/// the topology and for `[kafka.retention_ms]` overrides.
pub fn check_retention_ms(ms: i64) -> Result<(), &'static str> {
    if ms < -1 || ms == 0 {
        return Err("must be positive or -1 (forever)");
    }
    Ok(())
}

/// Partitions of a cluster's own topic.
pub const CLUSTER_TOPIC_PARTITIONS: i32 = 1;
/// Retention of a cluster's own topic: a day.
pub const CLUSTER_TOPIC_RETENTION_MS: i64 = 86_400_000;

/// All topics, in file order.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    #[serde(rename = "topic")]
    pub topics: Vec<TopicSpec>,
}

impl Topology {
    /// The committed topology.
    pub fn builtin() -> Topology {
        Topology::parse(TOPICS_TOML).expect("topology/topics.toml is validated by its tests")
    }

    pub fn parse(text: &str) -> Result<Topology, CodecError> {
        let topology: Topology =
            toml::from_str(text).map_err(|e| CodecError::Topology(e.message().to_string()))?;
        topology.validate()?;
        Ok(topology)
    }

    /// `cluster`'s own topic (`kafka.cluster_topics`), named without the
    /// prefix (`in.<cluster>`): every record its agents, executors and
    /// watchers write, each key marked with the shared topic it belongs on
    /// (`Topics::key`). `unicron ingress` passes them on within seconds
    /// and the shared topics keep them, so a day's retention covers an
    /// outage of the ingress; one partition carries a cluster's rate
    /// (thousands of records a second) in order. Five topics a cluster
    /// were thousands of partitions at hundreds of clusters, more than
    /// three brokers on two cores kept up with.
    pub fn of_cluster(&self, cluster: &str) -> Topology {
        let records: Vec<&str> = self
            .topics
            .iter()
            .filter(|s| crate::Topic::INGRESS.iter().any(|t| t.suffix() == s.name))
            .map(|s| s.record.as_str())
            .collect();
        Topology {
            topics: vec![TopicSpec {
                name: format!("in.{cluster}"),
                key: "shared topic/key".into(),
                record: records.join(", "),
                partitions: CLUSTER_TOPIC_PARTITIONS,
                cleanup_policy: "delete".into(),
                retention_ms: CLUSTER_TOPIC_RETENTION_MS,
                producers: vec![format!("agents, executors and watchers of {cluster}")],
                consumers: vec!["ingress".into()],
                co_partition_group: None,
                // The broker stamps each record: the ingress's budget runs
                // on time no writer sets.
                timestamp_type: Some("LogAppendTime".into()),
            }],
        }
    }

    pub fn get(&self, name: &str) -> Option<&TopicSpec> {
        self.topics.iter().find(|t| t.name == name)
    }

    fn validate(&self) -> Result<(), CodecError> {
        let mut names = BTreeSet::new();
        let mut groups: BTreeMap<&str, (&str, i32)> = BTreeMap::new();
        for t in &self.topics {
            let bad = |field: &str, why: String| {
                CodecError::Topology(format!("topic `{}`: {field}: {why}", t.name))
            };
            if !names.insert(t.name.as_str()) {
                return Err(bad("name", "defined twice".into()));
            }
            if RecordType::from_name(&t.record).is_none() {
                return Err(bad("record", format!("no schema named `{}`", t.record)));
            }
            if t.partitions < 1 {
                return Err(bad(
                    "partitions",
                    format!("{} is not positive", t.partitions),
                ));
            }
            if !matches!(
                t.cleanup_policy.as_str(),
                "delete" | "compact" | "compact,delete"
            ) {
                return Err(bad(
                    "cleanup_policy",
                    format!(
                        "`{}` is not delete, compact or compact,delete",
                        t.cleanup_policy
                    ),
                ));
            }
            check_retention_ms(t.retention_ms).map_err(|why| bad("retention_ms", why.into()))?;
            if let Some(group) = &t.co_partition_group {
                let (first, partitions) = *groups.entry(group).or_insert((&t.name, t.partitions));
                if partitions != t.partitions {
                    return Err(bad(
                        "partitions",
                        format!(
                            "{} differs from {partitions} of `{first}` in co-partition group `{group}`",
                            t.partitions
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The topology as an aligned text table, topic names with `prefix`.
    pub fn render_table(&self, prefix: &str) -> String {
        let header = [
            "topic",
            "key",
            "record",
            "parts",
            "cleanup",
            "retention",
            "producers",
            "consumers",
        ];
        let rows: Vec<[String; 8]> = self
            .topics
            .iter()
            .map(|t| {
                [
                    format!("{prefix}{}", t.name),
                    t.key.clone(),
                    t.record.clone(),
                    t.partitions.to_string(),
                    t.cleanup_policy.clone(),
                    retention_text(t.retention_ms),
                    t.producers.join(","),
                    t.consumers.join(","),
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let mut out = String::new();
        let mut line = |cells: Vec<&str>| {
            let text: Vec<String> = cells
                .iter()
                .zip(widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            let _ = writeln!(out, "{}", text.join("  ").trim_end());
        };
        line(header.to_vec());
        for row in &rows {
            line(row.iter().map(String::as_str).collect());
        }
        out
    }
}

fn retention_text(ms: i64) -> String {
    const HOUR: i64 = 3_600_000;
    match ms {
        -1 => "forever".to_string(),
        ms if ms % (24 * HOUR) == 0 => format!("{}d", ms / (24 * HOUR)),
        ms if ms % HOUR == 0 => format!("{}h", ms / HOUR),
        ms => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_topology_has_every_design_topic() {
        let t = Topology::builtin();
        let names: Vec<&str> = t.topics.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "telemetry",
                "logs",
                "agent",
                "failures",
                "cluster",
                "decisions",
                "commands",
                "command-results",
                "dlq",
                "planner-checkpoints",
                "detector-rounds"
            ]
        );
        for spec in &t.topics {
            assert!(
                RecordType::from_name(&spec.record).is_some(),
                "{}",
                spec.name
            );
        }
    }

    #[test]
    fn planner_partitions_are_co_partitioned() {
        let t = Topology::builtin();
        let parts: Vec<i32> = [
            "failures",
            "cluster",
            "command-results",
            "decisions",
            "planner-checkpoints",
        ]
        .iter()
        .map(|n| {
            let spec = t.get(n).unwrap();
            assert_eq!(
                spec.co_partition_group.as_deref(),
                Some("planner-partitions")
            );
            spec.partitions
        })
        .collect();
        assert!(parts.windows(2).all(|w| w[0] == w[1]), "{parts:?}");
    }

    #[test]
    fn co_partition_mismatch_is_rejected_naming_the_topic() {
        let mut t = Topology::builtin();
        t.topics
            .iter_mut()
            .find(|t| t.name == "command-results")
            .unwrap()
            .partitions += 1;
        let err = t.validate().unwrap_err().to_string();
        assert!(
            err.starts_with("topology: topic `command-results`: partitions:")
                && err.contains("co-partition group `planner-partitions`"),
            "{err}"
        );
    }

    #[test]
    fn unknown_record_is_rejected() {
        let text = TOPICS_TOML.replace("record = \"DeadLetter\"", "record = \"Nope\"");
        let err = Topology::parse(&text).unwrap_err().to_string();
        assert_eq!(err, "topology: topic `dlq`: record: no schema named `Nope`");
    }

    #[test]
    fn table_lists_every_topic_with_prefix() {
        let table = Topology::builtin().render_table("acme.");
        assert!(table.lines().next().unwrap().starts_with("topic"));
        assert!(table.contains("acme.command-results"));
        assert_eq!(table.lines().count(), 12);
    }
}
