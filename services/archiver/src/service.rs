//! The archiver's consume → append → roll → commit loop.
//!
//! Offsets: a record's offset is stored for commit only once it is in a
//! closed (renamed, fsynced) file, or was dead-lettered with nothing of its
//! partition still open (the writer's `Settled`). A crash therefore loses
//! only `.part` files, whose records come again from the committed offset;
//! records that come again although their file was closed (the commit was
//! lost) are recognised by offset and not archived twice.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use unicron_bus::archive::{Appended, ArchiveError, ArchiveWriter, ClosedFile, Settled};
use unicron_bus::consumer::InboundRecord;
use unicron_bus::dlq::DeadLetterSink;
use unicron_bus::schemas::RecordType;
use unicron_bus::{BusError, Consumer, KafkaConfig, Producer};

use crate::settings::ArchiverSettings;

const SERVICE: &str = "archiver";
/// How often files are checked for their age.
const ROLL_CHECK: Duration = Duration::from_secs(1);
/// At a stop, how long the archiver keeps reading to the ends it took; a
/// broker that is gone must not hold the stop up for longer.
const TAIL_LIMIT: Duration = Duration::from_secs(30);

const RECORDS: &str = "unicron_archiver_records_total";
const FILES: &str = "unicron_archiver_files_total";
const BYTES: &str = "unicron_archiver_bytes_total";

/// Errors that stop the archiver. Bad records never do: they are
/// dead-lettered.
#[derive(Debug, thiserror::Error)]
pub enum ArchiverError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("archive: {0}")]
    Archive(#[from] ArchiveError),
}

/// Runs the archiver until `shutdown` completes or an unrecoverable error.
/// On shutdown it takes each assigned partition's high watermark, reads
/// up to it (the records published just before the stop are archived, not
/// left to chance), then closes every open file and commits its offsets.
pub async fn run(
    kafka: &KafkaConfig,
    brokers: &str,
    settings: &ArchiverSettings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ArchiverError> {
    settings.validate()?;
    describe_metrics();
    unicron_bus::metrics::register(SERVICE);
    let topics = settings.topics(kafka);
    let mut writer = ArchiveWriter::open(&settings.dir, settings.writer_options(kafka))?;
    for path in writer.removed_partial() {
        tracing::info!(path = %path.display(), "removed an unfinished file: its records are read again");
    }
    let producer = Producer::new(kafka, brokers)?;
    let dlq = DeadLetterSink::new(
        producer,
        unicron_bus::Topics::new(kafka)
            .name(unicron_bus::Topic::Dlq)
            .to_string(),
        SERVICE,
        kafka.dlq_payload_bytes,
    );
    let consumer = Consumer::new(kafka, brokers, &settings.group_id)?;
    let names: Vec<&str> = topics.keys().map(String::as_str).collect();
    consumer.subscribe(&names)?;
    tracing::info!(dir = %settings.dir.display(), group = %settings.group_id, topics = names.len(), "archiver running");

    let mut ticker = tokio::time::interval(ROLL_CHECK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Ready while this loop runs; not ready once it ends, however it ends.
    let _ready = unicron_bus::metrics::ReadyGuard::new(SERVICE);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            record = consumer.recv() => {
                let record = record?;
                archive(&mut writer, &topics, &dlq, &record).await?;
            }
            _ = ticker.tick() => {
                let closed = writer.roll_due(Instant::now())?;
                count(&closed);
            }
            () = &mut shutdown => break,
        }
        store(&consumer, writer.take_settled());
    }
    read_to_the_end(&consumer, &mut writer, &topics, &dlq).await?;
    let closed = writer.close_all()?;
    count(&closed);
    store(&consumer, writer.take_settled());
    consumer.commit_now()?;
    tracing::info!(files = closed.len(), "archiver stopped");
    Ok(())
}

/// Reads every assigned partition up to the high watermark it has now.
async fn read_to_the_end(
    consumer: &Consumer,
    writer: &mut ArchiveWriter,
    topics: &BTreeMap<String, RecordType>,
    dlq: &DeadLetterSink,
) -> Result<(), ArchiverError> {
    let mut ends = consumer.unread_ends(Duration::from_secs(5))?;
    let unread = ends.len();
    let deadline = tokio::time::Instant::now() + TAIL_LIMIT;
    while !ends.is_empty() {
        let record = match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(record) => record?,
            Err(_) => {
                tracing::warn!(
                    partitions = ends.len(),
                    "stopping before the end of some partitions: the broker did not deliver them in time"
                );
                break;
            }
        };
        archive(writer, topics, dlq, &record).await?;
        store(consumer, writer.take_settled());
        let key = (record.topic.clone(), record.partition);
        if ends.get(&key).is_some_and(|end| record.offset + 1 >= *end) {
            ends.remove(&key);
        }
    }
    tracing::info!(partitions = unread, "read to the end before stopping");
    Ok(())
}

/// Appends `record` to its file, or dead-letters it.
async fn archive(
    writer: &mut ArchiveWriter,
    topics: &BTreeMap<String, RecordType>,
    dlq: &DeadLetterSink,
    record: &InboundRecord,
) -> Result<(), ArchiverError> {
    let Some(&record_type) = topics.get(&record.topic) else {
        // Not subscribed; nothing to archive it as.
        tracing::warn!(topic = %record.topic, "record of a topic not archived");
        return Ok(());
    };
    match writer.append(record, record_type) {
        Ok(Appended::Rolled(closed)) => count(&[closed]),
        Ok(_) => {}
        Err(ArchiveError::Undecodable { error, .. }) => {
            dlq.send(record, &error).await?;
            writer.dead_lettered(record);
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Stores the settled offsets for the next commit. A partition revoked in
/// a rebalance no longer accepts them: its new owner reads those records
/// again, which duplicates, never loses, and is only a warning.
fn store(consumer: &Consumer, settled: Vec<Settled>) {
    for s in settled {
        let through = InboundRecord {
            topic: s.topic,
            partition: s.partition,
            offset: s.through,
            key: None,
            payload: Vec::new(),
            timestamp_ms: None,
            caught_up: false,
        };
        if let Err(e) = consumer.mark_done(&through) {
            tracing::warn!(topic = %through.topic, partition = through.partition, offset = through.offset, error = %e, "cannot store the offset");
        }
    }
}

fn count(closed: &[ClosedFile]) {
    for c in closed {
        let topic = c.file.topic.clone();
        tracing::debug!(path = %c.file.path.display(), records = c.records, bytes = c.bytes, "closed");
        metrics::counter!(RECORDS, "topic" => topic.clone()).increment(c.records);
        metrics::counter!(FILES, "topic" => topic.clone()).increment(1);
        metrics::counter!(BYTES, "topic" => topic).increment(c.bytes);
    }
}

fn describe_metrics() {
    metrics::describe_counter!(RECORDS, "Records archived in closed files, by topic.");
    metrics::describe_counter!(FILES, "Archive files closed, by topic.");
    metrics::describe_counter!(
        BYTES,
        "Bytes of closed archive files (compressed, as on disk), by topic."
    );
}
