//! unicron-history: the recorded history and what is derived from it.
//!
//! [`History`] reads every unicron topic from Kafka or the archive;
//! [`Decoder`] is the one decoder from a record of a topic to what the
//! planner, replay and explain take; [`replay`] re-derives decisions and
//! failures and runs what-ifs; [`explain`] assembles a command's causal chain,
//! from a loaded history or from the [`ExplainIndex`] the status page keeps
//! in RocksDB. The binary parses arguments and prints (docs/replay.md).

mod decode;
pub mod explain;
mod history;
mod index;
mod kafka;
mod names;
pub mod replay;

pub use decode::{Decoded, Decoder};
pub use explain::{Chain, EvidenceSource};
pub use history::{History, HistoryError, Origin, Recorded};
pub use index::{ExplainIndex, IndexError, Indexed};
pub use names::TopicNames;

#[cfg(test)]
mod tests;
