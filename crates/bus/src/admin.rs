//! Topic creation on a real Kafka through the Admin API.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::types::RDKafkaErrorCode;

use crate::error::BusError;
use unicron_codec::config::KafkaConfig;
use unicron_codec::topology::{TopicSpec, Topology};

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

/// One line of `unicron topics create`'s report. `partitions` and
/// `replicas` are what the topic has: for an existing topic they may differ
/// from the topology and the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicReport {
    pub name: String,
    pub partitions: i32,
    pub replicas: i32,
    pub status: TopicStatus,
}

/// What the cluster's metadata says.
struct ClusterView {
    brokers: usize,
    /// Topic name → (partitions, replicas of its first partition).
    topics: BTreeMap<String, (i32, i32)>,
}

/// Checks `replication_factor` and `min_insync_replicas` against each
/// other and against the cluster's size, naming the field at fault.
fn check_replication(config: &KafkaConfig, brokers: usize) -> Result<(), BusError> {
    config
        .check_replication()
        .map_err(|(field, reason)| BusError::Setting { field, reason })?;
    let rf = config.replication_factor;
    if brokers < rf as usize {
        return Err(BusError::Setting {
            field: "kafka.replication_factor",
            reason: format!(
                "{rf} replicas need {rf} brokers and the cluster has {brokers}; \
                 lower kafka.replication_factor for a cluster this small"
            ),
        });
    }
    Ok(())
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

/// With `kafka.cluster_topics`, creates `cluster`'s own ingress topics
/// that are missing: every writer of a cluster calls it before it writes
/// (its principal may create topics under the cluster's prefix). Without,
/// nothing.
pub async fn ensure_cluster_topics(
    config: &KafkaConfig,
    brokers: &str,
    cluster: &str,
) -> Result<Vec<TopicReport>, BusError> {
    if !config.cluster_topics {
        return Ok(Vec::new());
    }
    unicron_codec::check_cluster_id(cluster).map_err(|reason| BusError::Setting {
        field: "cluster",
        reason,
    })?;
    ensure_topics(config, brokers, &Topology::builtin().of_cluster(cluster)).await
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
    let client_config = crate::client::client_config(config, brokers);
    let cluster = cluster_view(client_config.clone()).await?;
    let existing = &cluster.topics;

    let mut reports = Vec::with_capacity(topology.topics.len());
    let mut missing = Vec::new();
    for spec in &topology.topics {
        let name = config.topic(&spec.name);
        match existing.get(&name) {
            Some(&(partitions, replicas)) => reports.push(TopicReport {
                name,
                partitions,
                replicas,
                status: TopicStatus::Exists,
            }),
            None => missing.push((name, spec)),
        }
    }
    if missing.is_empty() {
        return Ok(reports);
    }
    check_replication(config, cluster.brokers)?;
    let min_isr = config.min_insync_replicas().to_string();

    let retention: Vec<String> = missing
        .iter()
        .map(|(_, s)| retention_ms(config, s).to_string())
        .collect();
    let new_topics: Vec<NewTopic<'_>> = missing
        .iter()
        .zip(&retention)
        .map(|((name, spec), retention)| {
            let topic = NewTopic::new(
                name,
                spec.partitions,
                TopicReplication::Fixed(config.replication_factor),
            )
            .set("cleanup.policy", &spec.cleanup_policy)
            .set("retention.ms", retention)
            .set("min.insync.replicas", &min_isr);
            match &spec.timestamp_type {
                Some(kind) => topic.set("message.timestamp.type", kind),
                None => topic,
            }
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
            replicas: config.replication_factor,
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

/// The brokers and topics in the cluster's metadata. The metadata call
/// blocks, so it runs off the async workers.
async fn cluster_view(config: ClientConfig) -> Result<ClusterView, BusError> {
    tokio::task::spawn_blocking(move || {
        let client: BaseConsumer = config.create()?;
        let metadata = client.fetch_metadata(None, METADATA_TIMEOUT)?;
        let topics = metadata
            .topics()
            .iter()
            .map(|t| {
                let replicas = t.partitions().first().map_or(0, |p| p.replicas().len());
                (
                    t.name().to_string(),
                    (t.partitions().len() as i32, replicas as i32),
                )
            })
            .collect();
        Ok(ClusterView {
            brokers: metadata.brokers().len(),
            topics,
        })
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

    #[test]
    fn replication_is_checked_against_the_cluster_and_itself() {
        let mut config = KafkaConfig::default();
        assert_eq!(config.min_insync_replicas(), 2);
        assert!(check_replication(&config, 3).is_ok());
        let small = check_replication(&config, 1).unwrap_err().to_string();
        assert!(
            small.starts_with("kafka.replication_factor: 3 replicas need 3 brokers"),
            "{small}"
        );
        config.replication_factor = 1;
        assert_eq!(config.min_insync_replicas(), 1);
        assert!(check_replication(&config, 1).is_ok());
        config.min_insync_replicas = Some(2);
        let isr = check_replication(&config, 1).unwrap_err().to_string();
        assert!(
            isr.starts_with("kafka.min_insync_replicas: 2 must be"),
            "{isr}"
        );
        config.replication_factor = 0;
        let zero = check_replication(&config, 1).unwrap_err().to_string();
        assert!(zero.starts_with("kafka.replication_factor: 0"), "{zero}");
    }
}
