//! Consumer-group membership for services with soft in-memory state (the
//! detector): reading resumes at the group's committed offsets as usual, and
//! every rebalance bumps a generation so the service drops state about
//! partitions it may no longer own (a heartbeat table for nodes another
//! instance now reads would report them all lost).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};

/// Counts rebalances.
#[derive(Debug, Clone, Default)]
pub struct RebalanceCounter {
    generation: Arc<AtomicU64>,
}

impl RebalanceCounter {
    /// The current generation, bumped after every assign or revoke.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

impl ClientContext for RebalanceCounter {}

impl ConsumerContext for RebalanceCounter {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        tracing::debug!(?rebalance, "rebalanced");
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}
