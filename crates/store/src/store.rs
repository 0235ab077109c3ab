use std::path::Path;
use std::sync::Mutex;

use rocksdb::{
    ColumnFamilyDescriptor, DB, Direction, IteratorMode, Options, WriteBatch, WriteOptions,
};

use crate::error::StoreError;
use crate::outbox::{OutboxEntry, OutboxKey};

const CF_STATE: &str = "state";
const CF_OFFSETS: &str = "offsets";
const CF_OUTBOX: &str = "outbox";
const CF_DEDUPE: &str = "dedupe";
const FAMILIES: [&str; 4] = [CF_STATE, CF_OFFSETS, CF_OUTBOX, CF_DEDUPE];

/// The write-ahead log's cap (see `Store::open`).
const MAX_TOTAL_WAL_BYTES: u64 = 64 * 1024 * 1024;

/// A key and its value.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// How the store writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreOptions {
    /// fsync the write-ahead log on every commit. Off, a commit survives a
    /// crash of the process (kill -9) but not of the machine; on, it survives
    /// both, at the price of one fsync per commit.
    pub sync: bool,
}

/// Everything one processing step changes, written atomically by
/// [`Store::commit`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Commit {
    state: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    offsets: Vec<(String, i32, i64)>,
    outbox: Vec<OutboxEntry>,
    dedupe: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Commit {
    pub fn new() -> Commit {
        Commit::default()
    }

    /// Sets a state key.
    pub fn put_state(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        self.state.push((key.into(), Some(value.into())));
        self
    }

    /// Deletes a state key.
    pub fn delete_state(&mut self, key: impl Into<Vec<u8>>) -> &mut Self {
        self.state.push((key.into(), None));
        self
    }

    /// Records that input up to (not including) `next_offset` is consumed.
    pub fn consumed(&mut self, topic: &str, partition: i32, next_offset: i64) -> &mut Self {
        self.offsets
            .push((topic.to_string(), partition, next_offset));
        self
    }

    /// Queues an output for publication.
    pub fn publish(&mut self, entry: OutboxEntry) -> &mut Self {
        self.outbox.push(entry);
        self
    }

    /// Remembers that `id` was acted on, with what came of it.
    pub fn remember(&mut self, id: impl Into<Vec<u8>>, outcome: impl Into<Vec<u8>>) -> &mut Self {
        self.dedupe.push((id.into(), outcome.into()));
        self
    }

    /// Adds everything `later` stages after what this commit holds, so
    /// several steps commit as one batch.
    pub fn append(&mut self, later: Commit) -> &mut Self {
        self.state.extend(later.state);
        self.offsets.extend(later.offsets);
        self.outbox.extend(later.outbox);
        self.dedupe.extend(later.dedupe);
        self
    }

    /// What this commit sets `key` to: `Some(None)` for a delete, `None`
    /// when it does not touch `key`. The last write wins, as in the store.
    pub fn staged_state(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.state
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, value)| value.as_deref())
    }

    /// The dedupe entry this commit stages for `id`, if any.
    pub fn staged_remembered(&self, id: &[u8]) -> Option<&[u8]> {
        self.dedupe
            .iter()
            .rev()
            .find(|(k, _)| k == id)
            .map(|(_, outcome)| outcome.as_slice())
    }

    pub fn is_empty(&self) -> bool {
        self.state.is_empty()
            && self.offsets.is_empty()
            && self.outbox.is_empty()
            && self.dedupe.is_empty()
    }
}

/// A RocksDB database with unicron's four column families.
pub struct Store {
    db: DB,
    write: WriteOptions,
    /// Next outbox sequence number; the lock also orders concurrent commits.
    next_outbox: Mutex<u64>,
}

impl Store {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: impl AsRef<Path>, options: StoreOptions) -> Result<Store, StoreError> {
        let mut db_options = Options::default();
        db_options.create_if_missing(true);
        db_options.create_missing_column_families(true);
        // A write-ahead log file is kept until every column family has
        // flushed what it holds; the small ones (offsets, outbox) rarely
        // fill a memtable, so without a cap the log grew by GBs an hour
        // under load. Past this size RocksDB flushes them.
        db_options.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES);
        let families = FAMILIES
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(*name, Options::default()));
        let db = DB::open_cf_descriptors(&db_options, path, families)?;
        let mut write = WriteOptions::default();
        write.set_sync(options.sync);
        let next = {
            let cf = db.cf_handle(CF_OUTBOX).expect("created at open");
            match db.iterator_cf(cf, IteratorMode::End).next() {
                Some(item) => OutboxKey::from_bytes(&item?.0)?.0 + 1,
                None => 0,
            }
        };
        Ok(Store {
            db,
            write,
            next_outbox: Mutex::new(next),
        })
    }

    /// Writes `commit` in one atomic batch and returns the outbox keys of
    /// its entries, in order.
    pub fn commit(&self, commit: Commit) -> Result<Vec<OutboxKey>, StoreError> {
        let mut next = self.next_outbox.lock().unwrap_or_else(|e| e.into_inner());
        let mut batch = WriteBatch::default();
        let state = self.cf(CF_STATE);
        for (key, value) in &commit.state {
            match value {
                Some(value) => batch.put_cf(state, key, value),
                None => batch.delete_cf(state, key),
            }
        }
        let offsets = self.cf(CF_OFFSETS);
        for (topic, partition, offset) in &commit.offsets {
            batch.put_cf(offsets, offset_key(topic, *partition), offset.to_be_bytes());
        }
        let outbox = self.cf(CF_OUTBOX);
        let keys: Vec<OutboxKey> = (0..commit.outbox.len() as u64)
            .map(|i| OutboxKey(*next + i))
            .collect();
        for (key, entry) in keys.iter().zip(&commit.outbox) {
            batch.put_cf(outbox, key.to_bytes(), entry.encode());
        }
        let dedupe = self.cf(CF_DEDUPE);
        for (id, outcome) in &commit.dedupe {
            batch.put_cf(dedupe, id, outcome);
        }
        self.db.write_opt(batch, &self.write)?;
        *next += keys.len() as u64;
        Ok(keys)
    }

    /// A state value.
    pub fn state(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.db.get_cf(self.cf(CF_STATE), key)?)
    }

    /// Every state entry whose key starts with `prefix`, in key order.
    pub fn state_with_prefix(&self, prefix: &[u8]) -> Result<Vec<KeyValue>, StoreError> {
        let mode = IteratorMode::From(prefix, Direction::Forward);
        let mut out = Vec::new();
        for item in self.db.iterator_cf(self.cf(CF_STATE), mode) {
            let (key, value) = item?;
            if !key.starts_with(prefix) {
                break;
            }
            out.push((key.to_vec(), value.to_vec()));
        }
        Ok(out)
    }

    /// The next offset to consume on `topic`/`partition`, if any was stored.
    pub fn offset(&self, topic: &str, partition: i32) -> Result<Option<i64>, StoreError> {
        self.db
            .get_cf(self.cf(CF_OFFSETS), offset_key(topic, partition))?
            .map(|bytes| decode_i64(&bytes))
            .transpose()
    }

    /// Every stored offset as (topic, partition, next offset), sorted.
    pub fn offsets(&self) -> Result<Vec<(String, i32, i64)>, StoreError> {
        let mut out = Vec::new();
        for item in self
            .db
            .iterator_cf(self.cf(CF_OFFSETS), IteratorMode::Start)
        {
            let (key, value) = item?;
            let split = key
                .iter()
                .position(|b| *b == 0)
                .filter(|at| key.len() == at + 5)
                .ok_or_else(|| StoreError::Corrupt("offset key".into()))?;
            let topic = String::from_utf8(key[..split].to_vec())
                .map_err(|_| StoreError::Corrupt("offset topic is not UTF-8".into()))?;
            let partition = i32::from_be_bytes(key[split + 1..].try_into().unwrap());
            out.push((topic, partition, decode_i64(&value)?));
        }
        Ok(out)
    }

    /// Outbox entries not yet marked delivered, in commit order.
    pub fn outbox(&self) -> Result<Vec<(OutboxKey, OutboxEntry)>, StoreError> {
        let mut out = Vec::new();
        for item in self.db.iterator_cf(self.cf(CF_OUTBOX), IteratorMode::Start) {
            let (key, value) = item?;
            out.push((OutboxKey::from_bytes(&key)?, OutboxEntry::decode(&value)?));
        }
        Ok(out)
    }

    /// Removes a delivered entry from the outbox.
    pub fn outbox_delivered(&self, key: OutboxKey) -> Result<(), StoreError> {
        self.outbox_delivered_all(&[key])
    }

    /// Removes delivered entries from the outbox in one write.
    pub fn outbox_delivered_all(&self, keys: &[OutboxKey]) -> Result<(), StoreError> {
        let outbox = self.cf(CF_OUTBOX);
        let mut batch = WriteBatch::default();
        for key in keys {
            batch.delete_cf(outbox, key.to_bytes());
        }
        self.db.write_opt(batch, &self.write)?;
        Ok(())
    }

    /// What was remembered for `id`, if it was acted on before.
    pub fn remembered(&self, id: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.db.get_cf(self.cf(CF_DEDUPE), id)?)
    }

    fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("every family is created at open")
    }
}

/// Topic, a 0 byte, then the partition big-endian: sorts by topic, partition.
fn offset_key(topic: &str, partition: i32) -> Vec<u8> {
    let mut key = Vec::with_capacity(topic.len() + 5);
    key.extend_from_slice(topic.as_bytes());
    key.push(0);
    key.extend_from_slice(&partition.to_be_bytes());
    key
}

fn decode_i64(bytes: &[u8]) -> Result<i64, StoreError> {
    let array: [u8; 8] = bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("offset of {} bytes", bytes.len())))?;
    Ok(i64::from_be_bytes(array))
}
