//! The loop: consume → decode → apply (a batch of waiting records) →
//! commit → publish → mark done.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt as _;
use unicron_bus::dlq::encode_dead_letter;
use unicron_bus::producer::Outbound;
use unicron_bus::{
    AvroCodec, Consumer, InboundRecord, KafkaConfig, Producer, Subscription, Topic, Topics,
};
use unicron_core::DeadLetter;
use unicron_store::{Commit, Store, StoreOptions};

use crate::error::RuntimeError;
use crate::membership::Membership;
use crate::outbox::{Published, drain, outbound, send};
use crate::processor::{Applied, BusStatus, Outgoing, Processor, Reading};
use crate::step::{Staged, Step};

/// How a service's effects survive a crash.
#[derive(Debug, Clone, PartialEq)]
pub enum Durability {
    /// Effectively-once (docs/design.md §4): state, consumed offset, outbox
    /// and dedupe entries commit in one RocksDB batch; outputs are published
    /// from the outbox after the commit, and again after a crash.
    Store {
        state_dir: PathBuf,
        /// fsync every commit (survives power loss, not only kill -9).
        sync: bool,
        start: StartFrom,
    },
    /// No store: outputs are published before a record is marked done, so
    /// a crash may publish them again (at least once). For services whose
    /// state is soft and whose outputs carry deterministic ids.
    AtLeastOnce,
}

/// Where reading starts on a newly assigned partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    /// The offset committed with the state: state and input agree exactly.
    StoredOffsets,
    /// The group's committed offset. Records below the stored offset are
    /// still skipped; for services that must not start from the
    /// beginning with an empty store (the executor would act again on a
    /// whole retention period of commands).
    GroupOffsets,
}

/// What the runtime needs besides the processor.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// The service's name in metrics, logs and dead letters.
    pub service: &'static str,
    pub group_id: String,
    pub subscriptions: Vec<Subscription>,
    pub durability: Durability,
}

/// Runs `processor` until `shutdown` completes or an unrecoverable error.
pub async fn run<P: Processor>(
    kafka: &KafkaConfig,
    brokers: &str,
    options: &RuntimeOptions,
    processor: &mut P,
    shutdown: impl Future<Output = ()>,
) -> Result<(), P::Error> {
    processor.describe_metrics();
    unicron_bus::metrics::register(options.service);
    let store = match &options.durability {
        Durability::Store {
            state_dir, sync, ..
        } => Some(Arc::new(
            Store::open(state_dir, StoreOptions { sync: *sync }).map_err(RuntimeError::from)?,
        )),
        Durability::AtLeastOnce => None,
    };
    processor.opened(store.as_deref())?;
    let producer = Producer::new(kafka, brokers).map_err(RuntimeError::from)?;
    let mut published = Vec::new();
    if let Some(store) = &store {
        published = drain(store, &producer).await?;
    }
    let membership = match (&options.durability, &store) {
        (
            Durability::Store {
                start: StartFrom::StoredOffsets,
                ..
            },
            Some(store),
        ) => {
            let lookup = store.clone();
            Membership::from_stored_offsets(
                options.service,
                Box::new(move |topic, partition| lookup.offset(topic, partition).ok().flatten()),
            )
        }
        _ => Membership::from_group_offsets(options.service),
    };
    let consumer = Consumer::with_context(kafka, brokers, &options.group_id, membership.clone())
        .map_err(RuntimeError::from)?;
    let names = Topics::new(kafka);
    let subscriptions: Vec<String> = options
        .subscriptions
        .iter()
        .map(|s| s.resolve(&names))
        .collect();
    let topics: Vec<&str> = subscriptions.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).map_err(RuntimeError::from)?;
    tracing::info!(service = options.service, group = %options.group_id, topics = ?subscriptions, "running");

    let mut driver = Driver {
        service: options.service,
        store: store.as_deref(),
        producer: &producer,
        consumer: &consumer,
        dlq_topic: names.name(Topic::Dlq).to_string(),
        dlq_payload_bytes: kafka.dlq_payload_bytes,
        dead_letter_codec: AvroCodec::default(),
        published,
        pending: Commit::new(),
        done: Vec::new(),
    };
    driver.report(processor, Report::IfPublished).await?;
    let mut generation = membership.generation();
    let mut last_read: BTreeMap<(String, i32), i64> = BTreeMap::new();
    let mut ticks = processor.tick_every().map(|every| {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval
    });
    // Ready while this loop runs; not ready once it ends, however it ends.
    let _ready = unicron_bus::metrics::ReadyGuard::new(options.service);
    tokio::pin!(shutdown);
    'reading: loop {
        let first = tokio::select! {
            record = consumer.recv() => record.map_err(RuntimeError::from)?,
            _ = async { ticks.as_mut().expect("guarded").tick().await }, if ticks.is_some() => {
                let status = BusStatus { connection_losses: membership.connection_losses(), now: Instant::now() };
                {
                    let caught_up = |topic: &str, partition: i32, offset: i64| consumer.caught_up_with(topic, partition, offset);
                    let high_watermark = |topic: &str, partition: i32| consumer.high_watermark(topic, partition);
                    processor.tick(&Reading { last_read: &last_read, caught_up: &caught_up, high_watermark: &high_watermark, status });
                }
                driver.end_batch(processor).await?;
                driver.flush().await?;
                driver.report(processor, Report::Always).await?;
                continue;
            }
            () = &mut shutdown => break,
        };
        // Whatever else is ready joins this record's batch, each with the
        // group generation it was read in.
        let mut batch = vec![(first, membership.generation())];
        while batch.len() < MAX_BATCH {
            match consumer.recv().now_or_never() {
                Some(record) => {
                    batch.push((record.map_err(RuntimeError::from)?, membership.generation()))
                }
                None => break,
            }
        }
        for (record, read_in) in batch {
            tracing::debug!(topic = %record.topic, partition = record.partition, offset = record.offset, "received");
            if read_in != membership.generation()
                && !membership.holds(&record.topic, record.partition)
            {
                // Read before a rebalance gave its partition away: the new
                // owner reads it, and it is not marked done here.
                continue;
            }
            if read_in != generation {
                // What was read before the rebalance is committed before
                // the processor hears of it (a takeover reads the store).
                driver.end_batch(processor).await?;
                driver.flush().await?;
                driver.report(processor, Report::IfPublished).await?;
                generation = read_in;
                processor
                    .reassigned(&membership.assigned(), store.as_deref())
                    .await?;
            }
            processor.observe(BusStatus {
                connection_losses: membership.connection_losses(),
                now: Instant::now(),
            });
            if ticks.is_some() {
                // Only ticks ask how far a partition was read.
                last_read.insert((record.topic.clone(), record.partition), record.offset);
            }
            if !processor.wants(&record) || driver.applied_before(&record)? {
                driver.done(record);
                continue;
            }
            let Some(action) = driver.handle(processor, &record).await? else {
                driver.done(record);
                continue;
            };
            // An action runs outside any step: what was staged so far,
            // this record's step among it, commits first.
            driver.end_batch(processor).await?;
            driver.flush().await?;
            driver.report(processor, Report::IfPublished).await?;
            let outcome = tokio::select! {
                outcome = processor.act(&action) => outcome,
                () = &mut shutdown => {
                    tracing::info!(service = options.service, "stopping mid-action: the record is read again after a restart");
                    break 'reading;
                }
            };
            let mut step = Step::new(&record, store.as_deref(), None);
            processor.finish(action, outcome, &mut step)?;
            let staged = step.into_staged();
            driver.stage(&record, staged, Offset::Consumed).await?;
            driver.done(record);
        }
        driver.end_batch(processor).await?;
        driver.flush().await?;
        driver.report(processor, Report::IfPublished).await?;
    }
    driver.end_batch(processor).await?;
    driver.flush().await?;
    consumer.commit_now().map_err(RuntimeError::from)?;
    tracing::info!(service = options.service, "stopped");
    Ok(())
}

/// The most records applied before one commit. Records that are already
/// waiting are applied together and committed in one RocksDB write, and
/// their outputs published as one batch: a busy service pays one write
/// and one broker round trip per batch rather than per record. The bound
/// caps how long the batch's first record waits for its commit.
const MAX_BATCH: usize = 128;

/// The I/O half of the loop, borrowed from `run`.
struct Driver<'a> {
    service: &'static str,
    store: Option<&'a Store>,
    producer: &'a Producer,
    consumer: &'a Consumer<Membership>,
    dlq_topic: String,
    dlq_payload_bytes: usize,
    dead_letter_codec: AvroCodec<DeadLetter>,
    /// Outputs published since the processor last heard of them.
    published: Vec<Published>,
    /// The batch's steps, staged and not yet committed.
    pending: Commit,
    /// The batch's records, marked done once it is committed.
    done: Vec<InboundRecord>,
}

/// When the processor hears where its outputs landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Report {
    /// Even when nothing was published (after a tick).
    Always,
    IfPublished,
}

/// Whether a staged step carries its record's consumed offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offset {
    Consumed,
    /// The record asked for an action: the step that finishes it carries
    /// the offset.
    LeftForAction,
}

impl Driver<'_> {
    /// Tells the processor where its outputs landed and sends what it asks
    /// for in return, until it asks for nothing more.
    async fn report<P: Processor>(
        &mut self,
        processor: &mut P,
        when: Report,
    ) -> Result<(), P::Error> {
        let mut first = when == Report::Always;
        while first || !self.published.is_empty() {
            first = false;
            let outgoing = processor.published(&self.published, self.store)?;
            self.published.clear();
            let records: Vec<Outbound<'_>> = outgoing.iter().map(Outgoing::outbound).collect();
            let sent = send(self.producer, &records).await?;
            self.published.extend(sent);
        }
        Ok(())
    }

    /// Sends what a round-applying processor returns at the end of a
    /// batch: its groups in order, each delivered before the next, then
    /// its dead letters.
    async fn end_batch<P: Processor>(&mut self, processor: &mut P) -> Result<(), P::Error> {
        let end = processor.end_batch()?;
        if end.groups.is_empty() && end.dead_letters.is_empty() {
            return Ok(());
        }
        for group in &end.groups {
            let records: Vec<Outbound<'_>> = group.iter().map(Outgoing::outbound).collect();
            let sent = send(self.producer, &records).await?;
            self.published.extend(sent);
        }
        let mut letters = Vec::new();
        for (record, reason) in &end.dead_letters {
            letters.push(
                encode_dead_letter(
                    record,
                    reason,
                    self.service,
                    self.dlq_payload_bytes,
                    &self.dead_letter_codec,
                )
                .map_err(RuntimeError::from)?,
            );
        }
        let records: Vec<Outbound<'_>> = letters
            .iter()
            .map(|(key, payload)| Outbound {
                topic: &self.dlq_topic,
                partition: None,
                key,
                payload,
            })
            .collect();
        send(self.producer, &records).await?;
        Ok(())
    }

    /// Whether the store's consumed offset is past `record`: it was applied
    /// before a restart or rebalance.
    fn applied_before(&self, record: &InboundRecord) -> Result<bool, RuntimeError> {
        let Some(store) = self.store else {
            return Ok(false);
        };
        Ok(store
            .offset(&record.topic, record.partition)?
            .is_some_and(|next| record.offset < next))
    }

    /// Decodes and applies `record` and stages what the step wrote.
    /// Returns the action to carry out, if any; the consumed offset is
    /// then left for the step that finishes it.
    async fn handle<P: Processor>(
        &mut self,
        processor: &mut P,
        record: &InboundRecord,
    ) -> Result<Option<P::Action>, P::Error> {
        let mut step = Step::new(record, self.store, Some(&self.pending));
        let decoded = match self.consumer.oversized(record) {
            Some(error) => Err(error),
            None => processor.decode(record),
        };
        let applied = match decoded {
            Ok(input) => processor.apply(input, &mut step)?,
            Err(error) => {
                step.dead_letter(error.to_string());
                Applied::Done
            }
        };
        let staged = step.into_staged();
        match applied {
            Applied::Done => {
                self.stage(record, staged, Offset::Consumed).await?;
                Ok(None)
            }
            Applied::Act(action) => {
                self.stage(record, staged, Offset::LeftForAction).await?;
                Ok(Some(action))
            }
        }
    }

    /// Adds a step, and with [`Offset::Consumed`] the record's consumed
    /// offset, to the batch. Without a store its outputs are published at
    /// once.
    async fn stage(
        &mut self,
        record: &InboundRecord,
        staged: Staged,
        offset: Offset,
    ) -> Result<(), RuntimeError> {
        let dead_letter = match &staged.dead_letter {
            Some(reason) => Some(encode_dead_letter(
                record,
                reason,
                self.service,
                self.dlq_payload_bytes,
                &self.dead_letter_codec,
            )?),
            None => None,
        };
        if self.store.is_none() {
            if !staged.commit.is_empty() {
                return Err(RuntimeError::NoStore {
                    service: self.service,
                });
            }
            let mut records: Vec<Outbound<'_>> = staged.outputs.iter().map(outbound).collect();
            if let Some((key, payload)) = &dead_letter {
                records.push(Outbound {
                    topic: &self.dlq_topic,
                    partition: None,
                    key,
                    payload,
                });
            }
            let mut landed = send(self.producer, &records).await?;
            // Processors hear where their own outputs went, not dead letters.
            landed.truncate(staged.outputs.len());
            self.published.extend(landed);
            return Ok(());
        }
        self.pending.append(staged.commit);
        if offset == Offset::Consumed {
            self.pending
                .consumed(&record.topic, record.partition, record.offset + 1);
        }
        for output in staged.outputs {
            self.pending.publish(output);
        }
        if let Some((key, payload)) = dead_letter {
            self.pending.publish(unicron_store::OutboxEntry {
                topic: self.dlq_topic.clone(),
                key,
                payload,
                partition: None,
            });
        }
        Ok(())
    }

    /// `record` is handled: it is marked done once its batch is committed.
    fn done(&mut self, record: InboundRecord) {
        self.done.push(record);
    }

    /// Commits the batch in one write, publishes its outputs and marks its
    /// records done.
    async fn flush(&mut self) -> Result<(), RuntimeError> {
        if let Some(store) = self.store
            && !self.pending.is_empty()
        {
            store.commit(std::mem::take(&mut self.pending))?;
            let published = drain(store, self.producer).await?;
            self.published.extend(published);
        }
        for record in self.done.drain(..) {
            self.consumer.mark_done(&record)?;
        }
        Ok(())
    }
}
