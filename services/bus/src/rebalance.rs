//! Consumer-group membership for services with soft in-memory state (the
//! detector): reading resumes at the group's committed offsets as usual, and
//! every rebalance bumps a generation so the service drops state about
//! partitions it may no longer own (a heartbeat table for nodes another
//! instance now reads would report them all lost). It also counts lost
//! broker connections, after which such a service must not read silence as
//! failure until producers have flushed what they queued.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// Counts rebalances and lost broker connections.
#[derive(Debug, Clone, Default)]
pub struct RebalanceCounter {
    generation: Arc<AtomicU64>,
    connection_losses: Arc<AtomicU64>,
}

impl RebalanceCounter {
    /// The current generation, bumped after every assign or revoke.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// How many times librdkafka has reported a broker connection lost or
    /// all brokers down; a change means reading was (or is) interrupted.
    pub fn connection_losses(&self) -> u64 {
        self.connection_losses.load(Ordering::Acquire)
    }
}

impl ClientContext for RebalanceCounter {
    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(
            error.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::BrokerTransportFailure
                    | RDKafkaErrorCode::AllBrokersDown
                    | RDKafkaErrorCode::Resolve
            )
        ) {
            self.connection_losses.fetch_add(1, Ordering::AcqRel);
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

impl ConsumerContext for RebalanceCounter {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        tracing::debug!(?rebalance, "rebalanced");
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}
