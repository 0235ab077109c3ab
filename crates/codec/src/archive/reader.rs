//! Reading archive files back into records.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use apache_avro::Reader;

use super::container;
use super::entry::{Archived, META_RECORD, entry_schema};
use super::layout::list_topic;
use super::{ArchiveError, file_error};
use crate::schemas::{AvroRecord, RecordType};

/// Every record of one archive file, in file order. The file may have been
/// written with an older version of the record's schema: it is read with
/// the current wrapper schema as reader schema, so Avro schema resolution
/// fills fields added since with their defaults.
pub fn read<T: AvroRecord>(
    path: impl AsRef<Path>,
    record_type: RecordType,
) -> Result<Vec<Archived<T>>, ArchiveError> {
    let path = path.as_ref();
    if T::RECORD == record_type
        && let Some(decoder) = T::DIRECT_DECODER
        && let Some(entries) = container::read(path, record_type, decoder)?
    {
        return Ok(entries);
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
