//! Consumer-group membership for stateful services (docs/design.md §4): when the
//! group assigns a partition, reading starts at the offset the service
//! stored with its state (or the beginning, to rebuild state it does not
//! have), not at the group's committed offset. The group's committed offset
//! is remembered as `publish_from`: records below it were handled, and
//! their outputs published, by the previous owner, so a rebuild applies
//! them without publishing again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;

/// Looks up the next offset a service stored for a partition.
pub type StoredOffset = Box<dyn Fn(&str, i32) -> Option<i64> + Send + Sync>;

/// What the service loop needs to know about the current assignment.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Bumped at every assign or revoke: in-memory state may be stale.
    pub generation: u64,
    /// Per assigned (topic, partition): the next offset stored with the
    /// service's state, where reading starts (`None`: from the beginning).
    pub partitions: BTreeMap<(String, i32), Option<i64>>,
}

/// The consumer context that steers where assigned partitions start.
pub struct ResumeContext {
    stored: StoredOffset,
    assignment: Arc<Mutex<Assignment>>,
}

impl ResumeContext {
    pub fn new(stored: StoredOffset) -> (ResumeContext, Arc<Mutex<Assignment>>) {
        let assignment = Arc::new(Mutex::new(Assignment::default()));
        (
            ResumeContext {
                stored,
                assignment: assignment.clone(),
            },
            assignment,
        )
    }

    fn assign(&self, consumer: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let partitions: Vec<(String, i32)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        let mut assignment = self.assignment.lock().unwrap_or_else(|e| e.into_inner());
        assignment.generation += 1;
        assignment.partitions.clear();
        for (topic, partition) in partitions {
            let stored = (self.stored)(&topic, partition);
            let start = stored.map_or(Offset::Beginning, Offset::Offset);
            if let Err(e) = tpl.set_partition_offset(&topic, partition, start) {
                tracing::error!(%topic, partition, error = %e, "cannot set start offset");
            }
            tracing::debug!(%topic, partition, ?stored, "partition assigned");
            assignment.partitions.insert((topic, partition), stored);
        }
        drop(assignment);
        if let Err(e) = consumer.assign(tpl) {
            tracing::error!(error = %e, "assign failed");
        }
    }
}

impl ClientContext for ResumeContext {}

impl ConsumerContext for ResumeContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => self.assign(consumer, tpl),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let mut assignment = self.assignment.lock().unwrap_or_else(|e| e.into_inner());
                assignment.generation += 1;
                assignment.partitions.clear();
                drop(assignment);
                if let Err(e) = consumer.unassign() {
                    tracing::error!(error = %e, "unassign failed");
                }
            }
            other => tracing::error!(error = ?other, "rebalance error"),
        }
    }
}
