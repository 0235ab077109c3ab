//! What a service supplies: the [`Processor`] trait.

use std::future::Future;
use std::time::{Duration, Instant};

use unicron_bus::{DecodeError, InboundRecord};
use unicron_store::Store;

use crate::error::RuntimeError;
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

/// The type of actions of a processor that never acts.
#[derive(Debug)]
pub enum Never {}

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
    pub(crate) last_read: &'a std::collections::BTreeMap<(String, i32), i64>,
    pub(crate) caught_up: &'a (dyn Fn(&str, i32, i64) -> bool + Sync),
    pub(crate) high_watermark: &'a (dyn Fn(&str, i32) -> Option<i64> + Sync),
    pub status: BusStatus,
}

impl Reading<'_> {
    /// Records on the partition not read yet, by the high watermark of the
    /// latest fetch; `None` before a record of it was read or a fetch
    /// answered.
    pub fn lag(&self, topic: &str, partition: i32) -> Option<i64> {
        let offset = self.last_read.get(&(topic.to_string(), partition))?;
        let high = (self.high_watermark)(topic, partition)?;
        Some((high - offset - 1).max(0))
    }

    /// The partitions read from so far.
    pub fn partitions(&self) -> impl Iterator<Item = (&str, i32)> {
        self.last_read.keys().map(|(t, p)| (t.as_str(), *p))
    }

    /// Whether the last record read from the partition is its newest.
    pub fn caught_up(&self, topic: &str, partition: i32) -> bool {
        self.last_read
            .get(&(topic.to_string(), partition))
            .is_some_and(|offset| (self.caught_up)(topic, partition, *offset))
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
    type Action: Send;
    /// What an action came to.
    type Outcome: Send;
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

    /// Carries out an action returned by [`apply`](Processor::apply).
    /// Shutdown may cancel it; the record is then read again after a restart.
    fn act(&mut self, action: &Self::Action) -> impl Future<Output = Self::Outcome> + Send;

    /// Stages what an action came to.
    fn finish(
        &mut self,
        action: Self::Action,
        outcome: Self::Outcome,
        step: &mut Step<'_>,
    ) -> Result<(), Self::Error>;

    /// Registers the service's metric descriptions.
    fn describe_metrics(&self) {}

    /// Once, after the store opens (before reading).
    fn opened(&mut self, _store: Option<&Store>) -> Result<(), Self::Error> {
        Ok(())
    }

    /// The group moved partitions: in-memory state may be stale. Called
    /// before the next record is applied, with the partitions now held.
    fn reassigned(
        &mut self,
        _assigned: &[(String, i32)],
        _store: Option<&Store>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        async { Ok(()) }
    }

    /// Outputs (and records this hook asked for) were published at
    /// `published`. Returns more records to send now; their positions come
    /// back through this hook, so a processor can write records that name
    /// the offsets of others it wrote (the planner's checkpoint manifest).
    /// Also called on every tick with nothing published, for work that is
    /// due by time.
    fn published(
        &mut self,
        _published: &[Published],
        _store: Option<&Store>,
    ) -> Result<Vec<Outgoing>, Self::Error> {
        Ok(Vec::new())
    }

    /// Called before each record with the consumer's connection status.
    fn observe(&mut self, _status: BusStatus) {}

    /// How often [`tick`](Processor::tick) runs; `None`: never.
    fn tick_every(&self) -> Option<Duration> {
        None
    }

    /// Runs every [`tick_every`](Processor::tick_every), for work due by
    /// wall time; what it queues goes out through
    /// [`end_batch`](Processor::end_batch), which runs right after.
    fn tick(&mut self, _reading: &Reading<'_>) {}

    /// Called when the records of a batch (or a tick) are handled, before
    /// they are marked done, for a processor that applies what it read in
    /// rounds (the detector). At least once: for processors without a
    /// store, whose outputs are sent before the records are marked done.
    fn end_batch(&mut self) -> Result<BatchEnd, Self::Error> {
        Ok(BatchEnd::default())
    }
}
