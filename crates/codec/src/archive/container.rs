//! The fast path for the high-volume records: an object container file
//! written with the current schema, parsed here and its records decoded
//! directly (`direct_decode`), without apache-avro's generic values.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use apache_avro::Schema;

use super::entry::{Archived, entry_schema};
use super::{ArchiveError, file_error};
use crate::direct_decode::Cursor;
use crate::schemas::{DirectDecoder, RecordType};

/// A file of a high-volume record type written with the current schema,
/// decoded directly (`direct_decode`); `None` when its writer schema is
/// another, for apache-avro and its schema resolution to read.
pub(super) fn read<R>(
    path: &Path,
    record_type: RecordType,
    decode: DirectDecoder<R>,
) -> Result<Option<Vec<Archived<R>>>, ArchiveError> {
    let bytes = fs::read(path).map_err(|e| file_error(path, e))?;
    parse(&bytes, record_type, decode).map_err(|e| file_error(path, e))
}

fn parse<R>(
    bytes: &[u8],
    record_type: RecordType,
    decode: DirectDecoder<R>,
) -> Result<Option<Vec<Archived<R>>>, String> {
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
