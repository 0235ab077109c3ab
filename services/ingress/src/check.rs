//! The one rule of the ingress: a record on a cluster's own topic speaks
//! for that cluster only. A function of the topic's name and the record's
//! bytes, nothing else, so a second look at the same record gives the same
//! verdict.

use unicron_codec::formats::FOREIGN_CLUSTER;
use unicron_codec::{AvroCodec, DecodeError, Topic, Topics};
use unicron_core::{AgentEvent, ClusterEvent, CommandResult, LogRecord, TelemetryBatch};

/// A record of a cluster's own topic, looked at: the topic's cluster
/// (whose budget it spends, whatever it says) and the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub cluster: String,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It speaks for its topic's cluster: pass it on to `to`.
    Pass { to: String },
    /// It names another cluster, or does not decode: dead-letter it with
    /// `reason`.
    Refuse { reason: String },
}

/// What to do with `payload`, read from the topic named `topic`. `None`:
/// not a cluster's own topic (a subscription matched something else).
pub fn check(topics: &Topics, topic: &str, payload: &[u8]) -> Option<Checked> {
    let (cluster, kind) = topics.ingress_of(topic)?;
    let verdict = match claimed_cluster(kind, payload) {
        Ok(claimed) if claimed == cluster => Verdict::Pass {
            to: topics.name(kind).to_string(),
        },
        Ok(claimed) => Verdict::Refuse {
            reason: format!(
                "{FOREIGN_CLUSTER}: a record of cluster {claimed:?} on {topic}, which only cluster {cluster:?} writes"
            ),
        },
        Err(error) => Verdict::Refuse {
            reason: error.to_string(),
        },
    };
    Some(Checked { cluster, verdict })
}

/// The cluster a record says it is about; the whole record is decoded, so
/// one that would not decode downstream is refused here.
fn claimed_cluster(kind: Topic, payload: &[u8]) -> Result<String, DecodeError> {
    Ok(match kind {
        Topic::Telemetry => {
            AvroCodec::<TelemetryBatch>::default()
                .decode(payload)?
                .cluster
        }
        Topic::Logs => AvroCodec::<LogRecord>::default().decode(payload)?.cluster,
        Topic::Agent => AvroCodec::<AgentEvent>::default().decode(payload)?.cluster,
        Topic::Cluster => {
            AvroCodec::<ClusterEvent>::default()
                .decode(payload)?
                .cluster
        }
        Topic::CommandResults => {
            AvroCodec::<CommandResult>::default()
                .decode(payload)?
                .cluster
        }
        other => {
            return Err(DecodeError::Invalid {
                record: other.record().name(),
                reason: "not a topic a cluster writes".into(),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use unicron_codec::KafkaConfig;
    use unicron_core::ClusterEventKind;

    fn node_down(cluster: &str, node: &str) -> Vec<u8> {
        let mut event = ClusterEvent::new(cluster, 1_767_225_600_000, ClusterEventKind::NodeDown);
        event.node = Some(node.into());
        AvroCodec::<ClusterEvent>::default().encode(&event).unwrap()
    }

    #[test]
    fn a_record_passes_to_the_shared_topic_only_for_its_own_cluster() {
        let topics = Topics::new(&KafkaConfig {
            cluster_topics: true,
            ..KafkaConfig::default()
        });
        assert_eq!(
            check(&topics, "unicron.in.a.cluster", &node_down("a", "n1")),
            Some(Checked {
                cluster: "a".into(),
                verdict: Verdict::Pass {
                    to: "unicron.cluster".into()
                }
            })
        );
        let Some(Checked {
            cluster,
            verdict: Verdict::Refuse { reason },
        }) = check(&topics, "unicron.in.a.cluster", &node_down("b", "n1"))
        else {
            panic!("b's node_down on a's topic passed");
        };
        assert_eq!(cluster, "a", "a's budget pays for it");
        assert!(reason.starts_with("foreign_cluster: "), "{reason}");
        assert!(reason.contains("\"b\"") && reason.contains("unicron.in.a.cluster"));
        // Bytes of another type on the cluster topic do not decode.
        assert!(matches!(
            check(&topics, "unicron.in.a.cluster", b"\x00\x00\x00\x00\x01junk"),
            Some(Checked {
                verdict: Verdict::Refuse { .. },
                ..
            })
        ));
        assert_eq!(
            check(&topics, "unicron.cluster", &node_down("a", "n1")),
            None
        );
    }
}
