//! What the loop reads from and writes to. The runtime drives Kafka
//! through these traits ([`crate::run`]); tests drive the same loop over a
//! scripted source and sink, without a broker or the wall clock
//! ([`crate::drive`]).

use std::collections::BTreeMap;
use std::future::Future;

use unicron_bus::BusError;
use unicron_bus::producer::{Delivered, Outbound, OwnedOutbound, Sending};
use unicron_codec::{DecodeError, InboundRecord};

/// How far partitions are read, as a tick may ask ([`crate::Reading`]).
pub trait Positions: Sync {
    /// Whether the record at `offset` is the newest of the partition.
    fn caught_up_with(&self, topic: &str, partition: i32, offset: i64) -> bool;
    /// The partition's high watermark as of the latest fetch.
    fn high_watermark(&self, topic: &str, partition: i32) -> Option<i64>;
}

/// A consumer-group member: records in, offsets out, and the membership
/// the loop must follow (which partitions it holds, and a generation that
/// moves at every assign or revoke).
pub trait Source: Positions + Send {
    /// The next record. Cancel-safe: the loop selects on it.
    fn recv(&self) -> impl Future<Output = Result<InboundRecord, BusError>> + Send;
    /// A record that is already waiting, without waiting for one.
    fn try_recv(&self) -> Option<Result<InboundRecord, BusError>>;
    /// Why `record` is too large to decode, if it is.
    fn oversized(&self, record: &InboundRecord) -> Option<DecodeError>;
    /// The partition's records through `offset` are handled: the next
    /// commit resumes after it.
    fn mark_done(&self, topic: &str, partition: i32, offset: i64) -> Result<(), BusError>;
    /// Starts a commit of what was marked done.
    fn commit_now(&self) -> Result<(), BusError>;
    /// The high watermark of every held partition not read to it yet:
    /// what a reader that stops "at the end" must still read.
    fn unread_ends(&self) -> Result<BTreeMap<(String, i32), i64>, BusError>;
    /// Moves at every assign or revoke.
    fn generation(&self) -> u64;
    /// Whether the partition is held now.
    fn holds(&self, topic: &str, partition: i32) -> bool;
    /// The partitions held now, in order.
    fn assigned(&self) -> Vec<(String, i32)>;
    /// Lost broker connections so far.
    fn connection_losses(&self) -> u64;
}

/// Where outputs go.
pub trait Sink: Sync {
    /// Sends `records` as one batch, in order, and says where each landed
    /// once all are acknowledged.
    fn send_all(
        &self,
        records: &[Outbound<'_>],
    ) -> impl Future<Output = Result<Vec<Delivered>, BusError>> + Send;

    /// Queues `records` now, in order after everything sent before; the
    /// returned future says where each landed.
    fn send_owned(&self, records: Vec<OwnedOutbound>) -> Sending;
}
