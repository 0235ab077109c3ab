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
//!
//! One concern a file: `entry` the wrapper record and its schema,
//! `layout` the directory and file names, `reader` reading files back,
//! `container` the fast path for the high-volume records, `writer` the
//! writer and the offsets it settles, `open_file` a file being written.

use std::path::{Path, PathBuf};

use crate::codec::DecodeError;

mod container;
mod entry;
mod layout;
mod open_file;
mod reader;
mod writer;

pub use entry::{
    Archived, ENTRY_NAMESPACE, META_PARTITION, META_RECORD, META_TOPIC, entry_schema,
    entry_schema_json,
};
pub use layout::{ArchiveFile, file_name, list, list_topic, remove_partial};
pub use open_file::ClosedFile;
pub use reader::{read, read_topic};
pub use writer::{
    Appended, ArchiveWriter, ArchivedThrough, DEFAULT_MAX_FILE_AGE, DEFAULT_MAX_FILE_BYTES,
    WriterOptions,
};

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
