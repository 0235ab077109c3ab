//! What a service runs with besides its processor.

use std::sync::Arc;
use std::time::Duration;

use unicron_codec::Subscription;
use unicron_store::Store;

/// How a service's effects survive a crash.
#[derive(Clone)]
pub enum Durability {
    /// Effectively-once (docs/design.md §4): state, consumed offset, outbox
    /// and dedupe entries commit in one RocksDB batch; outputs are published
    /// from the outbox after the commit, and again after a crash. The
    /// processor reads the same store, which it was given when it was made.
    Store { store: Arc<Store>, start: StartFrom },
    /// No store: outputs are published before a record is marked done, so
    /// a crash may publish them again (at least once). For services whose
    /// state is soft and whose outputs carry deterministic ids.
    AtLeastOnce,
    /// The processor makes records durable outside Kafka (the archiver's
    /// closed files) and says which are ([`Processor::settled`]); only
    /// those offsets are committed. Dead letters are sent before the
    /// processor hears of them.
    Elsewhere,
}

impl std::fmt::Debug for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Durability::Store { start, .. } => write!(f, "Store {{ start: {start:?} }}"),
            Durability::AtLeastOnce => f.write_str("AtLeastOnce"),
            Durability::Elsewhere => f.write_str("Elsewhere"),
        }
    }
}

impl Durability {
    /// The store, for the processor to read (and keep).
    pub fn opened(&self) -> Option<&Arc<Store>> {
        match self {
            Durability::Store { store, .. } => Some(store),
            Durability::AtLeastOnce | Durability::Elsewhere => None,
        }
    }
}

/// Where reading starts on a newly assigned partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    /// The offset committed with the state: state and input agree exactly.
    StoredOffsets,
    /// The group's committed offset. Records below the stored offset are
    /// still skipped; for services that must not start from the
    /// beginning with an empty store (the executor would act again on a
    /// whole retention period of commands).
    GroupOffsets,
}

/// What the loop does when asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStop {
    /// Stops after the batch in hand.
    Stop,
    /// First reads every held partition up to the end it has at the stop
    /// (the records published just before a stop are handled, not left to
    /// chance), for at most `limit`: a broker that is gone must not hold
    /// the stop up.
    ReadToEnd { limit: Duration },
}

/// [`RuntimeOptions::max_batch`] unless a service says otherwise: a
/// stateful service's batch is one RocksDB write, kept short.
pub const DEFAULT_MAX_BATCH: usize = 128;

/// What the runtime needs besides the processor.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// The service's name in metrics, logs and dead letters.
    pub service: &'static str,
    pub group_id: String,
    pub subscriptions: Vec<Subscription>,
    pub durability: Durability,
    pub on_stop: OnStop,
    /// The most records applied before one commit (or one round, for a
    /// processor that applies rounds). Records that are already waiting are
    /// applied together: a busy service pays one store write and one broker
    /// round trip per batch rather than per record. The bound caps how long
    /// a batch's first record waits for its commit.
    pub max_batch: usize,
    /// The cluster the service writes for (an agent's, an executor's):
    /// with `kafka.cluster_topics` its outputs to the ingress topics go to
    /// that cluster's own ([`unicron_codec::Topics::bound`]).
    pub cluster: Option<String>,
}

impl RuntimeOptions {
    /// Options that stop after the batch in hand.
    pub fn new(
        service: &'static str,
        group_id: impl Into<String>,
        subscriptions: Vec<Subscription>,
        durability: Durability,
    ) -> RuntimeOptions {
        RuntimeOptions {
            service,
            group_id: group_id.into(),
            subscriptions,
            durability,
            on_stop: OnStop::Stop,
            max_batch: DEFAULT_MAX_BATCH,
            cluster: None,
        }
    }
}
