//! unicron-runtime: the one loop every service runs (docs/design.md §4).
//!
//! A service is its settings plus a [`Processor`]: how to decode a record
//! and what one record changes. The runtime owns the protocol around it,
//! once: reading from the consumer group, the oversize check and
//! dead-lettering, skipping what was applied before a restart, committing
//! state + consumed offset + outbox + dedupe in one RocksDB batch,
//! publishing the outbox, marking records done, rebalance and catch-up
//! hooks, readiness, metric registration and shutdown. The model is
//! `quinn-proto` driven by `quinn`: the processor does no consumer or
//! producer I/O of its own.

mod discovery;
mod driver;
mod error;
mod in_flight;
mod io;
mod kafka;
mod membership;
mod offsets;
mod options;
mod outbox;
mod processor;
mod runtime;
mod step;

pub use discovery::with_topic_discovery;
pub use driver::{Outputs, drive};
pub use error::RuntimeError;
pub use io::{Positions, Sink, Source};
pub use kafka::KafkaSource;
pub use membership::Membership;
pub use options::{DEFAULT_MAX_BATCH, Durability, OnStop, RuntimeOptions, StartFrom};
pub use outbox::{Published, drain};
pub use processor::{
    Act, Applied, BatchEnd, BusStatus, Never, Outgoing, Processor, Reading, Settled,
};
pub use runtime::run;
pub use step::Step;
/// The store a stateful processor keeps (from [`Durability::opened`]).
pub use unicron_store::Store;
