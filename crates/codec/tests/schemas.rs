//! Every record type round-trips through its Avro schema, the schemas stay
//! readable by the previous version's readers (and the reverse), and bad
//! bytes give errors, never panics.

use unicron_codec::samples;

use apache_avro::Schema;
use apache_avro::schema_compatibility::SchemaCompatibility;
use proptest::prelude::*;
use unicron_codec::schemas::{AvroRecord, RecordType};
use unicron_codec::{AvroCodec, DecodeError, Framing};
use unicron_core::{FailureKind, LogRecord};

fn round_trip<T: AvroRecord + PartialEq + std::fmt::Debug>(record: T) {
    for framing in [Framing::Raw, Framing::Confluent { schema_id: 7 }] {
        let codec = AvroCodec::<T>::new(framing);
        let bytes = codec.encode(&record).unwrap();
        assert_eq!(
            codec.decode(&bytes).unwrap(),
            record,
            "{}",
            T::RECORD.name()
        );
        // The Value path writes Avro maps in HashMap order, so only the
        // decoded records, not the bytes, must agree.
        let via_value = codec.encode_via_value(&record).unwrap();
        assert_eq!(via_value.len(), bytes.len());
        assert_eq!(
            codec.decode(&via_value).unwrap(),
            record,
            "{}",
            T::RECORD.name()
        );
    }
}

#[test]
fn every_record_type_round_trips_through_its_schema() {
    for full in [true, false] {
        round_trip(samples::telemetry(full));
        round_trip(samples::log(full));
        round_trip(samples::agent(full));
        round_trip(samples::failure(full));
        round_trip(samples::cluster(full));
        round_trip(samples::decision(full));
        round_trip(samples::command(full));
        round_trip(samples::result(full));
        round_trip(samples::dead_letter(full));
        round_trip(samples::checkpoint(full));
        round_trip(samples::round(full));
    }
}

/// Decisions are compared byte for byte on replay (docs/design.md §4): the direct
/// encoder writes maps in BTreeMap order, so equal records give equal bytes.
#[test]
fn direct_encoding_is_byte_deterministic() {
    let codec = AvroCodec::<unicron_core::Decision>::default();
    let mut decision = samples::decision(true);
    for job in ["z", "a", "m", "b", "y", "c"] {
        decision.alternatives[0]
            .allocation
            .insert(job.to_string(), 8);
        decision
            .assignment
            .insert(job.to_string(), vec![format!("node-{job}")]);
    }
    let first = codec.encode(&decision).unwrap();
    for _ in 0..20 {
        assert_eq!(codec.encode(&decision.clone()).unwrap(), first);
    }
}

#[test]
fn failure_kind_symbols_are_exactly_the_taxonomy() {
    let Schema::Record(record) = RecordType::FailureEvent.schema() else {
        panic!("FailureEvent is a record")
    };
    let kind = record.fields.iter().find(|f| f.name == "kind").unwrap();
    let Schema::Enum(e) = &kind.schema else {
        panic!("kind is an enum")
    };
    let ours: Vec<&str> = FailureKind::ALL.iter().map(|k| k.symbol()).collect();
    assert_eq!(e.symbols, ours);
    assert_eq!(e.default.as_deref(), Some("unknown"));
}

fn previous_text(record: RecordType) -> Option<String> {
    let path = format!(
        "{}/../../schemas/compat/v1/{}.avsc",
        env!("CARGO_MANIFEST_DIR"),
        record.name()
    );
    std::fs::read_to_string(&path).ok()
}

fn previous(record: RecordType) -> Schema {
    Schema::parse_str(&previous_text(record).expect("released in v1")).unwrap()
}

/// Record types v1 did not have: nothing old to stay compatible with.
const SINCE_V1: [RecordType; 2] = [RecordType::PlannerCheckpoint, RecordType::DetectorRound];

/// `schema` as JSON with each enum's symbols cut to those `old` has for
/// the enum of that name, where `old`'s enum has a default: what an old
/// reader actually meets, since Avro resolves a symbol it does not know to
/// the reader's default (apache-avro's checker is stricter than that).
fn known_symbols_only(schema: &str, old: &str) -> String {
    fn enums(v: &serde_json::Value, out: &mut Vec<(String, Vec<serde_json::Value>)>) {
        match v {
            serde_json::Value::Object(o) => {
                if o.get("type").and_then(|t| t.as_str()) == Some("enum")
                    && o.contains_key("default")
                {
                    let name = o["name"].as_str().unwrap_or_default().to_string();
                    out.push((name, o["symbols"].as_array().cloned().unwrap_or_default()));
                }
                o.values().for_each(|v| enums(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| enums(v, out)),
            _ => {}
        }
    }
    fn cut(v: &mut serde_json::Value, old: &[(String, Vec<serde_json::Value>)]) {
        match v {
            serde_json::Value::Object(o) => {
                if o.get("type").and_then(|t| t.as_str()) == Some("enum")
                    && let Some((_, known)) = old
                        .iter()
                        .find(|(n, _)| Some(n.as_str()) == o["name"].as_str())
                    && let Some(symbols) = o.get_mut("symbols").and_then(|s| s.as_array_mut())
                {
                    symbols.retain(|s| known.contains(s));
                }
                o.values_mut().for_each(|v| cut(v, old));
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|v| cut(v, old)),
            _ => {}
        }
    }
    let mut old_enums = Vec::new();
    enums(&serde_json::from_str(old).unwrap(), &mut old_enums);
    let mut value: serde_json::Value = serde_json::from_str(schema).unwrap();
    cut(&mut value, &old_enums);
    value.to_string()
}

/// Old readers can read what we write now, and we can read what they wrote.
#[test]
fn current_schemas_are_compatible_with_the_previous_version() {
    for record in RecordType::ALL {
        let Some(old_text) = previous_text(record) else {
            assert!(SINCE_V1.contains(&record), "{}: not in v1", record.name());
            continue;
        };
        let (old, new) = (previous(record), record.schema());
        let as_old_readers_see_it =
            Schema::parse_str(&known_symbols_only(record.schema_text(), &old_text)).unwrap();
        SchemaCompatibility::can_read(&as_old_readers_see_it, &old)
            .unwrap_or_else(|e| panic!("{}: old readers break: {e}", record.name()));
        SchemaCompatibility::can_read(&old, new)
            .unwrap_or_else(|e| panic!("{}: old data unreadable: {e}", record.name()));
    }
}

/// A symbol added since v1 reaches a v1 reader as its enum's default.
#[test]
fn old_readers_meet_new_symbols_as_the_default() {
    use unicron_core::{ClusterEvent, ClusterEventKind};
    let codec = AvroCodec::<ClusterEvent>::new(Framing::Raw);
    let mut event = ClusterEvent::new("c", 1, ClusterEventKind::NodeDown);
    event.node = Some("n1".into());
    let bytes = codec.encode(&event).unwrap();
    let old = previous(RecordType::ClusterEvent);
    let value = apache_avro::from_avro_datum(
        RecordType::ClusterEvent.schema(),
        &mut bytes.as_slice(),
        Some(&old),
    )
    .unwrap();
    let apache_avro::types::Value::Record(fields) = value else {
        panic!("{value:?}")
    };
    let kind = &fields.iter().find(|(n, _)| n == "kind").unwrap().1;
    assert_eq!(
        *kind,
        apache_avro::types::Value::Enum(6, "unknown".into()),
        "v1 lists unknown at index 6"
    );
}

/// The check above does catch breaking changes.
#[test]
fn compatibility_check_rejects_a_breaking_change() {
    let text = RecordType::LogRecord.schema_text();
    // A new required field: old data lacks it.
    let added = text.replacen(
        r#"{"name": "line""#,
        r#"{"name": "severity_text", "type": "string"},
    {"name": "line""#,
        1,
    );
    let added = Schema::parse_str(&added).unwrap();
    assert!(SchemaCompatibility::can_read(&previous(RecordType::LogRecord), &added).is_err());
    // A renamed field: old readers find theirs missing.
    let renamed =
        Schema::parse_str(&text.replace(r#""name": "line""#, r#""name": "text""#)).unwrap();
    assert!(SchemaCompatibility::can_read(&renamed, &previous(RecordType::LogRecord)).is_err());
}

/// A record written by an older writer schema (without `attributes`) is
/// read with the default.
#[test]
fn record_from_an_older_writer_resolves_with_defaults() {
    let older = Schema::parse_str(
        r#"{"type": "record", "name": "LogRecord", "namespace": "io.unicron.v1", "fields": [
            {"name": "cluster", "type": "string"}, {"name": "node", "type": "string"},
            {"name": "time_ms", "type": "long"}, {"name": "source", "type": "string"},
            {"name": "line", "type": "string"}]}"#,
    )
    .unwrap();
    let mut value = apache_avro::types::Record::new(&older).unwrap();
    value.put("cluster", "c1");
    value.put("node", "n1");
    value.put("time_ms", 5i64);
    value.put("source", "stderr");
    value.put("line", "hello");
    let bytes = apache_avro::to_avro_datum(&older, value).unwrap();
    let decoded = AvroCodec::<LogRecord>::default()
        .decode_written_by(&older, &bytes)
        .unwrap();
    assert_eq!(decoded.line, "hello");
    assert_eq!(decoded.job, None);
    assert!(decoded.attributes.is_empty());
}

#[test]
fn confluent_framing_is_checked() {
    let record = samples::log(false);
    let codec = AvroCodec::<LogRecord>::new(Framing::Confluent { schema_id: 42 });
    let mut bytes = codec.encode(&record).unwrap();
    assert_eq!(&bytes[..5], &[0, 0, 0, 0, 42]);
    let other = AvroCodec::<LogRecord>::new(Framing::Confluent { schema_id: 43 });
    assert!(matches!(other.decode(&bytes), Err(DecodeError::Framing(_))));
    bytes[0] = 1;
    assert!(matches!(codec.decode(&bytes), Err(DecodeError::Framing(_))));
    assert!(matches!(
        codec.decode(&[0, 0]),
        Err(DecodeError::Framing(_))
    ));
    assert_eq!(codec.decode(&[]), Err(DecodeError::Empty));
}

#[test]
fn trailing_bytes_are_an_error() {
    let codec = AvroCodec::<LogRecord>::default();
    let mut bytes = codec.encode(&samples::log(true)).unwrap();
    bytes.extend_from_slice(b"junk");
    assert!(matches!(
        codec.decode(&bytes),
        Err(DecodeError::Trailing { count: 4, .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Arbitrary bytes never panic the decoder of any record type.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = AvroCodec::<unicron_core::TelemetryBatch>::default().decode(&bytes);
        let _ = AvroCodec::<LogRecord>::default().decode(&bytes);
        let _ = AvroCodec::<unicron_core::AgentEvent>::default().decode(&bytes);
        let _ = AvroCodec::<unicron_core::FailureEvent>::default().decode(&bytes);
        let _ = AvroCodec::<unicron_core::ClusterEvent>::default().decode(&bytes);
        let _ = AvroCodec::<unicron_core::Decision>::default().decode(&bytes);
        let _ = AvroCodec::<unicron_core::Command>::default().decode(&bytes);
        let _ = AvroCodec::<unicron_core::CommandResult>::default().decode(&bytes);
        let _ = AvroCodec::<unicron_core::DeadLetter>::default().decode(&bytes);
    }

    /// Corrupting one byte of a valid record gives an error or a record,
    /// never a panic.
    #[test]
    fn corrupted_records_never_panic(at in 0usize..200, byte in any::<u8>()) {
        let codec = AvroCodec::<LogRecord>::default();
        let mut bytes = codec.encode(&samples::log(true)).unwrap();
        let at = at % bytes.len();
        bytes[at] = byte;
        let _ = codec.decode(&bytes);
    }
}
