//! The archive writer: one open file per topic partition, and which offsets
//! are settled (archived in a closed file, or dead-lettered) so the
//! archiver may commit them.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::entry::EntryRef;
use super::layout::{ArchiveFile, check_topic, list, remove_partial};
use super::open_file::{ClosedFile, OpenFile};
use super::reader::read;
use super::{ArchiveError, file_error};
use crate::codec::{AvroCodec, DecodeError};
use crate::record::InboundRecord;
use crate::schemas::{AvroRecord, ForRecord, RecordType};

/// A file is closed once it holds this many bytes (the default).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// A file is closed once it has been open this long (the default).
pub const DEFAULT_MAX_FILE_AGE: Duration = Duration::from_secs(600);
/// Bytes per wrapper datum on top of the record (strings' lengths, ints,
/// union indexes), an upper bound used to size the block being filled.
const ENTRY_OVERHEAD: u64 = 32;

/// When the writer closes files, and which records it refuses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WriterOptions {
    /// A file is closed once its size reaches this: its bytes on disk plus
    /// the uncompressed bytes of the block being filled.
    pub max_file_bytes: u64,
    /// A file is closed by [`ArchiveWriter::roll_due`] once it has been
    /// open this long (wall clock).
    pub max_file_age: Duration,
    /// Larger payloads are refused without being decoded.
    pub max_record_bytes: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_file_age: DEFAULT_MAX_FILE_AGE,
            max_record_bytes: usize::MAX,
        }
    }
}

impl WriterOptions {
    /// Uncompressed bytes per Avro block: a quarter of a file, within
    /// 1 KiB..256 KiB, so small files still roll on time and large ones
    /// compress well.
    fn block_size(&self) -> usize {
        (self.max_file_bytes / 4).clamp(1024, 256 * 1024) as usize
    }
}

/// Every record of `partition` up to and including offset `through` is
/// archived in a closed file or was dead-lettered: its offset may be
/// committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedThrough {
    pub topic: String,
    pub partition: i32,
    pub through: i64,
}

/// What [`ArchiveWriter::append`] did with a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Appended {
    /// Written to the partition's open file.
    Written,
    /// Written, and the file reached its size and was closed.
    Rolled(ClosedFile),
    /// Its offset is archived already (it came again after a restart or a
    /// rebalance): not written twice.
    AlreadyArchived,
}

#[derive(Debug, Default)]
struct PartitionState {
    /// Highest offset archived (in a closed or the open file) or
    /// dead-lettered, by this writer or by earlier ones in the directory.
    handled_through: Option<i64>,
    /// Files earlier writers left, while no record has shown that the log
    /// being archived is theirs.
    unverified: Vec<ArchiveFile>,
}

type PartitionKey = (String, i32);

/// Writes records to archive files, one open file per topic partition.
pub struct ArchiveWriter {
    dir: PathBuf,
    options: WriterOptions,
    open: BTreeMap<PartitionKey, OpenFile>,
    partitions: BTreeMap<PartitionKey, PartitionState>,
    settled: Vec<ArchivedThrough>,
    removed: Vec<PathBuf>,
}

impl ArchiveWriter {
    /// A writer into `dir` (created if missing). `.part` files a previous
    /// writer left are deleted (see [`removed_partial`](Self::removed_partial)),
    /// and the closed files are noted: a record whose offset they hold is
    /// not archived again.
    pub fn open(dir: impl Into<PathBuf>, options: WriterOptions) -> Result<Self, ArchiveError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|e| file_error(&dir, e))?;
        let removed = remove_partial(&dir)?;
        let mut partitions: BTreeMap<PartitionKey, PartitionState> = BTreeMap::new();
        for file in list(&dir)? {
            let state = partitions
                .entry((file.topic.clone(), file.partition))
                .or_default();
            state.handled_through = state.handled_through.max(Some(file.last));
            state.unverified.push(file);
        }
        Ok(ArchiveWriter {
            dir,
            options,
            open: BTreeMap::new(),
            partitions,
            settled: Vec::new(),
            removed,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The `.part` files deleted when the writer was opened.
    pub fn removed_partial(&self) -> &[PathBuf] {
        &self.removed
    }

    /// Files open now.
    pub fn open_files(&self) -> usize {
        self.open.len()
    }

    /// Decodes `record` as `record_type` and appends it to its partition's
    /// file (opened on its first record). A valid record never fails here
    /// short of an I/O error; one that does not decode (or is larger than
    /// `max_record_bytes`) gives [`ArchiveError::Undecodable`], for the
    /// dead-letter topic; report it with [`dead_lettered`](Self::dead_lettered).
    ///
    /// [`ArchiveError::ForeignLog`] means the directory holds another log
    /// at this record's offset; any other error leaves this partition's
    /// open file discarded (its records were not committed, so they are
    /// read again after a restart).
    pub fn append(
        &mut self,
        record: &InboundRecord,
        record_type: RecordType,
    ) -> Result<Appended, ArchiveError> {
        check_topic(&record.topic)?;
        record_type.with(AppendTyped {
            writer: self,
            record,
        })
    }

    fn append_typed<T: AvroRecord + PartialEq>(
        &mut self,
        record: &InboundRecord,
    ) -> Result<Appended, ArchiveError> {
        let key = (record.topic.clone(), record.partition);
        let state = self.partitions.entry(key.clone()).or_default();
        if state
            .handled_through
            .is_some_and(|through| record.offset <= through)
        {
            if !state.unverified.is_empty()
                && let Ok(value) = decode::<T>(record, self.options.max_record_bytes)
            {
                match verify(&state.unverified, record, &value)? {
                    Verdict::Same => state.unverified.clear(),
                    Verdict::Unknown => {}
                    Verdict::Foreign(path) => {
                        return Err(ArchiveError::ForeignLog {
                            path,
                            topic: record.topic.clone(),
                            partition: record.partition,
                            offset: record.offset,
                        });
                    }
                }
            }
            if !self.open.contains_key(&key) {
                self.settled.push(settled(record));
            }
            return Ok(Appended::AlreadyArchived);
        }
        // Past everything archived before: nothing left to check them by.
        state.unverified.clear();
        let value = decode::<T>(record, self.options.max_record_bytes)?;

        if !self.open.contains_key(&key) {
            let file = OpenFile::create(&self.dir, record, T::RECORD, self.options.block_size())?;
            self.open.insert(key.clone(), file);
        }
        let file = self.open.get_mut(&key).expect("opened above");
        if file.record_type != T::RECORD {
            return Err(file_error(
                &file.part,
                format!(
                    "holds {} records, not {}",
                    file.record_type.name(),
                    T::RECORD.name()
                ),
            ));
        }
        let entry = EntryRef {
            topic: &record.topic,
            partition: record.partition,
            offset: record.offset,
            timestamp_ms: record.timestamp_ms,
            key: record.key.as_deref(),
            record: &value,
        };
        let estimate = record.payload.len() as u64
            + record.topic.len() as u64
            + record.key.as_ref().map_or(0, |k| k.len() as u64)
            + ENTRY_OVERHEAD;
        if let Err(e) = file.append(&entry, estimate) {
            let path = file.part.clone();
            self.discard(&key);
            return Err(file_error(&path, e));
        }
        let full = file.size() >= self.options.max_file_bytes;
        self.partitions
            .get_mut(&key)
            .expect("entered above")
            .handled_through = Some(record.offset);
        if full {
            let closed = self.close(&key)?.expect("open above");
            Ok(Appended::Rolled(closed))
        } else {
            Ok(Appended::Written)
        }
    }

    /// Notes that `record` was dead-lettered instead of archived. Its offset
    /// settles with the partition's open file, or now if none is open.
    pub fn dead_lettered(&mut self, record: &InboundRecord) {
        let key = (record.topic.clone(), record.partition);
        let state = self.partitions.entry(key.clone()).or_default();
        state.handled_through = state.handled_through.max(Some(record.offset));
        if !self.open.contains_key(&key) {
            self.settled.push(settled(record));
        }
    }

    /// Closes every file open for `max_file_age` or longer at `now`.
    pub fn roll_due(&mut self, now: Instant) -> Result<Vec<ClosedFile>, ArchiveError> {
        let due: Vec<PartitionKey> = self
            .open
            .iter()
            .filter(|(_, f)| now.saturating_duration_since(f.opened) >= self.options.max_file_age)
            .map(|(k, _)| k.clone())
            .collect();
        self.close_each(due)
    }

    /// Closes every open file (for a shutdown).
    pub fn close_all(&mut self) -> Result<Vec<ClosedFile>, ArchiveError> {
        let all: Vec<PartitionKey> = self.open.keys().cloned().collect();
        self.close_each(all)
    }

    /// The partitions whose offsets may be committed since the last call,
    /// in the order they settled.
    pub fn take_settled(&mut self) -> Vec<ArchivedThrough> {
        std::mem::take(&mut self.settled)
    }

    fn close_each(&mut self, keys: Vec<PartitionKey>) -> Result<Vec<ClosedFile>, ArchiveError> {
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            out.extend(self.close(&key)?);
        }
        Ok(out)
    }

    /// Flushes, fsyncs and renames the open file of `key`, then settles the
    /// partition through its highest handled offset.
    fn close(&mut self, key: &PartitionKey) -> Result<Option<ClosedFile>, ArchiveError> {
        let Some(file) = self.open.remove(key) else {
            return Ok(None);
        };
        let part = file.part.clone();
        let result = file.finish(&key.0, key.1);
        if result.is_err() {
            let _ = fs::remove_file(&part);
        }
        let closed = result?;
        if let Some(through) = self.partitions.get(key).and_then(|s| s.handled_through) {
            self.settled.push(ArchivedThrough {
                topic: key.0.clone(),
                partition: key.1,
                through,
            });
        }
        Ok(Some(closed))
    }

    /// Drops the open file of `key` and deletes it. Its records were not
    /// settled: they come again after a restart.
    fn discard(&mut self, key: &PartitionKey) {
        let Some(file) = self.open.remove(key) else {
            return;
        };
        let (part, first) = (file.part.clone(), file.first);
        drop(file);
        let _ = fs::remove_file(part);
        if let Some(state) = self.partitions.get_mut(key) {
            state.handled_through = Some(first - 1);
        }
    }
}

impl std::fmt::Debug for ArchiveWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveWriter")
            .field("dir", &self.dir)
            .field("options", &self.options)
            .field("open_files", &self.open.len())
            .finish_non_exhaustive()
    }
}

fn settled(record: &InboundRecord) -> ArchivedThrough {
    ArchivedThrough {
        topic: record.topic.clone(),
        partition: record.partition,
        through: record.offset,
    }
}

fn decode<T: AvroRecord>(record: &InboundRecord, limit: usize) -> Result<T, ArchiveError> {
    let undecodable = |error| ArchiveError::Undecodable {
        topic: record.topic.clone(),
        partition: record.partition,
        offset: record.offset,
        error,
    };
    if record.payload.len() > limit {
        return Err(undecodable(DecodeError::Oversized {
            size: record.payload.len(),
            limit,
        }));
    }
    AvroCodec::<T>::default()
        .decode(&record.payload)
        .map_err(undecodable)
}

enum Verdict {
    /// The archived record at this offset is this record.
    Same,
    /// Nothing archived at this offset to compare with (it was dead-lettered).
    Unknown,
    /// Another record is archived at this offset, in this file.
    Foreign(PathBuf),
}

/// Compares `record` with what earlier writers archived at its offset.
fn verify<T: AvroRecord + PartialEq>(
    files: &[ArchiveFile],
    record: &InboundRecord,
    value: &T,
) -> Result<Verdict, ArchiveError> {
    let Some(file) = files
        .iter()
        .find(|f| f.first <= record.offset && record.offset <= f.last)
    else {
        return Ok(Verdict::Unknown);
    };
    let archived = read::<T>(&file.path, T::RECORD)?;
    Ok(match archived.iter().find(|a| a.offset == record.offset) {
        None => Verdict::Unknown,
        Some(a)
            if a.record == *value
                && a.key == record.key
                && a.timestamp_ms == record.timestamp_ms =>
        {
            Verdict::Same
        }
        Some(_) => Verdict::Foreign(file.path.clone()),
    })
}

/// [`ArchiveWriter::append`] for the record type of the topic.
struct AppendTyped<'a> {
    writer: &'a mut ArchiveWriter,
    record: &'a InboundRecord,
}

impl ForRecord for AppendTyped<'_> {
    type Output = Result<Appended, ArchiveError>;
    fn run<T: AvroRecord + PartialEq + std::fmt::Debug>(self) -> Self::Output {
        self.writer.append_typed::<T>(self.record)
    }
}
