//! The wrapper record every archived datum is, and its schema.

use std::sync::LazyLock;

use apache_avro::Schema;
use serde::{Deserialize, Serialize};

use super::ArchiveError;
use crate::schemas::RecordType;

/// Namespace of the wrapper records.
pub const ENTRY_NAMESPACE: &str = "unicron.archive";
/// OCF user metadata: the topic of the file's records.
pub const META_TOPIC: &str = "unicron.topic";
/// OCF user metadata: their partition.
pub const META_PARTITION: &str = "unicron.partition";
/// OCF user metadata: the record type (`FailureEvent`, ...).
pub const META_RECORD: &str = "unicron.record";

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
pub(super) struct EntryRef<'a, T> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    #[serde(with = "apache_avro::serde_avro_bytes_opt")]
    pub key: Option<&'a [u8]>,
    pub record: &'a T,
}

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
#[cfg(test)]
mod tests {
    use super::*;

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
