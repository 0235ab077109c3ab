//! The one rule of the ingress: a record on a cluster's own topic speaks
//! for that cluster only. A function of the topic's name and the record's
//! key and bytes, nothing else, so a second look at the same record gives
//! the same verdict.

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
    /// It speaks for its topic's cluster: pass it on to `to` with `key`
    /// (its key without the mark of its topic).
    Pass { to: String, key: Vec<u8> },
    /// It names another cluster, or does not decode: dead-letter it with
    /// `reason`.
    Refuse { reason: String },
}

/// What to do with a record of `key` and `payload`, read from the topic
/// named `topic`. `None`: not a cluster's own topic (a subscription
/// matched something else).
pub fn check(topics: &Topics, topic: &str, key: &[u8], payload: &[u8]) -> Option<Checked> {
    let cluster = topics.ingress_of(topic)?;
    let Some((kind, key)) = Topics::split_key(key) else {
        return Some(Checked {
            cluster,
            verdict: Verdict::Refuse {
                reason: format!(
                    "undecodable: the key {:?} does not name the topic the record belongs on (telemetry/, logs/, agent/, cluster/, command-results/)",
                    String::from_utf8_lossy(&key[..key.len().min(64)])
                ),
            },
        });
    };
    let verdict = match claimed_cluster(kind, payload) {
        Ok(claimed) if claimed == cluster => Verdict::Pass {
            to: topics.name(kind).to_string(),
            key: key.to_vec(),
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
            check(&topics, "unicron.in.a", b"cluster/a", &node_down("a", "n1")),
            Some(Checked {
                cluster: "a".into(),
                verdict: Verdict::Pass {
                    to: "unicron.cluster".into(),
                    key: b"a".to_vec(),
                }
            })
        );
        let Some(Checked {
            cluster,
            verdict: Verdict::Refuse { reason },
        }) = check(&topics, "unicron.in.a", b"cluster/b", &node_down("b", "n1"))
        else {
            panic!("b's node_down on a's topic passed");
        };
        assert_eq!(cluster, "a", "a's budget pays for it");
        assert!(reason.starts_with("foreign_cluster: "), "{reason}");
        assert!(reason.contains("\"b\"") && reason.contains("unicron.in.a"));
        // Bytes of another type, or a key that names no topic, are refused.
        let junk = b"\x00\x00\x00\x00\x01junk".to_vec();
        for (key, payload) in [
            (&b"cluster/a"[..], junk),
            (&b"a"[..], node_down("a", "n1")),
            (&b"decisions/a"[..], node_down("a", "n1")),
        ] {
            assert!(
                matches!(
                    check(&topics, "unicron.in.a", key, &payload),
                    Some(Checked {
                        verdict: Verdict::Refuse { .. },
                        ..
                    })
                ),
                "{key:?}"
            );
        }
        assert_eq!(
            check(
                &topics,
                "unicron.cluster",
                b"cluster/a",
                &node_down("a", "n1")
            ),
            None
        );
    }
}
