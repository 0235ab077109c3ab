//! What a service supplies: the [`Processor`] trait.

use std::future::Future;
use std::time::{Duration, Instant};

use unicron_bus::BusError;
use unicron_codec::schemas::AvroRecord;
use unicron_codec::{AvroCodec, DecodeError, InboundRecord, Topics};

use crate::error::RuntimeError;
use crate::io::Positions;
use crate::outbox::Published;
use crate::step::Step;

/// What a step asks of the runtime once its writes are staged.
#[derive(Debug)]
pub enum Applied<A> {
    /// The record is handled: commit the step with its consumed offset.
    Done,
    /// Commit the step without the consumed offset, carry out `A` outside
    /// any step ([`Processor::act`]), then commit what
    /// [`Processor::finish`] stages, with the consumed offset. A crash in
    /// between reads the record again.
    Act(A),
}

/// The type of actions of a processor that never acts: it needs no
/// [`Act`] of its own.
#[derive(Debug)]
pub enum Never {}

/// Work a processor carries out between two commits (the executor's
/// backend call), and how what it came to is staged.
pub trait Act<P: Processor + ?Sized>: Send + Sized {
    /// What the work came to.
    type Outcome: Send;

    /// Carries the work out. Shutdown may cancel it; the record is then
    /// read again after a restart.
    fn act(&self, processor: &mut P) -> impl Future<Output = Self::Outcome> + Send;

    /// Stages what the work came to; committed with the consumed offset.
    fn finish(
        self,
        outcome: Self::Outcome,
        processor: &mut P,
        step: &mut Step<'_>,
    ) -> Result<(), P::Error>;
}

impl<P: Processor + ?Sized> Act<P> for Never {
    type Outcome = Never;

    async fn act(&self, _: &mut P) -> Never {
        match *self {}
    }

    fn finish(self, _: Never, _: &mut P, _: &mut Step<'_>) -> Result<(), P::Error> {
        match self {}
    }
}

/// A record a processor wants sent outside any commit, after outputs were
/// published ([`Processor::published`]). At most once: a crash before it is
/// sent loses it, so it must be something the processor can do without
/// (the planner's checkpoints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub topic: String,
    /// `None`: the partition the key hashes to.
    pub partition: Option<i32>,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
}

impl Outgoing {
    /// `record` for the one topic its type belongs to; `partition` `None`:
    /// where the key hashes.
    pub fn record<T: AvroRecord>(
        topics: &Topics,
        partition: Option<i32>,
        key: impl Into<Vec<u8>>,
        record: &T,
    ) -> Result<Outgoing, BusError> {
        Ok(Outgoing {
            topic: topics.of::<T>().to_string(),
            partition,
            key: key.into(),
            payload: AvroCodec::<T>::default().encode(record)?,
        })
    }

    /// The record as the producer takes it.
    pub fn outbound(&self) -> unicron_bus::producer::Outbound<'_> {
        unicron_bus::producer::Outbound {
            topic: &self.topic,
            partition: self.partition,
            key: &self.key,
            payload: &self.payload,
        }
    }
}

/// What a processor that applies records in rounds returns at the end of
/// one ([`Processor::end_batch`]).
#[derive(Debug, Default)]
pub struct BatchEnd {
    /// Sent in order, each group delivered before the next is sent (the
    /// detector's round record before the failures it names).
    pub groups: Vec<Vec<Outgoing>>,
    /// Records (or parts of them) found unusable, with the reason.
    pub dead_letters: Vec<(InboundRecord, String)>,
}

/// The consumer's connection, as a processor may need to know it.
#[derive(Debug, Clone, Copy)]
pub struct BusStatus {
    /// Lost broker connections so far (see [`crate::Membership`]).
    pub connection_losses: u64,
    /// Wall time, for operational holds only; never an input to a decision.
    pub now: Instant,
}

/// What a tick may ask about reading.
pub struct Reading<'a> {
    pub(crate) last_read: &'a crate::offsets::PartitionOffsets,
    pub(crate) positions: &'a dyn Positions,
    pub status: BusStatus,
    /// The tick came between batches, with records waiting: what looks
    /// read to its end may only be a stale high watermark.
    pub backlog: bool,
}

impl Reading<'_> {
    /// Records on the partition not read yet, by the high watermark of the
    /// latest fetch; `None` before a record of it was read or a fetch
    /// answered.
    pub fn lag(&self, topic: &str, partition: i32) -> Option<i64> {
        let offset = self.last_read.get(topic, partition)?;
        let high = self.positions.high_watermark(topic, partition)?;
        Some((high - offset - 1).max(0))
    }

    /// The partition's high watermark as of the latest fetch, whether or
    /// not a record of it was read.
    pub fn high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        self.positions.high_watermark(topic, partition)
    }

    /// The partitions read from so far.
    pub fn partitions(&self) -> impl Iterator<Item = (&str, i32)> {
        self.last_read.iter().map(|(t, p, _)| (t, p))
    }

    /// Whether the last record read from the partition is its newest.
    pub fn caught_up(&self, topic: &str, partition: i32) -> bool {
        self.last_read
            .get(topic, partition)
            .is_some_and(|offset| self.positions.caught_up_with(topic, partition, offset))
    }
}

/// One service's logic on top of the runtime: how to decode a record and
/// what applying it changes. Hooks have defaults; a service overrides what
/// it uses.
pub trait Processor: Send {
    /// A decoded input record.
    type Input: Send;
    /// Work done between two commits (the executor's backend call);
    /// [`Never`] for processors that do not act.
    type Action: Act<Self>;
    type Error: From<RuntimeError> + Send;

    /// Whether this instance handles `record` at all; one it does not want
    /// is marked done with nothing committed.
    fn wants(&self, _record: &InboundRecord) -> bool {
        true
    }

    /// Decodes a record (already checked against the size limit). An
    /// error dead-letters the record with the error as the reason.
    fn decode(&self, record: &InboundRecord) -> Result<Self::Input, DecodeError>;

    /// Applies one input: stages state, outputs and dead letters in `step`.
    fn apply(
        &mut self,
        input: Self::Input,
        step: &mut Step<'_>,
    ) -> Result<Applied<Self::Action>, Self::Error>;

    /// Registers the service's metric descriptions.
    fn describe_metrics(&self) {}

    /// The group moved partitions: in-memory state may be stale. Called
    /// before the next record is applied, with the partitions now held.
    fn reassigned(
        &mut self,
        _assigned: &[(String, i32)],
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        async { Ok(()) }
    }

    /// Outputs (and records this hook asked for) were published at
    /// `published`. Returns more records to send now; their positions come
    /// back through this hook, so a processor can write records that name
    /// the offsets of others it wrote (the planner's checkpoint manifest).
    /// Also called on every tick with nothing published, for work that is
    /// due by time.
    fn published(&mut self, _published: &[Published]) -> Result<Vec<Outgoing>, Self::Error> {
        Ok(Vec::new())
    }

    /// Called before each batch of records (and after a reassignment)
    /// with the consumer's connection status.
    fn observe(&mut self, _status: BusStatus) {}

    /// How often [`tick`](Processor::tick) runs; `None`: never.
    fn tick_every(&self) -> Option<Duration> {
        None
    }

    /// Runs every [`tick_every`](Processor::tick_every), for work due by
    /// wall time; what it queues goes out through
    /// [`end_batch`](Processor::end_batch), which runs right after.
    fn tick(&mut self, _reading: &Reading<'_>) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Called when the records of a batch (or a tick) are handled, before
    /// they are marked done, for a processor that applies what it read in
    /// rounds (the detector). At least once: for processors without a
    /// store, whose outputs are sent before the records are marked done.
    fn end_batch(&mut self) -> Result<BatchEnd, Self::Error> {
        Ok(BatchEnd::default())
    }

    /// The runtime sent `record` to the dead-letter topic (it was too
    /// large or did not decode): for a processor that settles offsets
    /// itself ([`Durability::Elsewhere`](crate::Durability::Elsewhere)).
    fn dead_lettered(&mut self, _record: &InboundRecord) {}

    /// For [`Durability::Elsewhere`](crate::Durability::Elsewhere): the
    /// records now durable elsewhere, each partition's through an offset.
    /// Asked after every batch and tick; their offsets are committed.
    fn settled(&mut self) -> Vec<Settled> {
        Vec::new()
    }

    /// The loop is ending (after the last record, before the final
    /// commit): make durable what can be.
    fn stopping(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// A partition's records through `through` are durable outside Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub topic: String,
    pub partition: i32,
    pub through: i64,
}
