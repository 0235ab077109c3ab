//! What one step may read and stage.

use unicron_bus::BusError;
use unicron_codec::schemas::AvroRecord;
use unicron_codec::{AvroCodec, InboundRecord, Topics};
use unicron_store::{Commit, OutboxEntry, Store, StoreError};

/// The record being applied, read access to the service's store, and the
/// writes and outputs staged for the runtime to commit and publish.
pub struct Step<'a> {
    record: &'a InboundRecord,
    topics: &'a Topics,
    store: Option<&'a Store>,
    /// What earlier steps of the same batch staged and the store does not
    /// hold yet: reads see it first.
    earlier: Option<&'a Commit>,
    pub(crate) commit: Commit,
    pub(crate) outputs: Vec<OutboxEntry>,
    pub(crate) dead_letters: Vec<String>,
}

impl<'a> Step<'a> {
    pub(crate) fn new(
        record: &'a InboundRecord,
        topics: &'a Topics,
        store: Option<&'a Store>,
        earlier: Option<&'a Commit>,
    ) -> Step<'a> {
        Step {
            record,
            topics,
            store,
            earlier,
            commit: Commit::new(),
            outputs: Vec::new(),
            dead_letters: Vec::new(),
        }
    }

    /// The record being applied (borrowed from the runtime, not from the
    /// step, so a processor may hold it while it stages outputs).
    pub fn record(&self) -> &'a InboundRecord {
        self.record
    }

    /// Queues `record` for the one topic its type belongs to, published
    /// in order once the step is committed, to the partition `key` hashes
    /// to.
    pub fn send<T: AvroRecord>(
        &mut self,
        key: impl Into<Vec<u8>>,
        record: &T,
    ) -> Result<(), BusError> {
        self.send_to(None, key, record)
    }

    /// Like [`send`](Step::send), to `partition` (`None`: where the key
    /// hashes).
    pub fn send_to<T: AvroRecord>(
        &mut self,
        partition: Option<i32>,
        key: impl Into<Vec<u8>>,
        record: &T,
    ) -> Result<(), BusError> {
        let key = self
            .topics
            .key(unicron_codec::Topic::carrying(T::RECORD), &key.into());
        self.outputs.push(OutboxEntry {
            topic: self.topics.of::<T>().to_string(),
            key,
            payload: AvroCodec::<T>::default().encode(record)?,
            partition,
        });
        Ok(())
    }

    /// Queues bytes for a topic outside unicron's topology (a site's own,
    /// a test's); unicron's records go through [`send`](Step::send).
    pub fn publish_bytes(
        &mut self,
        topic: &str,
        partition: Option<i32>,
        key: impl Into<Vec<u8>>,
        payload: Vec<u8>,
    ) {
        self.outputs.push(OutboxEntry {
            topic: topic.to_string(),
            key: key.into(),
            payload,
            partition,
        });
    }

    /// Sends the record to the dead-letter topic with `reason`; several
    /// reasons make one dead letter.
    pub fn dead_letter(&mut self, reason: impl Into<String>) {
        self.dead_letters.push(reason.into());
    }

    /// Stages a state write.
    pub fn put_state(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.commit.put_state(key, value);
    }

    /// Stages a dedupe entry: `id` was handled with `outcome`.
    pub fn remember(&mut self, id: impl Into<Vec<u8>>, outcome: impl Into<Vec<u8>>) {
        self.commit.remember(id, outcome);
    }

    /// The state under `key` as the steps before this one left it
    /// (committed, or staged earlier in the same batch); not what this
    /// step stages.
    pub fn state(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(staged) = self.earlier.and_then(|c| c.staged_state(key)) {
            return Ok(staged.map(<[u8]>::to_vec));
        }
        match self.store {
            Some(store) => store.state(key),
            None => Ok(None),
        }
    }

    /// The dedupe entry of `id` the steps before this one left.
    pub fn remembered(&self, id: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(staged) = self.earlier.and_then(|c| c.staged_remembered(id)) {
            return Ok(Some(staged.to_vec()));
        }
        match self.store {
            Some(store) => store.remembered(id),
            None => Ok(None),
        }
    }

    /// The reasons joined into one: the first, and how many more.
    pub(crate) fn dead_letter_reason(&mut self) -> Option<String> {
        let more = self.dead_letters.len().checked_sub(1)?;
        let first = self.dead_letters.remove(0);
        Some(if more == 0 {
            first
        } else {
            format!("{first} (and {more} more)")
        })
    }

    /// What the step staged, for the runtime to commit.
    pub(crate) fn into_staged(mut self) -> Staged {
        let dead_letter = self.dead_letter_reason();
        Staged {
            commit: self.commit,
            outputs: self.outputs,
            dead_letter,
        }
    }
}

/// A finished step's writes, outputs and dead-letter reason.
pub(crate) struct Staged {
    pub(crate) commit: Commit,
    pub(crate) outputs: Vec<OutboxEntry>,
    pub(crate) dead_letter: Option<String>,
}
