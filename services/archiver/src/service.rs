//! The archiver on the runtime: each record appended to its partition's
//! file, files rolled by size and age, offsets settled by the files.
//!
//! Offsets ([`Durability::Elsewhere`]): a record's offset is committed only
//! once it is in a closed (renamed, fsynced) file, or was dead-lettered
//! with nothing of its partition still open (the writer's `ArchivedThrough`). A
//! crash therefore loses only `.part` files, whose records come again from
//! the committed offset; records that come again although their file was
//! closed (the commit was lost) are recognised by offset and not archived
//! twice.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use unicron_codec::archive::{Appended, ArchiveError, ArchiveWriter, ClosedFile};
use unicron_codec::schemas::RecordType;
use unicron_codec::{DecodeError, InboundRecord, KafkaConfig, Subscription};
use unicron_runtime::{
    Applied, Durability, Never, OnStop, Processor, Reading, RuntimeOptions, Settled, Step,
};

use crate::error::ArchiverError;
use crate::metrics::{BYTES, FILES, METRICS, RECORDS};
use crate::settings::ArchiverSettings;

const SERVICE: &str = "archiver";
/// How often files are checked for their age.
const ROLL_CHECK: Duration = Duration::from_secs(1);
/// At a stop, how long the archiver keeps reading to the ends it took; a
/// broker that is gone must not hold the stop up for longer.
const TAIL_LIMIT: Duration = Duration::from_secs(30);

/// Runs the archiver until `shutdown` completes or an unrecoverable error.
/// On shutdown it reads each held partition up to the end it has then
/// (the records published just before the stop are archived, not left to
/// chance), closes every open file and commits its offsets.
pub async fn run(
    kafka: &KafkaConfig,
    brokers: &str,
    settings: &ArchiverSettings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ArchiverError> {
    settings.validate()?;
    let topics = settings.topics(kafka);
    let writer = ArchiveWriter::open(&settings.dir, settings.writer_options(kafka))?;
    for path in writer.removed_partial() {
        tracing::info!(path = %path.display(), "removed an unfinished file: its records are read again");
    }
    let subscriptions = topics
        .keys()
        .map(|name| Subscription::External {
            name: name.clone(),
            optional: false,
        })
        .collect();
    let mut options = RuntimeOptions::new(
        SERVICE,
        &settings.group_id,
        subscriptions,
        Durability::Elsewhere,
    );
    options.on_stop = OnStop::ReadToEnd { limit: TAIL_LIMIT };
    tracing::info!(dir = %settings.dir.display(), group = %settings.group_id, topics = topics.len(), "archiver running");
    let mut archiver = Archiver { writer, topics };
    unicron_runtime::run(kafka, brokers, &options, &mut archiver, shutdown).await?;
    Ok(())
}

/// Appends records to the archive; its files say which offsets are settled.
struct Archiver {
    writer: ArchiveWriter,
    /// Full topic name → the record type its files hold.
    topics: BTreeMap<String, RecordType>,
}

impl Processor for Archiver {
    type Input = RecordType;
    type Action = Never;
    type Error = ArchiverError;

    /// A record of a topic not archived (not subscribed) is left alone.
    fn wants(&self, record: &InboundRecord) -> bool {
        self.topics.contains_key(&record.topic)
    }

    /// The record is decoded as it is appended (the writer checks it
    /// against its file's schema); here only its type is looked up.
    fn decode(&self, record: &InboundRecord) -> Result<RecordType, DecodeError> {
        self.topics
            .get(&record.topic)
            .copied()
            .ok_or_else(|| DecodeError::Invalid {
                record: "record",
                reason: format!("topic {} is not archived", record.topic),
            })
    }

    fn apply(
        &mut self,
        record_type: RecordType,
        step: &mut Step<'_>,
    ) -> Result<Applied<Never>, ArchiverError> {
        let record = step.record();
        match self.writer.append(record, record_type) {
            Ok(Appended::Rolled(closed)) => count(&[closed]),
            Ok(_) => {}
            Err(ArchiveError::Undecodable { error, .. }) => {
                // Settled only once the runtime sent the dead letter: it
                // asks for settled offsets after the step is staged.
                step.dead_letter(error.to_string());
                self.writer.dead_lettered(record);
            }
            Err(e) => return Err(e.into()),
        }
        Ok(Applied::Done)
    }

    fn describe_metrics(&self) {
        unicron_bus::metrics::describe_all(METRICS);
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(ROLL_CHECK)
    }

    /// Closes the files that are old enough.
    fn tick(&mut self, _: &Reading<'_>) -> Result<(), ArchiverError> {
        count(&self.writer.roll_due(Instant::now())?);
        Ok(())
    }

    fn dead_lettered(&mut self, record: &InboundRecord) {
        self.writer.dead_lettered(record);
    }

    fn settled(&mut self) -> Vec<Settled> {
        self.writer
            .take_settled()
            .into_iter()
            .map(|s| Settled {
                topic: s.topic,
                partition: s.partition,
                through: s.through,
            })
            .collect()
    }

    /// Closes every open file, so its offsets settle before the last commit.
    fn stopping(&mut self) -> Result<(), ArchiverError> {
        let closed = self.writer.close_all()?;
        count(&closed);
        tracing::info!(files = closed.len(), "archiver stopped");
        Ok(())
    }
}

fn count(closed: &[ClosedFile]) {
    for c in closed {
        let topic = c.file.topic.clone();
        tracing::debug!(path = %c.file.path.display(), records = c.records, bytes = c.bytes, "closed");
        ::metrics::counter!(RECORDS.name, "topic" => topic.clone()).increment(c.records);
        ::metrics::counter!(FILES.name, "topic" => topic.clone()).increment(1);
        ::metrics::counter!(BYTES.name, "topic" => topic).increment(c.bytes);
    }
}
