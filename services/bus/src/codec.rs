//! Avro encoding of unicron records, raw or in the Confluent wire format.
//!
//! Encoding goes through apache-avro's schema-aware serde serializer
//! (no intermediate `Value`); decoding goes through `Value`, which is also
//! where schema resolution against an older writer schema happens.

use std::marker::PhantomData;
use std::sync::Once;

use apache_avro::Schema;

use crate::error::BusError;
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
    pub fn encode(&self, record: &T) -> Result<Vec<u8>, BusError> {
        let mut out = Vec::with_capacity(256);
        self.write_header(&mut out);
        apache_avro::write_avro_datum_ref(T::RECORD.schema(), record, &mut out)
            .map_err(|e| encode_error::<T>(e.to_string()))?;
        Ok(out)
    }

    /// Encodes through apache-avro's generic `Value`: slower, and Avro maps
    /// come out in `HashMap` order, so equal records may give different
    /// bytes. Kept to measure and cross-check; never used for outputs,
    /// which must be byte-deterministic (DESIGN §4).
    pub fn encode_via_value(&self, record: &T) -> Result<Vec<u8>, BusError> {
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
            && let Some(record) = crate::direct_decode::decode_datum::<T>(datum)
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

fn encode_error<T: AvroRecord>(reason: String) -> BusError {
    BusError::Encode {
        record: T::RECORD.name(),
        reason,
    }
}
