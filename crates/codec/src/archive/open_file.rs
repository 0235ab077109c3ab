//! One file being written: its `.part` file, the Avro writer over it, and
//! closing it durably under its final name.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use apache_avro::types::Value;
use apache_avro::{Codec, DeflateSettings, Writer};
use serde::Serialize;

use super::entry::{EntryRef, META_PARTITION, META_RECORD, META_TOPIC, entry_schema};
use super::layout::{ArchiveFile, file_name, part_name};
use super::{ArchiveError, file_error};
use crate::record::InboundRecord;
use crate::schemas::RecordType;

/// A file the writer closed (renamed from `.part`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedFile {
    pub file: ArchiveFile,
    pub records: u64,
    pub bytes: u64,
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

/// A partition's file being written, from its first offset to its last.
pub(super) struct OpenFile {
    pub record_type: RecordType,
    writer: Writer<'static, Counted<BufWriter<File>>>,
    topic_dir: PathBuf,
    pub part: PathBuf,
    pub first: i64,
    last: i64,
    records: u64,
    /// Upper bound of the uncompressed bytes in the block being filled.
    pending: u64,
    pub opened: Instant,
}

impl OpenFile {
    /// Its bytes on disk plus the upper bound of the block being filled.
    pub fn size(&self) -> u64 {
        self.writer.get_ref().bytes + self.pending
    }

    /// The `.part` file of `record`'s partition in `dir`, starting at
    /// `record`'s offset, its header written.
    pub fn create(
        dir: &Path,
        record: &InboundRecord,
        record_type: RecordType,
        block_size: usize,
    ) -> Result<OpenFile, ArchiveError> {
        let topic_dir = dir.join(&record.topic);
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
            .block_size(block_size)
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

    /// Appends `entry`; `estimate` bounds its uncompressed size, counted
    /// until its block goes to disk.
    pub fn append<T: Serialize>(
        &mut self,
        entry: &EntryRef<'_, T>,
        estimate: u64,
    ) -> Result<(), apache_avro::Error> {
        let before = self.writer.get_ref().bytes;
        self.writer.append_ser(entry)?;
        self.last = entry.offset;
        self.records += 1;
        if self.writer.get_ref().bytes > before {
            self.pending = 0; // the block, this record included, went to disk
        } else {
            self.pending += estimate;
        }
        Ok(())
    }

    /// Flushes the last block, fsyncs, renames to the closed name and fsyncs
    /// the directory, so the rename survives a power loss too.
    pub fn finish(self, topic: &str, partition: i32) -> Result<ClosedFile, ArchiveError> {
        let OpenFile {
            writer,
            topic_dir,
            part,
            first,
            last,
            records,
            ..
        } = self;
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
}
