//! The Avro archive of every unicron topic: Avro object container files
//! (OCF) per topic partition, rolled by size and age, named by their offset
//! range, the writer schema embedded and blocks compressed with Deflate, so
//! any Avro reader opens them. Kafka retention ends; the archive is the
//! long-term audit record that replay reads. Operator docs: `docs/archive.md`.
//!
//! Layout, offsets inclusive:
//!
//! ```text
//! DIR/<topic>/<partition:05>-<first:020>-<last:020>.avro    closed, never written again
//! DIR/<topic>/<partition:05>-<first:020>.avro.part          being written
//! ```
//!
//! A file is renamed from `.part` only once it is flushed and fsynced, so a
//! reader never sees a half-written file. Each datum is a wrapper record
//! (`unicron.archive.<Record>Entry`: topic, partition, offset, Kafka
//! timestamp, key, and the record itself with its schema of `schemas/`).
//!
//! This module is file I/O only; the archiver service feeds it from Kafka.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use apache_avro::types::Value;
use apache_avro::{Codec, DeflateSettings, Reader, Schema, Writer};
use serde::{Deserialize, Serialize};

use crate::codec::{AvroCodec, DecodeError};
use crate::consumer::InboundRecord;
use crate::schemas::{AvroRecord, RecordType};

/// A file is closed once it holds this many bytes (the default).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// A file is closed once it has been open this long (the default).
pub const DEFAULT_MAX_FILE_AGE: Duration = Duration::from_secs(600);
/// Namespace of the wrapper records.
pub const ENTRY_NAMESPACE: &str = "unicron.archive";
/// OCF user metadata: the topic of the file's records.
pub const META_TOPIC: &str = "unicron.topic";
/// OCF user metadata: their partition.
pub const META_PARTITION: &str = "unicron.partition";
/// OCF user metadata: the record type (`FailureEvent`, ...).
pub const META_RECORD: &str = "unicron.record";

const AVRO_SUFFIX: &str = ".avro";
const PART_SUFFIX: &str = ".avro.part";
/// Bytes per wrapper datum on top of the record (strings' lengths, ints,
/// union indexes), an upper bound used to size the block being filled.
const ENTRY_OVERHEAD: u64 = 32;

/// One archived record: where it was in the log, and the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Archived<T> {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    #[serde(default)]
    pub timestamp_ms: Option<i64>,
    #[serde(default, with = "apache_avro::serde_avro_bytes_opt")]
    pub key: Option<Vec<u8>>,
    pub record: T,
}

/// [`Archived`] by reference, for writing without copies.
#[derive(Serialize)]
struct EntryRef<'a, T> {
    topic: &'a str,
    partition: i32,
    offset: i64,
    timestamp_ms: Option<i64>,
    #[serde(with = "apache_avro::serde_avro_bytes_opt")]
    key: Option<&'a [u8]>,
    record: &'a T,
}

/// Errors of the archive. Each names the file, or the record, concerned.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    /// The record cannot be archived: it goes to the dead-letter topic.
    #[error("{topic} partition {partition} offset {offset}: {error}")]
    Undecodable {
        topic: String,
        partition: i32,
        offset: i64,
        error: DecodeError,
    },
    /// The log being archived is not the one the directory holds: offset
    /// `offset` is archived in `path` with another record.
    #[error(
        "{}: offset {offset} of {topic} partition {partition} is archived there with another record: \
         the directory holds another log (a recreated topic, a new embedded broker, another cluster); \
         archive this log to a new directory",
        path.display()
    )]
    ForeignLog {
        path: PathBuf,
        topic: String,
        partition: i32,
        offset: i64,
    },
    #[error("topic `{0}` cannot be archived: a topic name is letters, digits, '.', '_' and '-'")]
    TopicName(String),
    #[error("archive schema: {0}")]
    Schema(String),
}

fn file_error(path: &Path, reason: impl std::fmt::Display) -> ArchiveError {
    ArchiveError::File {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

// ---------------------------------------------------------------------------
// Schema

/// The wrapper schema (JSON) around a record schema given as JSON text: a
/// record `unicron.archive.<Name>Entry` with the fields `topic`,
/// `partition`, `offset`, `timestamp_ms`, `key` and `record`, in that order,
/// `record` being the given schema, embedded. Public so that files written
/// with an older version of a record schema can be made and read in tests.
pub fn entry_schema_json(record_schema: &str) -> Result<String, ArchiveError> {
    let record: serde_json::Value = serde_json::from_str(record_schema)
        .map_err(|e| ArchiveError::Schema(format!("record schema is not JSON: {e}")))?;
    let name = record
        .get("name")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| ArchiveError::Schema("record schema has no name".into()))?;
    let short = name.rsplit('.').next().unwrap_or(name).to_string();
    let entry = serde_json::json!({
        "type": "record",
        "name": format!("{short}Entry"),
        "namespace": ENTRY_NAMESPACE,
        "doc": format!("One record of a unicron topic as archived: where it was in the log, and the {short} itself."),
        "fields": [
            {"name": "topic", "type": "string", "doc": "Topic the record was read from."},
            {"name": "partition", "type": "int", "doc": "Its partition."},
            {"name": "offset", "type": "long", "doc": "Its offset in the partition."},
            {"name": "timestamp_ms", "type": ["null", "long"], "default": null,
             "doc": "Its Kafka timestamp, ms since the Unix epoch, when it had one."},
            {"name": "key", "type": ["null", "bytes"], "default": null, "doc": "Its key, when it had one."},
            {"name": "record", "type": record, "doc": format!("The {short}.")},
        ],
    });
    Ok(entry.to_string())
}

/// The current wrapper schema of `record_type`, parsed once. It is the
/// writer schema of new files and the reader schema of every file.
pub fn entry_schema(record_type: RecordType) -> &'static Schema {
    static PARSED: LazyLock<Vec<Schema>> = LazyLock::new(|| {
        RecordType::ALL
            .iter()
            .map(|r| {
                entry_schema_json(r.schema_text())
                    .and_then(|t| {
                        Schema::parse_str(&t).map_err(|e| ArchiveError::Schema(e.to_string()))
                    })
                    .unwrap_or_else(|e| panic!("archive schema of {}: {e}", r.name()))
            })
            .collect()
    });
    &PARSED[record_type as usize]
}

// ---------------------------------------------------------------------------
// Names and listing

/// A closed archive file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ArchiveFile {
    pub topic: String,
    pub partition: i32,
    /// Offset of its first record.
    pub first: i64,
    /// Offset of its last record.
    pub last: i64,
    pub path: PathBuf,
}

/// `<partition:05>-<first:020>-<last:020>.avro`.
pub fn file_name(partition: i32, first: i64, last: i64) -> String {
    format!("{partition:05}-{first:020}-{last:020}{AVRO_SUFFIX}")
}

fn part_name(partition: i32, first: i64) -> String {
    format!("{partition:05}-{first:020}{PART_SUFFIX}")
}

/// (partition, first, last) of a closed file's name.
fn parse_file_name(name: &str) -> Option<(i32, i64, i64)> {
    let stem = name.strip_suffix(AVRO_SUFFIX)?;
    let mut parts = stem.split('-');
    let mut number = |width: usize| {
        let text = parts.next()?;
        (text.len() >= width && text.bytes().all(|b| b.is_ascii_digit())).then_some(text)
    };
    let partition = number(5)?.parse().ok()?;
    let first = number(20)?.parse().ok()?;
    let last = number(20)?.parse().ok()?;
    (parts.next().is_none() && first <= last).then_some((partition, first, last))
}

/// A topic name is used as a directory name: only Kafka's legal characters,
/// and not `.` or `..`.
fn check_topic(topic: &str) -> Result<(), ArchiveError> {
    let legal = !topic.is_empty()
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if legal {
        Ok(())
    } else {
        Err(ArchiveError::TopicName(topic.to_string()))
    }
}

/// Every closed file under `dir`, sorted by topic, partition and first
/// offset. `.part` files (being written) and other files are skipped.
pub fn list(dir: impl AsRef<Path>) -> Result<Vec<ArchiveFile>, ArchiveError> {
    let dir = dir.as_ref();
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| file_error(dir, e))? {
        let entry = entry.map_err(|e| file_error(dir, e))?;
        let is_dir = entry
            .file_type()
            .map_err(|e| file_error(&entry.path(), e))?
            .is_dir();
        if let (true, Some(topic)) = (is_dir, entry.file_name().to_str()) {
            list_topic_dir(&entry.path(), topic, &mut out)?;
        }
    }
    out.sort();
    Ok(out)
}

/// The closed files of `topic` under `dir`, sorted by partition and first
/// offset; none if the topic was never archived there.
pub fn list_topic(dir: impl AsRef<Path>, topic: &str) -> Result<Vec<ArchiveFile>, ArchiveError> {
    let dir = dir.as_ref();
    check_topic(topic)?;
    fs::metadata(dir).map_err(|e| file_error(dir, e))?;
    let topic_dir = dir.join(topic);
    let mut out = Vec::new();
    if topic_dir.is_dir() {
        list_topic_dir(&topic_dir, topic, &mut out)?;
    }
    out.sort();
    Ok(out)
}

fn list_topic_dir(
    topic_dir: &Path,
    topic: &str,
    out: &mut Vec<ArchiveFile>,
) -> Result<(), ArchiveError> {
    for entry in fs::read_dir(topic_dir).map_err(|e| file_error(topic_dir, e))? {
        let entry = entry.map_err(|e| file_error(topic_dir, e))?;
        let name = entry.file_name();
        if let Some((partition, first, last)) = name.to_str().and_then(parse_file_name) {
            out.push(ArchiveFile {
                topic: topic.to_string(),
                partition,
                first,
                last,
                path: entry.path(),
            });
        }
    }
    Ok(())
}

/// Deletes every `.part` file under `dir` (files a stopped writer left
/// unfinished; their records were never committed, so the archiver reads
/// them again) and returns their paths.
pub fn remove_partial(dir: impl AsRef<Path>) -> Result<Vec<PathBuf>, ArchiveError> {
    let dir = dir.as_ref();
    let mut removed = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| file_error(dir, e))? {
        let topic_dir = entry.map_err(|e| file_error(dir, e))?.path();
        if !topic_dir.is_dir() {
            continue;
        }
        for file in fs::read_dir(&topic_dir).map_err(|e| file_error(&topic_dir, e))? {
            let path = file.map_err(|e| file_error(&topic_dir, e))?.path();
            let partial = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(PART_SUFFIX));
            if partial {
                fs::remove_file(&path).map_err(|e| file_error(&path, e))?;
                removed.push(path);
            }
        }
    }
    removed.sort();
    Ok(removed)
}

// ---------------------------------------------------------------------------
// Reading

/// Every record of one archive file, in file order. The file may have been
/// written with an older version of the record's schema: it is read with
/// the current wrapper schema as reader schema, so Avro schema resolution
/// fills fields added since with their defaults.
pub fn read<T: AvroRecord>(
    path: impl AsRef<Path>,
    record_type: RecordType,
) -> Result<Vec<Archived<T>>, ArchiveError> {
    let path = path.as_ref();
    if T::RECORD == record_type {
        use crate::direct_decode::{agent_event, telemetry_batch};
        let fast: Option<Box<dyn std::any::Any>> = match record_type {
            RecordType::TelemetryBatch => read_fast(path, record_type, telemetry_batch)?
                .map(|v| Box::new(v) as Box<dyn std::any::Any>),
            RecordType::AgentEvent => read_fast(path, record_type, agent_event)?
                .map(|v| Box::new(v) as Box<dyn std::any::Any>),
            _ => None,
        };
        if let Some(entries) = fast {
            return Ok(*entries
                .downcast::<Vec<Archived<T>>>()
                .expect("the decoder of T's record type gives T"));
        }
    }
    if record_type != T::RECORD {
        return Err(file_error(
            path,
            format!(
                "asked to read {} records into {}",
                record_type.name(),
                T::RECORD.name()
            ),
        ));
    }
    let open = || {
        File::open(path)
            .map(BufReader::new)
            .map_err(|e| file_error(path, e))
    };
    // Resolution against the reader schema costs a copy of every value; a
    // file written with the current schema (the usual case) skips it.
    let current = entry_schema(record_type);
    let plain = Reader::new(open()?).map_err(|e| file_error(path, e))?;
    let reader = if plain.writer_schema() == current {
        plain
    } else {
        Reader::with_schema(current, open()?).map_err(|e| file_error(path, e))?
    };
    if let Some(written) = reader.user_metadata().get(META_RECORD)
        && written.as_slice() != record_type.name().as_bytes()
    {
        return Err(file_error(
            path,
            format!(
                "holds {} records, not {}",
                String::from_utf8_lossy(written),
                record_type.name()
            ),
        ));
    }
    let mut out = Vec::new();
    for value in reader {
        let value = value.map_err(|e| file_error(path, e))?;
        let entry = apache_avro::from_value::<Archived<T>>(&value)
            .map_err(|e| file_error(path, format!("record {}: {e}", out.len())))?;
        out.push(entry);
    }
    Ok(out)
}

/// A file of a high-volume record type written with the current schema,
/// decoded directly (`direct_decode`); `None` when its writer schema is
/// another, for apache-avro and its schema resolution to read.
fn read_fast<R>(
    path: &Path,
    record_type: RecordType,
    decode: fn(&mut crate::direct_decode::Cursor<'_>) -> Result<R, String>,
) -> Result<Option<Vec<Archived<R>>>, ArchiveError> {
    let bytes = fs::read(path).map_err(|e| file_error(path, e))?;
    parse_fast(&bytes, record_type, decode).map_err(|e| file_error(path, e))
}

fn parse_fast<R>(
    bytes: &[u8],
    record_type: RecordType,
    decode: fn(&mut crate::direct_decode::Cursor<'_>) -> Result<R, String>,
) -> Result<Option<Vec<Archived<R>>>, String> {
    use crate::direct_decode::Cursor;
    let mut c = Cursor::new(bytes);
    if c.take(4)? != b"Obj\x01" {
        return Err("not an Avro object container file".into());
    }
    let mut meta: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    loop {
        let mut n = c.long()?;
        if n == 0 {
            break;
        }
        if n < 0 {
            n = -n;
            c.long()?;
        }
        for _ in 0..n {
            let key = c.string()?;
            meta.insert(key, c.bytes()?.to_vec());
        }
    }
    let sync = c.take(16)?;
    let writer: Schema = match meta
        .get("avro.schema")
        .map(|s| Schema::parse_str(&String::from_utf8_lossy(s)))
    {
        Some(Ok(schema)) => schema,
        _ => return Ok(None),
    };
    if writer != *entry_schema(record_type) {
        return Ok(None);
    }
    let deflate = match meta.get("avro.codec").map(Vec::as_slice) {
        None | Some(b"null") => false,
        Some(b"deflate") => true,
        Some(_) => return Ok(None),
    };
    let mut out = Vec::new();
    while !c.is_empty() {
        let count = usize::try_from(c.long()?).map_err(|_| "negative block count")?;
        let data = c.bytes()?;
        if c.take(16)? != sync {
            return Err("sync marker does not match".into());
        }
        let inflated;
        let block = if deflate {
            inflated = miniz_oxide::inflate::decompress_to_vec(data)
                .map_err(|e| format!("deflate: {e:?}"))?;
            &inflated[..]
        } else {
            data
        };
        let mut b = Cursor::new(block);
        for _ in 0..count {
            let topic = b.string()?;
            let partition = b.int()?;
            let offset = b.long()?;
            let timestamp_ms = if b.optional()? { Some(b.long()?) } else { None };
            let key = if b.optional()? {
                Some(b.bytes()?.to_vec())
            } else {
                None
            };
            let record = decode(&mut b)?;
            out.push(Archived {
                topic,
                partition,
                offset,
                timestamp_ms,
                key,
                record,
            });
        }
        if !b.is_empty() {
            return Err("block has bytes after its records".into());
        }
    }
    Ok(Some(out))
}

/// Every archived record of `topic` under `dir`, in (partition, offset)
/// order. Files that overlap (a range archived again after a crash, before
/// its offsets were committed) give each offset once.
pub fn read_topic<T: AvroRecord>(
    dir: impl AsRef<Path>,
    topic: &str,
) -> Result<Vec<Archived<T>>, ArchiveError> {
    let mut out: Vec<Archived<T>> = Vec::new();
    let mut last: BTreeMap<i32, i64> = BTreeMap::new();
    for file in list_topic(dir, topic)? {
        for entry in read::<T>(&file.path, T::RECORD)? {
            let seen = last.entry(entry.partition).or_insert(i64::MIN);
            if entry.offset > *seen {
                *seen = entry.offset;
                out.push(entry);
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Writing

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

/// A file the writer closed (renamed from `.part`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedFile {
    pub file: ArchiveFile,
    pub records: u64,
    pub bytes: u64,
}

/// Every record of `partition` up to and including offset `through` is
/// archived in a closed file or was dead-lettered: its offset may be
/// committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
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

/// Counts the bytes written through it.
struct Counted<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

struct OpenFile {
    record_type: RecordType,
    writer: Writer<'static, Counted<BufWriter<File>>>,
    topic_dir: PathBuf,
    part: PathBuf,
    first: i64,
    last: i64,
    records: u64,
    /// Upper bound of the uncompressed bytes in the block being filled.
    pending: u64,
    opened: Instant,
}

impl OpenFile {
    fn size(&self) -> u64 {
        self.writer.get_ref().bytes + self.pending
    }
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
    settled: Vec<Settled>,
    removed: Vec<PathBuf>,
}

macro_rules! with_record_type {
    ($record_type:expr, $t:ident => $body:expr) => {
        match $record_type {
            RecordType::TelemetryBatch => {
                type $t = unicron_core::TelemetryBatch;
                $body
            }
            RecordType::LogRecord => {
                type $t = unicron_core::LogRecord;
                $body
            }
            RecordType::AgentEvent => {
                type $t = unicron_core::AgentEvent;
                $body
            }
            RecordType::FailureEvent => {
                type $t = unicron_core::FailureEvent;
                $body
            }
            RecordType::ClusterEvent => {
                type $t = unicron_core::ClusterEvent;
                $body
            }
            RecordType::Decision => {
                type $t = unicron_core::Decision;
                $body
            }
            RecordType::Command => {
                type $t = unicron_core::Command;
                $body
            }
            RecordType::CommandResult => {
                type $t = unicron_core::CommandResult;
                $body
            }
            RecordType::DeadLetter => {
                type $t = unicron_core::DeadLetter;
                $body
            }
        }
    };
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
        with_record_type!(record_type, T => self.append_typed::<T>(record))
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
            let file = self.create(record, T::RECORD)?;
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
        let before = file.writer.get_ref().bytes;
        if let Err(e) = file.writer.append_ser(&entry) {
            let path = file.part.clone();
            self.discard(&key);
            return Err(file_error(&path, e));
        }
        file.last = record.offset;
        file.records += 1;
        if file.writer.get_ref().bytes > before {
            file.pending = 0; // the block, this record included, went to disk
        } else {
            file.pending += record.payload.len() as u64
                + record.topic.len() as u64
                + record.key.as_ref().map_or(0, |k| k.len() as u64)
                + ENTRY_OVERHEAD;
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
    pub fn take_settled(&mut self) -> Vec<Settled> {
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
        let result = finish(file, &key.0, key.1);
        if result.is_err() {
            let _ = fs::remove_file(&part);
        }
        let closed = result?;
        if let Some(through) = self.partitions.get(key).and_then(|s| s.handled_through) {
            self.settled.push(Settled {
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

    fn create(
        &self,
        record: &InboundRecord,
        record_type: RecordType,
    ) -> Result<OpenFile, ArchiveError> {
        let topic_dir = self.dir.join(&record.topic);
        fs::create_dir_all(&topic_dir).map_err(|e| file_error(&topic_dir, e))?;
        let part = topic_dir.join(part_name(record.partition, record.offset));
        let file = File::create(&part).map_err(|e| file_error(&part, e))?;
        let metadata: HashMap<String, Value> = [
            (META_TOPIC, record.topic.clone()),
            (META_PARTITION, record.partition.to_string()),
            (META_RECORD, record_type.name().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::Bytes(v.into_bytes())))
        .collect();
        let mut writer = Writer::builder()
            .schema(entry_schema(record_type))
            .writer(Counted {
                inner: BufWriter::with_capacity(64 * 1024, file),
                bytes: 0,
            })
            .codec(Codec::Deflate(DeflateSettings::default()))
            .block_size(self.options.block_size())
            .user_metadata(metadata)
            .build();
        // The header (schema, codec, metadata) now, so size counts it.
        writer.flush().map_err(|e| file_error(&part, e))?;
        Ok(OpenFile {
            record_type,
            writer,
            topic_dir,
            part,
            first: record.offset,
            last: record.offset,
            records: 0,
            pending: 0,
            opened: Instant::now(),
        })
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

fn settled(record: &InboundRecord) -> Settled {
    Settled {
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

/// Flushes the last block, fsyncs, renames to the closed name and fsyncs
/// the directory, so the rename survives a power loss too.
fn finish(file: OpenFile, topic: &str, partition: i32) -> Result<ClosedFile, ArchiveError> {
    let OpenFile {
        writer,
        topic_dir,
        part,
        first,
        last,
        records,
        ..
    } = file;
    let counted = writer.into_inner().map_err(|e| file_error(&part, e))?;
    let bytes = counted.bytes;
    let handle = counted
        .inner
        .into_inner()
        .map_err(|e| file_error(&part, e.into_error()))?;
    handle.sync_all().map_err(|e| file_error(&part, e))?;
    drop(handle);
    let path = topic_dir.join(file_name(partition, first, last));
    if path.exists() {
        return Err(file_error(
            &path,
            "exists already; an archived file is never overwritten",
        ));
    }
    fs::rename(&part, &path).map_err(|e| file_error(&part, e))?;
    File::open(&topic_dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| file_error(&topic_dir, e))?;
    Ok(ClosedFile {
        file: ArchiveFile {
            topic: topic.to_string(),
            partition,
            first,
            last,
            path,
        },
        records,
        bytes,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_part_files_do_not_parse() {
        let name = file_name(3, 0, 41);
        assert_eq!(name, "00003-00000000000000000000-00000000000000000041.avro");
        assert_eq!(parse_file_name(&name), Some((3, 0, 41)));
        assert_eq!(parse_file_name(&part_name(3, 0)), None);
        assert_eq!(
            parse_file_name("00003-00000000000000000041-00000000000000000000.avro"),
            None
        );
        assert_eq!(parse_file_name("3-0-41.avro"), None);
        assert_eq!(parse_file_name("notes.txt"), None);
    }

    #[test]
    fn topic_names_are_checked() {
        check_topic("unicron.command-results").unwrap();
        for bad in ["", ".", "..", "a/b", "a b", "../x"] {
            assert!(check_topic(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_entry_schema_parses_with_fields_in_order() {
        for record_type in RecordType::ALL {
            let Schema::Record(record) = entry_schema(record_type) else {
                panic!("{} entry is not a record", record_type.name());
            };
            assert_eq!(
                record.name.fullname(None),
                format!("unicron.archive.{}Entry", record_type.name())
            );
            let names: Vec<&str> = record.fields.iter().map(|f| f.name.as_str()).collect();
            assert_eq!(
                names,
                [
                    "topic",
                    "partition",
                    "offset",
                    "timestamp_ms",
                    "key",
                    "record"
                ]
            );
            assert_eq!(&record.fields[5].schema, record_type.schema());
        }
    }
}
