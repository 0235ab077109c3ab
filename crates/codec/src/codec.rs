//! Avro encoding of unicron records, raw or in the Confluent wire format.
//!
//! Encoding goes through apache-avro's schema-aware serde serializer
//! (no intermediate `Value`); decoding goes through `Value`, which is also
//! where schema resolution against an older writer schema happens.

use std::marker::PhantomData;
use std::sync::Once;

use apache_avro::Schema;

use crate::direct_decode::Cursor;
use crate::error::CodecError;
use crate::schemas::AvroRecord;

/// Confluent wire format: magic byte 0, then the schema id (big-endian u32).
const CONFLUENT_MAGIC: u8 = 0;
const CONFLUENT_HEADER: usize = 5;

/// The most apache-avro may allocate for one decoded value. A corrupt length
/// prefix must fail fast instead of reserving gigabytes.
const MAX_DECODE_ALLOCATION: usize = 64 * 1024 * 1024;

/// How records are framed on a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// The bare Avro datum.
    #[default]
    Raw,
    /// Magic byte and schema id before the datum, as Schema Registry
    /// serializers write it. Decoding checks both.
    Confluent { schema_id: u32 },
}

/// Why a record could not be decoded. The text ends up in the dead letter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("empty record")]
    Empty,
    #[error("confluent framing: {0}")]
    Framing(String),
    #[error("avro {record}: {reason}")]
    Avro {
        record: &'static str,
        reason: String,
    },
    #[error("avro {record}: {count} trailing bytes after the datum")]
    Trailing { record: &'static str, count: usize },
    #[error("record of {size} bytes exceeds the limit of {limit} bytes")]
    Oversized { size: usize, limit: usize },
    #[error("invalid {record}: {reason}")]
    Invalid {
        record: &'static str,
        reason: String,
    },
}

/// Encoder and decoder of one record type.
#[derive(Debug, Clone, Copy)]
pub struct AvroCodec<T> {
    framing: Framing,
    _record: PhantomData<fn() -> T>,
}

impl<T> Default for AvroCodec<T> {
    fn default() -> Self {
        Self::new(Framing::Raw)
    }
}

impl<T> AvroCodec<T> {
    pub fn new(framing: Framing) -> Self {
        static LIMIT: Once = Once::new();
        LIMIT.call_once(|| {
            apache_avro::util::max_allocation_bytes(MAX_DECODE_ALLOCATION);
        });
        AvroCodec {
            framing,
            _record: PhantomData,
        }
    }

    pub fn framing(&self) -> Framing {
        self.framing
    }
}

impl<T: AvroRecord> AvroCodec<T> {
    /// Encodes with the direct serde serializer (the fast path).
    pub fn encode(&self, record: &T) -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::with_capacity(256);
        self.write_header(&mut out);
        apache_avro::write_avro_datum_ref(T::RECORD.schema(), record, &mut out)
            .map_err(|e| encode_error::<T>(e.to_string()))?;
        Ok(out)
    }

    /// Encodes through apache-avro's generic `Value`: slower, and Avro maps
    /// come out in `HashMap` order, so equal records may give different
    /// bytes. Kept to measure and cross-check; never used for outputs,
    /// which must be byte-deterministic (docs/design.md §4).
    pub fn encode_via_value(&self, record: &T) -> Result<Vec<u8>, CodecError> {
        let value = apache_avro::to_value(record).map_err(|e| encode_error::<T>(e.to_string()))?;
        let value = value
            .resolve(T::RECORD.schema())
            .map_err(|e| encode_error::<T>(e.to_string()))?;
        let datum = apache_avro::to_avro_datum(T::RECORD.schema(), value)
            .map_err(|e| encode_error::<T>(e.to_string()))?;
        let mut out = Vec::with_capacity(CONFLUENT_HEADER + datum.len());
        self.write_header(&mut out);
        out.extend_from_slice(&datum);
        Ok(out)
    }

    /// Decodes a record written with the current schema. The two
    /// high-volume records take the direct decoder; anything it refuses goes
    /// through apache-avro, whose error is the one reported.
    pub fn decode(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        if let Ok(datum) = self.strip_header(bytes)
            && let Some(record) = crate::schemas::decode_datum::<T>(datum)
        {
            return Ok(record);
        }
        self.decode_written_by(T::RECORD.schema(), bytes)
    }

    /// Decodes a record written with `writer` (e.g. an older version of the
    /// schema) and resolves it to the current one.
    pub fn decode_written_by(&self, writer: &Schema, bytes: &[u8]) -> Result<T, DecodeError> {
        let record = T::RECORD.name();
        let mut datum = self.strip_header(bytes)?;
        let avro = |e: apache_avro::Error| DecodeError::Avro {
            record,
            reason: e.to_string(),
        };
        let reader = T::RECORD.schema();
        let resolve_to = (!std::ptr::eq(writer, reader)).then_some(reader);
        // apache-avro reserves what a length prefix claims (up to 64 MiB of
        // items, each item a `Value` of tens of bytes) before reading the
        // items: 16 bytes claiming 2^25 map entries took 5 GB. Check every
        // length against the bytes left first.
        check_lengths(writer, datum).map_err(|reason| DecodeError::Avro { record, reason })?;
        let value = apache_avro::from_avro_datum(writer, &mut datum, resolve_to).map_err(avro)?;
        if !datum.is_empty() {
            return Err(DecodeError::Trailing {
                record,
                count: datum.len(),
            });
        }
        apache_avro::from_value::<T>(&value).map_err(avro)
    }

    fn write_header(&self, out: &mut Vec<u8>) {
        if let Framing::Confluent { schema_id } = self.framing {
            out.push(CONFLUENT_MAGIC);
            out.extend_from_slice(&schema_id.to_be_bytes());
        }
    }

    fn strip_header<'b>(&self, bytes: &'b [u8]) -> Result<&'b [u8], DecodeError> {
        if bytes.is_empty() {
            return Err(DecodeError::Empty);
        }
        match self.framing {
            Framing::Raw => Ok(bytes),
            Framing::Confluent { schema_id } => {
                if bytes.len() < CONFLUENT_HEADER {
                    return Err(DecodeError::Framing(format!(
                        "{} bytes is shorter than the 5-byte header",
                        bytes.len()
                    )));
                }
                if bytes[0] != CONFLUENT_MAGIC {
                    return Err(DecodeError::Framing(format!(
                        "magic byte {} is not 0",
                        bytes[0]
                    )));
                }
                let id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
                if id != schema_id {
                    return Err(DecodeError::Framing(format!(
                        "schema id {id} is not the configured {schema_id}"
                    )));
                }
                Ok(&bytes[CONFLUENT_HEADER..])
            }
        }
    }
}

/// Walks `datum` as `schema` writes it and fails if a string, bytes or fixed
/// length, or an array or map block count, claims more than the bytes left
/// (every item of unicron's schemas takes at least one byte). Anything else
/// wrong, and what it does not model (named references, zero-byte items),
/// ends the walk and is left to apache-avro, whose error is the one
/// reported.
fn check_lengths(schema: &Schema, datum: &[u8]) -> Result<(), String> {
    let mut cursor = Cursor::new(datum);
    match walk(schema, &mut cursor, 0) {
        Ok(()) | Err(Walk::Stop) => Ok(()),
        Err(Walk::TooLong { claim, at, left }) => Err(format!(
            "length {claim} at byte {at} exceeds the {left} bytes left"
        )),
    }
}

enum Walk {
    /// Malformed or not modelled here: apache-avro decides.
    Stop,
    TooLong {
        claim: u64,
        at: usize,
        left: usize,
    },
}

impl From<String> for Walk {
    fn from(_: String) -> Walk {
        Walk::Stop
    }
}

/// unicron's schemas nest a few levels; deeper is left to apache-avro.
const MAX_DEPTH: usize = 64;

/// `claim` (read at byte `at`) if that many bytes are left.
fn within(c: &Cursor<'_>, claim: u64, at: usize) -> Result<usize, Walk> {
    if claim > c.remaining() as u64 {
        return Err(Walk::TooLong {
            claim,
            at,
            left: c.remaining(),
        });
    }
    Ok(claim as usize)
}

fn walk(schema: &Schema, c: &mut Cursor<'_>, depth: usize) -> Result<(), Walk> {
    if depth > MAX_DEPTH {
        return Err(Walk::Stop);
    }
    match schema {
        Schema::Null => {}
        Schema::Boolean => {
            c.take(1)?;
        }
        Schema::Int
        | Schema::Long
        | Schema::Enum(_)
        | Schema::Date
        | Schema::TimeMillis
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => {
            c.long()?;
        }
        Schema::Float => {
            c.take(4)?;
        }
        Schema::Double => {
            c.take(8)?;
        }
        Schema::Bytes | Schema::String | Schema::BigDecimal | Schema::Uuid => {
            let at = c.position();
            let claim = c.long()?;
            if claim < 0 {
                return Err(Walk::Stop);
            }
            let n = within(c, claim as u64, at)?;
            c.take(n)?;
        }
        Schema::Fixed(fixed) => {
            let at = c.position();
            let n = within(c, fixed.size as u64, at)?;
            c.take(n)?;
        }
        Schema::Duration => {
            c.take(12)?;
        }
        Schema::Decimal(decimal) => walk(&decimal.inner, c, depth + 1)?,
        Schema::Union(union) => {
            let index = c.long()?;
            let variant = usize::try_from(index)
                .ok()
                .and_then(|i| union.variants().get(i))
                .ok_or(Walk::Stop)?;
            walk(variant, c, depth + 1)?;
        }
        Schema::Record(record) => {
            for field in &record.fields {
                walk(&field.schema, c, depth + 1)?;
            }
        }
        Schema::Array(array) => blocks(c, depth, None, &array.items)?,
        Schema::Map(map) => blocks(c, depth, Some(&Schema::String), &map.types)?,
        Schema::Ref { .. } => return Err(Walk::Stop),
    }
    Ok(())
}

/// The blocks of an array (`key: None`) or map.
fn blocks(
    c: &mut Cursor<'_>,
    depth: usize,
    key: Option<&Schema>,
    items: &Schema,
) -> Result<(), Walk> {
    if key.is_none() && !takes_a_byte(items) {
        return Err(Walk::Stop);
    }
    loop {
        let at = c.position();
        let count = c.long()?;
        if count == 0 {
            return Ok(());
        }
        if count < 0 {
            c.long()?; // the block's size in bytes
        }
        let n = within(c, count.unsigned_abs(), at)?;
        for _ in 0..n {
            if let Some(key) = key {
                walk(key, c, depth + 1)?;
            }
            walk(items, c, depth + 1)?;
        }
    }
}

/// Whether every value of `schema` takes at least one byte.
fn takes_a_byte(schema: &Schema) -> bool {
    match schema {
        Schema::Null | Schema::Ref { .. } => false,
        Schema::Record(record) => record.fields.iter().any(|f| takes_a_byte(&f.schema)),
        Schema::Fixed(fixed) => fixed.size > 0,
        Schema::Decimal(decimal) => takes_a_byte(&decimal.inner),
        _ => true,
    }
}

fn encode_error<T: AvroRecord>(reason: String) -> CodecError {
    CodecError::Encode {
        record: T::RECORD.name(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schemas::RecordType;

    /// A fuzz find: 16 bytes, a LogRecord whose attributes map claims 2^25
    /// entries, made apache-avro reserve 5 GB before reading the first.
    #[test]
    fn a_huge_count_is_refused_before_apache_avro_reserves_it() {
        let bytes = [
            2, b'c', 2, b'n', 0, 2, b's', 0, 0, 0, 2, b'l', 0x80, 0x80, 0x80, 0x20,
        ];
        let err = AvroCodec::<unicron_core::LogRecord>::default()
            .decode(&bytes)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "avro LogRecord: length 33554432 at byte 12 exceeds the 0 bytes left"
        );
        // A string length claiming more than is there.
        let err = AvroCodec::<unicron_core::CommandResult>::default()
            .decode(&[0x80, 0x80, 0x80, 0x20])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "avro CommandResult: length 33554432 at byte 0 exceeds the 0 bytes left"
        );
    }

    /// The length check covers the whole of every schema: no named
    /// references and no zero-byte array items, where it would stop early.
    #[test]
    fn every_schema_is_fully_length_checked() {
        fn covered(schema: &Schema) -> bool {
            match schema {
                Schema::Ref { .. } => false,
                Schema::Array(a) => takes_a_byte(&a.items) && covered(&a.items),
                Schema::Map(m) => covered(&m.types),
                Schema::Union(u) => u.variants().iter().all(covered),
                Schema::Record(r) => r.fields.iter().all(|f| covered(&f.schema)),
                _ => true,
            }
        }
        for record in RecordType::ALL {
            assert!(covered(record.schema()), "{}", record.name());
        }
    }
}
