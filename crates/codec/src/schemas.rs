//! The Avro schemas of `schemas/`, compiled into the binary and parsed once.

use std::sync::LazyLock;

use apache_avro::Schema;

use crate::direct_decode::Cursor;

pub use crate::record_types::{AvroRecord, DirectDecoder, ForRecord, RecordType};

impl RecordType {
    pub fn from_name(name: &str) -> Option<RecordType> {
        RecordType::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The parsed schema. The committed files are tested to parse, so a
    /// failure here is a build defect, not bad input.
    pub fn schema(self) -> &'static Schema {
        static PARSED: LazyLock<Vec<Schema>> = LazyLock::new(|| {
            RecordType::ALL
                .iter()
                .map(|r| {
                    Schema::parse_str(r.schema_text())
                        .unwrap_or_else(|e| panic!("schemas/{}.avsc: {e}", r.name()))
                })
                .collect()
        });
        &PARSED[self as usize]
    }
}

/// `bytes` decoded directly as `T` if `T` is one of the high-volume
/// records and the bytes are a complete, valid datum of it; `None` sends the
/// caller to apache-avro.
pub fn decode_datum<T: AvroRecord>(bytes: &[u8]) -> Option<T> {
    let decoder = T::DIRECT_DECODER?;
    let mut c = Cursor::new(bytes);
    let record = decoder(&mut c).ok()?;
    c.is_empty().then_some(record)
}
