//! unicron-store: the RocksDB store of stateful services.
//!
//! Column families (docs/design.md §2): `state` (the service's state, a cache of the
//! log), `offsets` (input offsets consumed), `outbox` (outputs not yet
//! acknowledged by Kafka) and `dedupe` (ids already acted on). A [`Commit`]
//! writes all four in one `WriteBatch`, which is what makes effectively-once
//! work (docs/design.md §4): after a crash, state and offsets agree, and the outbox
//! still holds whatever was not yet published.

mod error;
mod outbox;
mod store;

pub use error::StoreError;
pub use outbox::{OutboxEntry, OutboxKey};
pub use store::{Commit, KeyValue, Store, StoreOptions};
