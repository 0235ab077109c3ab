//! The Avro archive: every record type round-trips through archive files,
//! files roll by size and age with contiguous offset ranges, `.part` files
//! are never listed, offsets settle only with closed files, a restarted
//! writer neither duplicates nor mixes in another log, files written with
//! an older schema are read with the current one, and an independent Avro
//! reader (Python fastavro) opens the files.

use unicron_codec::samples;

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use apache_avro::types::Value;
use apache_avro::{Codec, DeflateSettings, Schema, Writer};
use unicron_codec::InboundRecord;
use unicron_codec::archive::{
    self, Appended, ArchiveError, ArchiveWriter, Archived, ArchivedThrough, WriterOptions,
};
use unicron_codec::schemas::{AvroRecord, RecordType};
use unicron_codec::{AvroCodec, DecodeError};
use unicron_core::{FailureEvent, LogRecord};

/// The Kafka record that carries `value` at `offset`; keys and timestamps
/// alternate between present and absent.
fn inbound<T: AvroRecord>(topic: &str, partition: i32, offset: i64, value: &T) -> InboundRecord {
    InboundRecord {
        topic: topic.to_string(),
        partition,
        offset,
        key: (offset % 2 == 0).then(|| format!("key-{offset}").into_bytes()),
        payload: AvroCodec::<T>::default().encode(value).unwrap(),
        timestamp_ms: (offset % 3 != 0).then_some(1_764_000_000_000 + offset),
        caught_up: false,
    }
}

fn expected<T: Clone>(record: &InboundRecord, value: &T) -> Archived<T> {
    Archived {
        topic: record.topic.clone(),
        partition: record.partition,
        offset: record.offset,
        timestamp_ms: record.timestamp_ms,
        key: record.key.clone(),
        record: value.clone(),
    }
}

fn log_line(i: i64) -> LogRecord {
    let mut log = samples::log(i % 2 == 0);
    log.line = format!("{i}: {}", log.line);
    log.time_ms += i;
    log
}

fn options(max_file_bytes: u64) -> WriterOptions {
    WriterOptions {
        max_file_bytes,
        ..WriterOptions::default()
    }
}

/// Writes `values` to `topic` partition 1 from offset 10, closes the file
/// and reads it back.
fn round_trip<T: AvroRecord + Clone + PartialEq + Debug>(dir: &Path, topic: &str, values: &[T]) {
    let mut writer = ArchiveWriter::open(dir, WriterOptions::default()).unwrap();
    let mut want = Vec::new();
    for (i, value) in values.iter().enumerate() {
        let record = inbound(topic, 1, 10 + i as i64, value);
        assert_eq!(
            writer.append(&record, T::RECORD).unwrap(),
            Appended::Written
        );
        want.push(expected(&record, value));
    }
    let closed = writer.close_all().unwrap();
    assert_eq!(closed.len(), 1);
    let file = &closed[0].file;
    assert_eq!(
        (file.topic.as_str(), file.partition, file.first, file.last),
        (topic, 1, 10, 9 + values.len() as i64)
    );
    assert_eq!(closed[0].records, values.len() as u64);
    assert_eq!(
        std::fs::metadata(&file.path).unwrap().len(),
        closed[0].bytes
    );
    assert_eq!(
        file.path,
        dir.join(topic)
            .join(archive::file_name(1, 10, 9 + values.len() as i64))
    );
    assert_eq!(archive::read::<T>(&file.path, T::RECORD).unwrap(), want);
    assert_eq!(archive::read_topic::<T>(dir, topic).unwrap(), want);

    // An ordinary Avro reader sees the writer schema, the codec and the
    // metadata without knowing anything of unicron.
    let reader = apache_avro::Reader::new(std::fs::File::open(&file.path).unwrap()).unwrap();
    assert_eq!(reader.writer_schema(), archive::entry_schema(T::RECORD));
    let meta = reader.user_metadata();
    assert_eq!(meta["unicron.topic"], topic.as_bytes());
    assert_eq!(meta["unicron.partition"], b"1");
    assert_eq!(meta["unicron.record"], T::RECORD.name().as_bytes());
    assert_eq!(reader.count(), values.len());
    let header = std::fs::read(&file.path).unwrap();
    let codec = b"avro.codec\x0edeflate";
    assert!(
        header.windows(codec.len()).any(|w| w == codec),
        "{}: not deflate",
        T::RECORD.name()
    );
}

#[test]
fn every_record_type_round_trips_through_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    round_trip(
        d,
        "unicron.telemetry",
        &[samples::telemetry(true), samples::telemetry(false)],
    );
    round_trip(
        d,
        "unicron.logs",
        &[samples::log(true), samples::log(false)],
    );
    round_trip(
        d,
        "unicron.agent",
        &[samples::agent(true), samples::agent(false)],
    );
    round_trip(
        d,
        "unicron.failures",
        &[samples::failure(true), samples::failure(false)],
    );
    round_trip(
        d,
        "unicron.cluster",
        &[samples::cluster(true), samples::cluster(false)],
    );
    round_trip(
        d,
        "unicron.decisions",
        &[samples::decision(true), samples::decision(false)],
    );
    round_trip(
        d,
        "unicron.commands",
        &[samples::command(true), samples::command(false)],
    );
    round_trip(
        d,
        "unicron.command-results",
        &[samples::result(true), samples::result(false)],
    );
    round_trip(
        d,
        "unicron.dlq",
        &[samples::dead_letter(true), samples::dead_letter(false)],
    );
    let topics: Vec<String> = archive::list(d)
        .unwrap()
        .into_iter()
        .map(|f| f.topic)
        .collect();
    assert_eq!(topics.len(), 9, "{topics:?}");
    assert!(topics.is_sorted(), "{topics:?}");
}

#[test]
fn size_rolls_give_contiguous_offset_ranges_and_settle_closed_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = ArchiveWriter::open(dir.path(), options(8 * 1024)).unwrap();
    let mut rolled = Vec::new();
    let mut settled: Vec<ArchivedThrough> = Vec::new();
    for offset in 0..1000 {
        let record = inbound("unicron.logs", 2, offset, &log_line(offset));
        if let Appended::Rolled(closed) = writer.append(&record, RecordType::LogRecord).unwrap() {
            assert!(closed.bytes <= 8 * 1024 + 1024, "{closed:?}");
            rolled.push(closed);
        }
        let now = writer.take_settled();
        // Only a roll settles, and exactly through the closed file's end.
        match (&now[..], rolled.last()) {
            ([], _) => {}
            ([s], Some(closed)) => assert_eq!(s.through, closed.file.last),
            other => panic!("{other:?}"),
        }
        settled.extend(now);
    }
    assert!(rolled.len() >= 3, "{} rolls", rolled.len());
    let last = writer.close_all().unwrap();
    settled.extend(writer.take_settled());
    assert_eq!(
        settled.last(),
        Some(&ArchivedThrough {
            topic: "unicron.logs".into(),
            partition: 2,
            through: 999
        })
    );

    let files = archive::list(dir.path()).unwrap();
    assert_eq!(files.len(), rolled.len() + last.len());
    assert_eq!(files[0].first, 0);
    assert_eq!(files.last().unwrap().last, 999);
    for pair in files.windows(2) {
        assert_eq!(pair[1].first, pair[0].last + 1, "{pair:?}");
    }
    let offsets: Vec<i64> = archive::read_topic::<LogRecord>(dir.path(), "unicron.logs")
        .unwrap()
        .iter()
        .map(|a| a.offset)
        .collect();
    assert_eq!(offsets, (0..1000).collect::<Vec<_>>());
}

#[test]
fn age_rolls_close_files_open_too_long() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = ArchiveWriter::open(
        dir.path(),
        WriterOptions {
            max_file_age: Duration::from_secs(10),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for offset in 0..3 {
        let record = inbound("unicron.failures", 0, offset, &samples::failure(true));
        writer.append(&record, RecordType::FailureEvent).unwrap();
    }
    assert!(writer.roll_due(Instant::now()).unwrap().is_empty());
    assert!(writer.take_settled().is_empty());
    let closed = writer
        .roll_due(Instant::now() + Duration::from_secs(11))
        .unwrap();
    assert_eq!(closed.len(), 1);
    assert_eq!((closed[0].file.first, closed[0].file.last), (0, 2));
    assert_eq!(writer.take_settled()[0].through, 2);
    assert_eq!(writer.open_files(), 0);
}

#[test]
fn part_files_are_not_listed_and_are_removed_when_a_writer_opens() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<InboundRecord> = (0..5)
        .map(|o| inbound("unicron.logs", 0, o, &log_line(o)))
        .collect();
    let mut writer = ArchiveWriter::open(dir.path(), WriterOptions::default()).unwrap();
    for record in &records {
        writer.append(record, RecordType::LogRecord).unwrap();
    }
    let part = dir
        .path()
        .join("unicron.logs")
        .join("00000-00000000000000000000.avro.part");
    assert!(part.is_file());
    assert!(archive::list(dir.path()).unwrap().is_empty());
    assert!(
        archive::read_topic::<LogRecord>(dir.path(), "unicron.logs")
            .unwrap()
            .is_empty()
    );
    // A crash: the file is never closed, its offsets never settled.
    assert!(writer.take_settled().is_empty());
    drop(writer);

    let mut writer = ArchiveWriter::open(dir.path(), WriterOptions::default()).unwrap();
    assert_eq!(writer.removed_partial(), std::slice::from_ref(&part));
    assert!(!part.exists());
    // The records come again from the committed offset and are archived.
    for record in &records {
        assert_eq!(
            writer.append(record, RecordType::LogRecord).unwrap(),
            Appended::Written
        );
    }
    writer.close_all().unwrap();
    let files = archive::list(dir.path()).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!((files[0].first, files[0].last), (0, 4));
}

#[test]
fn undecodable_records_are_refused_and_settle_with_the_open_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = ArchiveWriter::open(
        dir.path(),
        WriterOptions {
            max_record_bytes: 4096,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for offset in 0..2 {
        let record = inbound("unicron.logs", 0, offset, &log_line(offset));
        writer.append(&record, RecordType::LogRecord).unwrap();
    }
    let mut garbage = inbound("unicron.logs", 0, 2, &log_line(2));
    garbage.payload = vec![0xff; 7];
    let err = writer.append(&garbage, RecordType::LogRecord).unwrap_err();
    assert!(
        matches!(
            &err,
            ArchiveError::Undecodable {
                offset: 2,
                error: DecodeError::Avro { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("unicron.logs partition 0 offset 2: avro LogRecord"),
        "{err}"
    );
    writer.dead_lettered(&garbage);
    // Not settled while offsets 0 and 1 wait in the open file.
    assert!(writer.take_settled().is_empty());

    let mut big = inbound("unicron.logs", 0, 3, &log_line(3));
    big.payload = vec![0; 5000];
    let err = writer.append(&big, RecordType::LogRecord).unwrap_err();
    assert!(
        matches!(
            err,
            ArchiveError::Undecodable {
                error: DecodeError::Oversized {
                    size: 5000,
                    limit: 4096
                },
                ..
            }
        ),
        "{err:?}"
    );
    writer.dead_lettered(&big);

    writer.close_all().unwrap();
    let settled = writer.take_settled();
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0].through, 3);
    let files = archive::list(dir.path()).unwrap();
    assert_eq!((files[0].first, files[0].last), (0, 1));

    // With no file open, a dead letter settles at once.
    let mut garbage = inbound("unicron.logs", 0, 4, &log_line(4));
    garbage.payload = vec![0xff];
    assert!(writer.append(&garbage, RecordType::LogRecord).is_err());
    writer.dead_lettered(&garbage);
    assert_eq!(writer.take_settled()[0].through, 4);
    assert_eq!(writer.open_files(), 0);
}

#[test]
fn a_restarted_writer_skips_archived_offsets_and_refuses_another_log() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<InboundRecord> = (0..15)
        .map(|o| inbound("unicron.logs", 4, o, &log_line(o)))
        .collect();
    let mut writer = ArchiveWriter::open(dir.path(), WriterOptions::default()).unwrap();
    for record in &records[..10] {
        writer.append(record, RecordType::LogRecord).unwrap();
    }
    writer.close_all().unwrap();
    drop(writer);

    // Offsets 5..10 come again (committed offsets lost in a crash).
    let mut writer = ArchiveWriter::open(dir.path(), WriterOptions::default()).unwrap();
    for record in &records[5..10] {
        assert_eq!(
            writer.append(record, RecordType::LogRecord).unwrap(),
            Appended::AlreadyArchived
        );
        // Nothing open: it settles at once.
        assert_eq!(writer.take_settled()[0].through, record.offset);
    }
    for record in &records[10..] {
        assert_eq!(
            writer.append(record, RecordType::LogRecord).unwrap(),
            Appended::Written
        );
    }
    writer.close_all().unwrap();
    let ranges: Vec<(i64, i64)> = archive::list(dir.path())
        .unwrap()
        .iter()
        .map(|f| (f.first, f.last))
        .collect();
    assert_eq!(ranges, [(0, 9), (10, 14)]);
    let archived = archive::read_topic::<LogRecord>(dir.path(), "unicron.logs").unwrap();
    let offsets: Vec<i64> = archived.iter().map(|a| a.offset).collect();
    assert_eq!(offsets, (0..15).collect::<Vec<_>>());

    // A new log (a new embedded broker, a recreated topic) starts at 0 again
    // with other records: the directory is not silently mixed.
    let mut writer = ArchiveWriter::open(dir.path(), WriterOptions::default()).unwrap();
    let other = inbound("unicron.logs", 4, 0, &samples::log(false));
    let err = writer.append(&other, RecordType::LogRecord).unwrap_err();
    assert!(
        matches!(err, ArchiveError::ForeignLog { offset: 0, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("00004-00000000000000000000-00000000000000000009.avro"),
        "{err}"
    );
}

#[test]
fn read_topic_gives_each_offset_once_when_files_overlap() {
    // A range archived twice: the second writer never saw the first's files.
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    for (dir, range) in [(first.path(), 0..6), (second.path(), 3..9)] {
        let mut writer = ArchiveWriter::open(dir, WriterOptions::default()).unwrap();
        for o in range {
            let record = inbound("unicron.logs", 0, o, &log_line(o));
            writer.append(&record, RecordType::LogRecord).unwrap();
        }
        writer.close_all().unwrap();
    }
    let from = archive::list(second.path()).unwrap().remove(0).path;
    std::fs::rename(
        &from,
        first
            .path()
            .join("unicron.logs")
            .join(from.file_name().unwrap()),
    )
    .unwrap();
    let offsets: Vec<i64> = archive::read_topic::<LogRecord>(first.path(), "unicron.logs")
        .unwrap()
        .iter()
        .map(|a| a.offset)
        .collect();
    assert_eq!(offsets, (0..9).collect::<Vec<_>>());
}

#[test]
fn reading_a_file_as_another_record_type_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    round_trip(dir.path(), "unicron.logs", &[samples::log(true)]);
    let path = archive::list(dir.path()).unwrap().remove(0).path;
    let err = archive::read::<FailureEvent>(&path, RecordType::FailureEvent).unwrap_err();
    assert!(
        err.to_string().starts_with(&path.display().to_string())
            && err
                .to_string()
                .contains("holds LogRecord records, not FailureEvent"),
        "{err}"
    );
    let err = archive::read::<LogRecord>(dir.path().join("nope.avro"), RecordType::LogRecord)
        .unwrap_err();
    assert!(err.to_string().contains("nope.avro"), "{err}");
    assert!(
        archive::read_topic::<LogRecord>(dir.path(), "unicron.agent")
            .unwrap()
            .is_empty()
    );
}

/// The FailureEvent schema as it was before `rule` was added: the current
/// one without that field (it has a default, `null`).
fn failure_event_without_rule() -> String {
    let mut schema: serde_json::Value =
        serde_json::from_str(RecordType::FailureEvent.schema_text()).unwrap();
    let fields = schema["fields"].as_array_mut().unwrap();
    let before = fields.len();
    fields.retain(|f| f["name"] != "rule");
    assert_eq!(fields.len(), before - 1);
    schema.to_string()
}

/// Removes field `name` from an Avro record value.
fn without_field(value: Value, name: &str) -> Value {
    match value {
        Value::Record(fields) => {
            Value::Record(fields.into_iter().filter(|(n, _)| n != name).collect())
        }
        other => panic!("not a record: {other:?}"),
    }
}

#[test]
fn a_file_written_with_an_older_schema_is_read_with_the_current_one() {
    let old_entry =
        Schema::parse_str(&archive::entry_schema_json(&failure_event_without_rule()).unwrap())
            .unwrap();
    assert_ne!(&old_entry, archive::entry_schema(RecordType::FailureEvent));

    let dir = tempfile::tempdir().unwrap();
    let topic_dir = dir.path().join("unicron.failures");
    std::fs::create_dir_all(&topic_dir).unwrap();
    let path = topic_dir.join(archive::file_name(0, 7, 8));
    let mut want = Vec::new();
    {
        let file = std::fs::File::create(&path).unwrap();
        let mut writer = Writer::builder()
            .schema(&old_entry)
            .writer(file)
            .codec(Codec::Deflate(DeflateSettings::default()))
            .build();
        for (offset, full) in [(7, true), (8, false)] {
            let failure = samples::failure(full);
            let record = inbound("unicron.failures", 0, offset, &failure);
            let current = apache_avro::to_value(expected(&record, &failure)).unwrap();
            // The old writer had no `rule` to write.
            let Value::Record(fields) = current else {
                unreachable!()
            };
            let fields = fields
                .into_iter()
                .map(|(n, v)| {
                    if n == "record" {
                        (n, without_field(v, "rule"))
                    } else {
                        (n, v)
                    }
                })
                .collect();
            let old = Value::Record(fields).resolve(&old_entry).unwrap();
            writer.append(old).unwrap();
            let mut read_back = failure.clone();
            read_back.rule = None; // the current schema's default
            want.push(expected(&record, &read_back));
        }
        writer.flush().unwrap();
    }
    assert_eq!(want[0].record.rule, None);
    assert!(samples::failure(true).rule.is_some());

    let reader = apache_avro::Reader::new(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(reader.writer_schema(), &old_entry);
    assert_eq!(
        archive::read::<FailureEvent>(&path, RecordType::FailureEvent).unwrap(),
        want
    );
    assert_eq!(
        archive::read_topic::<FailureEvent>(dir.path(), "unicron.failures").unwrap(),
        want
    );
}

/// Whether `python3 -c "import fastavro"` works. Under CI it must.
fn fastavro_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import fastavro"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but `python3 -c \"import fastavro\"` fails: ./dev test installs fastavro"
        );
        eprintln!(
            "SKIPPED: the independent-reader test needs Python fastavro (pip install fastavro); \
             it is required when CI is set"
        );
    }
    ok
}

/// The field names of `record_type`'s schema, in order.
fn field_names(record_type: RecordType) -> Vec<String> {
    let Schema::Record(record) = record_type.schema() else {
        panic!("not a record")
    };
    record.fields.iter().map(|f| f.name.clone()).collect()
}

fn write_one_file<T: AvroRecord>(dir: &Path, topic: &str, values: &[T]) -> PathBuf {
    let mut writer = ArchiveWriter::open(dir, WriterOptions::default()).unwrap();
    for (i, value) in values.iter().enumerate() {
        let record = inbound(topic, 0, 100 + i as i64, value);
        writer.append(&record, T::RECORD).unwrap();
    }
    writer.close_all().unwrap().remove(0).file.path
}

#[test]
fn an_independent_avro_reader_opens_the_files() {
    if !fastavro_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let files = [
        (
            RecordType::TelemetryBatch,
            3,
            write_one_file(
                d,
                "unicron.telemetry",
                &[
                    samples::telemetry(true),
                    samples::telemetry(false),
                    samples::telemetry(true),
                ],
            ),
        ),
        (
            RecordType::LogRecord,
            2,
            write_one_file(
                d,
                "unicron.logs",
                &[samples::log(true), samples::log(false)],
            ),
        ),
        (
            RecordType::AgentEvent,
            2,
            write_one_file(
                d,
                "unicron.agent",
                &[samples::agent(true), samples::agent(false)],
            ),
        ),
        (
            RecordType::FailureEvent,
            2,
            write_one_file(
                d,
                "unicron.failures",
                &[samples::failure(true), samples::failure(false)],
            ),
        ),
        (
            RecordType::ClusterEvent,
            2,
            write_one_file(
                d,
                "unicron.cluster",
                &[samples::cluster(true), samples::cluster(false)],
            ),
        ),
        (
            RecordType::Decision,
            2,
            write_one_file(
                d,
                "unicron.decisions",
                &[samples::decision(true), samples::decision(false)],
            ),
        ),
        (
            RecordType::Command,
            2,
            write_one_file(
                d,
                "unicron.commands",
                &[samples::command(true), samples::command(false)],
            ),
        ),
        (
            RecordType::CommandResult,
            2,
            write_one_file(
                d,
                "unicron.command-results",
                &[samples::result(true), samples::result(false)],
            ),
        ),
        (
            RecordType::DeadLetter,
            2,
            write_one_file(
                d,
                "unicron.dlq",
                &[samples::dead_letter(true), samples::dead_letter(false)],
            ),
        ),
    ];
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/read_archive.py");
    let out = Command::new("python3")
        .arg(script)
        .args(files.iter().map(|(_, _, path)| path))
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "read_archive.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), files.len());
    for ((record_type, count, path), line) in files.iter().zip(&lines) {
        let want = serde_json::json!({
            "file": path.display().to_string(),
            "count": count,
            "first_offset": 100,
            "record_fields": field_names(*record_type),
            "codec": "deflate",
            "topic": path.parent().unwrap().file_name().unwrap().to_str().unwrap(),
            "record": record_type.name(),
        });
        assert_eq!(line, &want, "{}", record_type.name());
    }
}
