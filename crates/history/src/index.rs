//! The explain index: the records a command's chain links to, in RocksDB
//! (unicron-store's `state` family), written as the status page reads the
//! log so that an explain is a few point reads, not a read of the whole
//! log, and memory stays bounded however long the log is.
//!
//! It is a cache of the log, rebuilt from the log's beginning each time the
//! page starts: [`ExplainIndex::open`] empties it first. Keys:
//!
//! - `r\0TOPIC\0PO`: the payload at (topic, partition, offset) of the
//!   failures, cluster and results topics (triggers) and of the telemetry,
//!   logs and agent topics (sources, stored undecoded: most are never cited);
//! - `c\0ID` and `d\0ID`: a command or decision by id, as `PO` + payload,
//!   the first in (partition, offset) order when an id repeats;
//! - `x\0COMMAND_ID\0PO`: a result of that command.
//!
//! `PO` is the partition and the offset, big-endian, so keys sort in log order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use unicron_core::planner::InputEvent;
use unicron_core::{Command, CommandResult, Decision, FailureEvent};
use unicron_store::{Commit, Store, StoreError, StoreOptions};

use crate::decode::{Decoded, Decoder};
use crate::explain::{At, Chain, Links, assemble};
use crate::names::TopicNames;

/// Names the directory as an index, so that emptying it never deletes
/// anything else, and is locked while the index is open. RocksDB is in `db`.
const MARKER: &str = "UNICRON_EXPLAIN_INDEX";

/// Errors of the index.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("explain index: {0}")]
    Store(#[from] StoreError),
    #[error("explain index {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "explain index {}: the directory holds other files; name an empty or new one",
        .0.display()
    )]
    NotAnIndex(PathBuf),
    #[error(
        "explain index {}: another process has it open; give each page its own directory",
        .0.display()
    )]
    InUse(PathBuf),
    #[error("explain index: corrupt entry {0}")]
    Corrupt(String),
}

/// A record to index: where it is, its payload, and what it decoded to.
/// The detector's topics' records may come undecoded (`None`): decoding
/// waits for an explain that cites them.
#[derive(Debug, Clone, Copy)]
pub struct Indexed<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub payload: &'a [u8],
    pub record: Option<&'a Decoded>,
}

/// The index of one log (see the module's documentation).
pub struct ExplainIndex {
    store: Store,
    decoder: Decoder,
    _lock: std::fs::File,
}

impl std::fmt::Debug for ExplainIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExplainIndex").finish_non_exhaustive()
    }
}

impl ExplainIndex {
    /// Opens an empty index in `dir` for the topics of `names`, deleting a
    /// previous index there; a directory holding anything else, or an index
    /// another process has open, is refused.
    pub fn open(dir: &Path, names: TopicNames) -> Result<ExplainIndex, IndexError> {
        let io = |source| IndexError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let marker = dir.join(MARKER);
        if dir.exists() && !marker.is_file() && std::fs::read_dir(dir).map_err(io)?.next().is_some()
        {
            return Err(IndexError::NotAnIndex(dir.to_path_buf()));
        }
        std::fs::create_dir_all(dir).map_err(io)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&marker)
            .map_err(io)?;
        // Held while the index is open: emptying it under another page
        // would delete that page's files.
        lock.try_lock()
            .map_err(|_| IndexError::InUse(dir.to_path_buf()))?;
        let db = dir.join("db");
        if db.exists() {
            std::fs::remove_dir_all(&db).map_err(io)?;
        }
        let store = Store::open(&db, StoreOptions::default())?;
        Ok(ExplainIndex {
            store,
            decoder: Decoder::with_names(names),
            _lock: lock,
        })
    }

    /// Records `records` in one write.
    pub fn add(&self, records: &[Indexed<'_>]) -> Result<(), IndexError> {
        let mut commit = Commit::new();
        // Commands and decisions by id, the first place of this batch.
        let mut by_id: BTreeMap<Vec<u8>, (Place, &[u8])> = BTreeMap::new();
        for r in records {
            let place_of = (r.partition, r.offset);
            let mut first = |kind: u8, id: &str| {
                let held = by_id
                    .entry(id_key(kind, id))
                    .or_insert((place_of, r.payload));
                if place_of < held.0 {
                    *held = (place_of, r.payload);
                }
            };
            match r.record {
                Some(Decoded::Decision(d)) => first(b'd', &d.id),
                Some(Decoded::Command(c)) => first(b'c', &c.id),
                Some(Decoded::Input(event)) => {
                    commit.put_state(record_key(r.topic, r.partition, r.offset), r.payload);
                    if let InputEvent::Result(result) = event {
                        let mut key = id_key(b'x', &result.command_id);
                        key.push(0);
                        key.extend(place(r.partition, r.offset));
                        commit.put_state(key, r.payload);
                    }
                }
                Some(Decoded::Telemetry(_) | Decoded::Log(_) | Decoded::Agent(_)) => {
                    commit.put_state(record_key(r.topic, r.partition, r.offset), r.payload);
                }
                None if self.decoder.source_topics().contains(&r.topic) => {
                    commit.put_state(record_key(r.topic, r.partition, r.offset), r.payload);
                }
                None => {}
            }
        }
        for (key, (at, payload)) in by_id {
            if let Some(held) = self.store.state(&key)? {
                let (held_at, _) = split_place(&held)?;
                if held_at <= at {
                    continue;
                }
            }
            let mut value = place(at.0, at.1).to_vec();
            value.extend_from_slice(payload);
            commit.put_state(key, value);
        }
        if !commit.is_empty() {
            self.store.commit(commit)?;
        }
        Ok(())
    }

    /// The chain of `command_id`, or `None` if no such command was read.
    pub fn chain(&self, command_id: &str) -> Result<Option<Chain>, IndexError> {
        assemble(self, command_id)
    }

    fn decode(&self, topic: &str, payload: &[u8]) -> Result<Decoded, IndexError> {
        match self.decoder.decode(topic, payload) {
            Some(Ok(decoded)) => Ok(decoded),
            // Only records that decoded are written.
            _ => Err(IndexError::Corrupt(format!("a record of {topic}"))),
        }
    }

    /// The record at `at`; one that does not decode counts as absent, as
    /// in a loaded history (source records are stored undecoded).
    fn at(&self, at: &At<'_>) -> Result<Option<Decoded>, IndexError> {
        let payload = self
            .store
            .state(&record_key(at.topic, at.partition, at.offset))?;
        Ok(payload.and_then(|p| self.decoder.decode(at.topic, &p)?.ok()))
    }

    fn by_id(&self, kind: u8, id: &str, topic: &str) -> Result<Option<Decoded>, IndexError> {
        let Some(held) = self.store.state(&id_key(kind, id))? else {
            return Ok(None);
        };
        let (_, payload) = split_place(&held)?;
        self.decode(topic, payload).map(Some)
    }
}

impl Links for ExplainIndex {
    type Error = IndexError;

    fn names(&self) -> &TopicNames {
        self.decoder.names()
    }

    fn command(&self, id: &str) -> Result<Option<Command>, IndexError> {
        let topic = &self.names().commands;
        Ok(match self.by_id(b'c', id, topic)? {
            Some(Decoded::Command(c)) => Some(c),
            _ => None,
        })
    }

    fn decision(&self, id: &str) -> Result<Option<Decision>, IndexError> {
        let topic = &self.names().decisions;
        Ok(match self.by_id(b'd', id, topic)? {
            Some(Decoded::Decision(d)) => Some(d),
            _ => None,
        })
    }

    fn failure(&self, at: &At<'_>) -> Result<Option<FailureEvent>, IndexError> {
        Ok(match self.at(at)? {
            Some(Decoded::Input(InputEvent::Failure(f))) => Some(f),
            _ => None,
        })
    }

    fn trigger(&self, at: &At<'_>) -> Result<Option<serde_json::Value>, IndexError> {
        Ok(match self.at(at)? {
            Some(d @ Decoded::Input(InputEvent::Cluster(_) | InputEvent::Result(_))) => d.to_json(),
            _ => None,
        })
    }

    fn source(&self, at: &At<'_>) -> Result<Option<serde_json::Value>, IndexError> {
        Ok(match self.at(at)? {
            Some(d @ (Decoded::Telemetry(_) | Decoded::Log(_) | Decoded::Agent(_))) => d.to_json(),
            _ => None,
        })
    }

    fn results(&self, command_id: &str) -> Result<Vec<CommandResult>, IndexError> {
        let mut prefix = id_key(b'x', command_id);
        prefix.push(0);
        let topic = &self.names().results;
        let mut out = Vec::new();
        for (key, payload) in self.store.state_with_prefix(&prefix)? {
            // Exactly this id: the prefix plus a place.
            if key.len() != prefix.len() + 12 {
                continue;
            }
            if let Decoded::Input(InputEvent::Result(r)) = self.decode(topic, &payload)? {
                out.push(r);
            }
        }
        Ok(out)
    }
}

/// A partition and an offset.
type Place = (i32, i64);

fn place(partition: i32, offset: i64) -> [u8; 12] {
    let mut out = [0; 12];
    out[..4].copy_from_slice(&partition.to_be_bytes());
    out[4..].copy_from_slice(&offset.to_be_bytes());
    out
}

fn split_place(value: &[u8]) -> Result<(Place, &[u8]), IndexError> {
    if value.len() < 12 {
        return Err(IndexError::Corrupt("a value shorter than its place".into()));
    }
    let partition = i32::from_be_bytes(value[..4].try_into().expect("4 bytes"));
    let offset = i64::from_be_bytes(value[4..12].try_into().expect("8 bytes"));
    Ok(((partition, offset), &value[12..]))
}

fn record_key(topic: &str, partition: i32, offset: i64) -> Vec<u8> {
    let mut key = id_key(b'r', topic);
    key.push(0);
    key.extend(place(partition, offset));
    key
}

fn id_key(kind: u8, id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(id.len() + 2);
    key.extend([kind, 0]);
    key.extend(id.as_bytes());
    key
}
