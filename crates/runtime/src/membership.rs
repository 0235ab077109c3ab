//! Consumer-group membership as a service sees it: which partitions it
//! holds, a generation bumped at every assign or revoke (in-memory state
//! may be stale after one), lost broker connections, and, for services
//! that keep their consumed offsets with their state, where each newly
//! assigned partition starts.
//!
//! Starting from stored offsets (docs/design.md §4): when the group assigns
//! a partition, reading starts at the offset stored with the state, or at
//! the beginning to rebuild state the service does not have, not at the
//! group's committed offset.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};

/// Looks up the next offset a service stored for a partition.
pub type StoredOffset = Box<dyn Fn(&str, i32) -> Option<i64> + Send + Sync>;

/// The consumer context of every service (cheap to clone: shared counters).
#[derive(Clone, Default)]
pub struct Membership {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// The service whose membership this is, for [`unicron_bus::metrics::joined`].
    service: &'static str,
    /// `Some`: assigned partitions start at the stored offset.
    stored: Option<StoredOffset>,
    generation: AtomicU64,
    connection_losses: AtomicU64,
    assigned: Mutex<BTreeSet<(String, i32)>>,
}

impl Membership {
    /// Assigned partitions start at the group's committed offsets.
    pub fn from_group_offsets(service: &'static str) -> Membership {
        Membership {
            shared: Arc::new(Shared {
                service,
                ..Shared::default()
            }),
        }
    }

    /// Assigned partitions start where `stored` says (the beginning when
    /// it has nothing).
    pub fn from_stored_offsets(service: &'static str, stored: StoredOffset) -> Membership {
        Membership {
            shared: Arc::new(Shared {
                service,
                stored: Some(stored),
                ..Shared::default()
            }),
        }
    }

    /// Bumped after every assign or revoke.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// How many times librdkafka reported a broker connection lost or all
    /// brokers down; a change means reading was (or is) interrupted.
    pub fn connection_losses(&self) -> u64 {
        self.shared.connection_losses.load(Ordering::Acquire)
    }

    /// The partitions currently assigned, in order.
    pub fn assigned(&self) -> Vec<(String, i32)> {
        let assigned = self
            .shared
            .assigned
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        assigned.iter().cloned().collect()
    }

    /// Whether `partition` of `topic` is currently assigned.
    pub fn holds(&self, topic: &str, partition: i32) -> bool {
        let assigned = self
            .shared
            .assigned
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        assigned.contains(&(topic.to_string(), partition))
    }

    fn set_assigned(&self, partitions: BTreeSet<(String, i32)>) {
        if !self.shared.service.is_empty() {
            unicron_bus::metrics::set_joined(self.shared.service, !partitions.is_empty());
        }
        *self
            .shared
            .assigned
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = partitions;
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
    }

    fn assign(&self, consumer: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let partitions: BTreeSet<(String, i32)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        if let Some(stored) = &self.shared.stored {
            for (topic, partition) in &partitions {
                let next = stored(topic, *partition);
                let start = next.map_or(Offset::Beginning, Offset::Offset);
                if let Err(e) = tpl.set_partition_offset(topic, *partition, start) {
                    tracing::error!(%topic, partition, error = %e, "cannot set start offset");
                }
                tracing::debug!(%topic, partition, ?next, "partition assigned");
            }
        }
        self.set_assigned(partitions);
        if let Err(e) = consumer.assign(tpl) {
            tracing::error!(error = %e, "assign failed");
        }
    }
}

impl ClientContext for Membership {
    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(
            error.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::BrokerTransportFailure
                    | RDKafkaErrorCode::AllBrokersDown
                    | RDKafkaErrorCode::Resolve
            )
        ) {
            self.shared.connection_losses.fetch_add(1, Ordering::AcqRel);
        }
        if matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic)
        ) {
            // A pattern-subscribed input nobody produces to yet: normal.
            tracing::info!(%error, reason, "librdkafka");
        } else {
            tracing::warn!(%error, reason, "librdkafka");
        }
    }
}

impl ConsumerContext for Membership {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => self.assign(consumer, tpl),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.set_assigned(BTreeSet::new());
                if let Err(e) = consumer.unassign() {
                    tracing::error!(error = %e, "unassign failed");
                }
            }
            other => tracing::error!(error = ?other, "rebalance error"),
        }
    }
}
