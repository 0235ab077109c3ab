//! Topic creation on a real Kafka through the Admin API.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::types::RDKafkaErrorCode;

use crate::config::KafkaConfig;
use crate::error::BusError;
use crate::topology::{TopicSpec, Topology};

/// How long the first contact with the cluster may take: a broker that has
/// not answered by then is reported, not waited for.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the cluster may take to create the missing topics.
const CREATE_TIMEOUT: Duration = Duration::from_secs(10);

/// What `ensure` found or did for one topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicStatus {
    Created,
    Exists,
}

impl fmt::Display for TopicStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TopicStatus::Created => "created",
            TopicStatus::Exists => "exists",
        })
    }
}

/// One line of `unicron topics create`'s report. `partitions` is what the
/// topic has: for an existing topic that may differ from the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicReport {
    pub name: String,
    pub partitions: i32,
    pub status: TopicStatus,
}

/// The `retention.ms` a new topic gets: `[kafka.retention_ms]`'s, else the
/// topology's.
fn retention_ms(config: &KafkaConfig, spec: &TopicSpec) -> i64 {
    config
        .retention_ms
        .get(&spec.name)
        .copied()
        .unwrap_or(spec.retention_ms)
}

/// Creates the topics of `topology` that are missing on the cluster at
/// `brokers`. Idempotent: existing topics are reported as such. Asks the
/// cluster's metadata first, so against a broker without CreateTopics (the
/// embedded one) it still succeeds when nothing is missing.
pub async fn ensure_topics(
    config: &KafkaConfig,
    brokers: &str,
    topology: &Topology,
) -> Result<Vec<TopicReport>, BusError> {
    let client_config = config.client_config(brokers);
    let existing = existing_topics(client_config.clone()).await?;

    let mut reports = Vec::with_capacity(topology.topics.len());
    let mut missing = Vec::new();
    for spec in &topology.topics {
        let name = config.topic(&spec.name);
        match existing.get(&name) {
            Some(&partitions) => reports.push(TopicReport {
                name,
                partitions,
                status: TopicStatus::Exists,
            }),
            None => missing.push((name, spec)),
        }
    }
    if missing.is_empty() {
        return Ok(reports);
    }

    let retention: Vec<String> = missing
        .iter()
        .map(|(_, s)| retention_ms(config, s).to_string())
        .collect();
    let new_topics: Vec<NewTopic<'_>> = missing
        .iter()
        .zip(&retention)
        .map(|((name, spec), retention)| {
            // -1: the broker's default replication factor (KIP-464).
            NewTopic::new(name, spec.partitions, TopicReplication::Fixed(-1))
                .set("cleanup.policy", &spec.cleanup_policy)
                .set("retention.ms", retention)
        })
        .collect();
    let admin: AdminClient<DefaultClientContext> = client_config.create()?;
    let options = AdminOptions::new().operation_timeout(Some(CREATE_TIMEOUT));
    let results = admin.create_topics(new_topics.iter(), &options).await?;
    for ((name, spec), result) in missing.iter().zip(results) {
        let status = match result {
            Ok(_) => TopicStatus::Created,
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => TopicStatus::Exists,
            Err((_, code)) => {
                return Err(BusError::Topic {
                    topic: name.clone(),
                    reason: code.to_string(),
                });
            }
        };
        reports.push(TopicReport {
            name: name.clone(),
            partitions: spec.partitions,
            status,
        });
    }
    let order = |r: &TopicReport| {
        topology
            .topics
            .iter()
            .position(|t| config.topic(&t.name) == r.name)
    };
    reports.sort_by_key(order);
    Ok(reports)
}

/// Topic name → partition count, from the cluster's metadata. The metadata
/// call blocks, so it runs off the async workers.
async fn existing_topics(config: ClientConfig) -> Result<BTreeMap<String, i32>, BusError> {
    tokio::task::spawn_blocking(move || {
        let client: BaseConsumer = config.create()?;
        let metadata = client.fetch_metadata(None, METADATA_TIMEOUT)?;
        Ok(metadata
            .topics()
            .iter()
            .map(|t| (t.name().to_string(), t.partitions().len() as i32))
            .collect())
    })
    .await
    .map_err(|e| BusError::Internal(format!("metadata task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_retention_overrides_the_topology() {
        let topology = Topology::builtin();
        let cluster = topology.get("cluster").unwrap();
        let decisions = topology.get("decisions").unwrap();
        let mut config = KafkaConfig::default();
        assert_eq!(retention_ms(&config, cluster), -1);
        config
            .retention_ms
            .insert("cluster".into(), 3_153_600_000_000);
        assert_eq!(retention_ms(&config, cluster), 3_153_600_000_000);
        assert_eq!(retention_ms(&config, decisions), decisions.retention_ms);
    }
}
