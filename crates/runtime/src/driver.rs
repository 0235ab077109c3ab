//! The loop: consume → decode → apply (a batch of waiting records) →
//! commit → publish → mark done, over any [`Source`] and [`Sink`].

use std::future::Future;
use std::time::Instant;

use unicron_bus::dlq::encode_dead_letter;
use unicron_bus::producer::{Outbound, OwnedOutbound};
use unicron_codec::{AvroCodec, InboundRecord, KafkaConfig, Topic, Topics};
use unicron_core::DeadLetter;
use unicron_store::{Commit, OutboxEntry, Store};

use crate::error::RuntimeError;
use crate::in_flight::{Flights, InFlight, MAX_IN_FLIGHT, owned};
use crate::io::{Sink, Source};
use crate::offsets::PartitionOffsets;
use crate::options::{Durability, OnStop, RuntimeOptions};
use crate::outbox::{Published, drain, outbound, send};
use crate::processor::{Act, Applied, BusStatus, Outgoing, Processor, Reading};
use crate::step::{Staged, Step};

/// Where a service's outputs go: unicron's topics under the configured
/// prefix (a record's type names its topic), and how much of a bad
/// payload a dead letter keeps.
#[derive(Debug, Clone)]
pub struct Outputs {
    pub topics: Topics,
    pub dlq_payload_bytes: usize,
}

impl Outputs {
    pub fn new(kafka: &KafkaConfig) -> Outputs {
        Outputs::for_cluster(kafka, None)
    }

    /// The outputs of a service writing for `cluster` (its own ingress
    /// topics, when it has them).
    pub fn for_cluster(kafka: &KafkaConfig, cluster: Option<&str>) -> Outputs {
        Outputs {
            topics: match cluster {
                Some(cluster) => Topics::bound(kafka, cluster),
                None => Topics::new(kafka),
            },
            dlq_payload_bytes: kafka.dlq_payload_bytes,
        }
    }
}

/// Runs `processor` over `source` and `sink` until `shutdown` completes or
/// an unrecoverable error. [`crate::run`] calls it with Kafka; tests call
/// it with a scripted source and sink.
pub async fn drive<P: Processor>(
    source: &impl Source,
    sink: &impl Sink,
    options: &RuntimeOptions,
    outputs: &Outputs,
    processor: &mut P,
    shutdown: impl Future<Output = ()>,
) -> Result<(), P::Error> {
    let store = options.durability.opened().map(|s| &**s);
    let mut driver = Driver {
        service: options.service,
        store,
        settles_elsewhere: matches!(options.durability, Durability::Elsewhere),
        source,
        sink,
        outputs,
        dead_letter_codec: AvroCodec::default(),
        published: Vec::new(),
        pending: Commit::new(),
        done: PartitionOffsets::default(),
        last_read: processor.tick_every().map(|_| PartitionOffsets::default()),
        generation: source.generation(),
        in_flight: Flights::default(),
    };
    if let Some(store) = store {
        driver.published = drain(store, sink).await?;
    }
    driver.report(processor, Report::IfPublished).await?;
    let mut ticks = processor.tick_every().map(|every| {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval
    });
    let mut last_tick = tokio::time::Instant::now();
    // Ready while this loop runs; not ready once it ends, however it ends.
    let _ready = unicron_bus::metrics::ReadyGuard::new(options.service);
    tokio::pin!(shutdown);
    'reading: loop {
        // A tick that is due runs between batches too: under a backlog
        // the reader never idles, and a processor's ticks (the detector's
        // lag guard) matter most then.
        // Timers fire only when the runtime parks, which a busy reader
        // may never do: the wall clock says when a tick is due. What the
        // tick changes goes out with the batch being read, not on its own.
        if let (Some(interval), Some(every)) = (ticks.as_mut(), processor.tick_every())
            && tokio::time::Instant::now() >= last_tick + every
        {
            interval.reset();
            last_tick = tokio::time::Instant::now();
            driver.tick_with(processor, true)?;
        }
        // With nothing left to read, the batch in flight lands now: an
        // idle loop leaves no record unmarked.
        let waiting = match driver.in_flight.is_empty() {
            false => source.try_recv(),
            true => None,
        };
        if waiting.is_none() && !driver.in_flight.is_empty() {
            driver.land(0).await?;
            driver.report(processor, Report::IfPublished).await?;
        }
        let first = match waiting {
            Some(record) => record.map_err(RuntimeError::from)?,
            None => tokio::select! {
                record = source.recv() => record.map_err(RuntimeError::from)?,
                _ = async { ticks.as_mut().expect("guarded").tick().await }, if ticks.is_some() => {
                    last_tick = tokio::time::Instant::now();
                    driver.tick(processor).await?;
                    continue;
                }
                () = &mut shutdown => break,
            },
        };
        // Whatever else is ready joins this record's batch, each with the
        // group generation it was read in.
        let mut batch = vec![(first, source.generation())];
        while batch.len() < options.max_batch.max(1) {
            match source.try_recv() {
                Some(record) => {
                    batch.push((record.map_err(RuntimeError::from)?, source.generation()))
                }
                None => break,
            }
        }
        // Once a batch: the status reads the wall clock.
        processor.observe(driver.status());
        for (record, read_in) in batch {
            let Some(action) = driver.take(processor, &record, read_in).await? else {
                continue;
            };
            let outcome = tokio::select! {
                outcome = action.act(processor) => outcome,
                () = &mut shutdown => {
                    tracing::info!(service = options.service, "stopping mid-action: the record is read again after a restart");
                    break 'reading;
                }
            };
            driver.finish(processor, record, action, outcome).await?;
        }
        driver.settle(processor, Report::IfPublished).await?;
    }
    if let OnStop::ReadToEnd { limit } = options.on_stop {
        driver.read_to_end(processor, limit).await?;
    }
    processor.stopping()?;
    driver.settle(processor, Report::IfPublished).await?;
    driver.land(0).await?;
    driver.report(processor, Report::IfPublished).await?;
    source.commit_now().map_err(RuntimeError::from)?;
    Ok(())
}

/// The loop's state between records, borrowed from `drive`.
struct Driver<'a, S, K> {
    service: &'static str,
    store: Option<&'a Store>,
    /// [`Durability::Elsewhere`]: offsets are the processor's to settle.
    settles_elsewhere: bool,
    source: &'a S,
    sink: &'a K,
    outputs: &'a Outputs,
    dead_letter_codec: AvroCodec<DeadLetter>,
    /// Outputs published since the processor last heard of them.
    published: Vec<Published>,
    /// The batch's steps, staged and not yet committed.
    pending: Commit,
    /// The batch's newest record of each partition, marked done once the
    /// batch is committed (the records before it in the batch with it).
    done: PartitionOffsets,
    /// The last offset read of each partition, kept only for processors
    /// that tick (only ticks ask how far a partition was read).
    last_read: Option<PartitionOffsets>,
    /// The group generation the processor last heard of.
    generation: u64,
    /// Batches whose last outputs are still being delivered.
    in_flight: Flights,
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

impl<S: Source, K: Sink> Driver<'_, S, K> {
    /// Takes one record of a batch read in generation `read_in`. Returns
    /// the action it asks for, once what was staged before it is
    /// committed (an action runs outside any step).
    async fn take<P: Processor>(
        &mut self,
        processor: &mut P,
        record: &InboundRecord,
        read_in: u64,
    ) -> Result<Option<P::Action>, P::Error> {
        tracing::debug!(topic = %record.topic, partition = record.partition, offset = record.offset, "received");
        if read_in != self.source.generation()
            && !self.source.holds(&record.topic, record.partition)
        {
            // Read before a rebalance gave its partition away: the new
            // owner reads it, and it is not marked done here.
            return Ok(None);
        }
        if read_in != self.generation {
            // What was read before the rebalance is committed before the
            // processor hears of it (a takeover reads the store).
            self.settle(processor, Report::IfPublished).await?;
            self.land(0).await?;
            self.generation = read_in;
            processor.reassigned(&self.source.assigned()).await?;
            processor.observe(self.status());
        }
        if let Some(last_read) = &mut self.last_read {
            last_read.note(&record.topic, record.partition, record.offset);
        }
        if !processor.wants(record) || self.applied_before(record)? {
            self.done(record);
            return Ok(None);
        }
        let Some(action) = self.handle(processor, record).await? else {
            self.done(record);
            return Ok(None);
        };
        self.settle(processor, Report::IfPublished).await?;
        Ok(Some(action))
    }

    /// Stages what `action` came to, with `record`'s consumed offset.
    async fn finish<P: Processor>(
        &mut self,
        processor: &mut P,
        record: InboundRecord,
        action: P::Action,
        outcome: <P::Action as Act<P>>::Outcome,
    ) -> Result<(), P::Error> {
        let mut step = Step::new(&record, &self.outputs.topics, self.store, None);
        action.finish(outcome, processor, &mut step)?;
        let staged = step.into_staged();
        self.stage(&record, staged, Offset::Consumed).await?;
        self.done(&record);
        Ok(())
    }

    /// A tick: the processor's work due by time, then what it queued.
    async fn tick<P: Processor>(&mut self, processor: &mut P) -> Result<(), P::Error> {
        self.tick_with(processor, false)?;
        self.settle(processor, Report::Always).await
    }

    /// The processor's tick; `backlog`: records are waiting (a tick
    /// between batches, whose outputs leave with the next batch's end).
    fn tick_with<P: Processor>(
        &mut self,
        processor: &mut P,
        backlog: bool,
    ) -> Result<(), P::Error> {
        let empty = PartitionOffsets::default();
        processor.tick(&Reading {
            last_read: self.last_read.as_ref().unwrap_or(&empty),
            positions: self.source,
            status: self.status(),
            backlog,
        })
    }

    /// Reads every held partition up to the end it has now, for at most
    /// `limit`.
    async fn read_to_end<P: Processor>(
        &mut self,
        processor: &mut P,
        limit: std::time::Duration,
    ) -> Result<(), P::Error> {
        let mut ends = self.source.unread_ends().map_err(RuntimeError::from)?;
        let unread = ends.len();
        let deadline = tokio::time::Instant::now() + limit;
        while !ends.is_empty() {
            let record = match tokio::time::timeout_at(deadline, self.source.recv()).await {
                Ok(record) => record.map_err(RuntimeError::from)?,
                Err(_) => {
                    tracing::warn!(
                        service = self.service,
                        partitions = ends.len(),
                        "stopping before the end of some partitions: the broker did not deliver them in time"
                    );
                    break;
                }
            };
            let key = (record.topic.clone(), record.partition);
            if ends.get(&key).is_some_and(|end| record.offset + 1 >= *end) {
                ends.remove(&key);
            }
            let read_in = self.source.generation();
            processor.observe(self.status());
            if let Some(action) = self.take(processor, &record, read_in).await? {
                let outcome = action.act(processor).await;
                self.finish(processor, record, action, outcome).await?;
            }
            self.settle(processor, Report::IfPublished).await?;
        }
        tracing::info!(
            service = self.service,
            partitions = unread,
            "read to the end before stopping"
        );
        Ok(())
    }

    fn status(&self) -> BusStatus {
        BusStatus {
            connection_losses: self.source.connection_losses(),
            now: Instant::now(),
        }
    }

    /// Ends the batch in hand: what a round-applying processor queued,
    /// the commit, the publish, the processor told where its outputs
    /// landed, and the offsets it settled.
    async fn settle<P: Processor>(
        &mut self,
        processor: &mut P,
        report: Report,
    ) -> Result<(), P::Error> {
        self.land(MAX_IN_FLIGHT - 1).await?;
        self.end_batch(processor).await?;
        self.flush().await?;
        self.report(processor, report).await?;
        if self.settles_elsewhere {
            for s in processor.settled() {
                // A partition revoked meanwhile no longer takes offsets:
                // its new owner reads those records again, which
                // duplicates, never loses.
                if let Err(error) = self.source.mark_done(&s.topic, s.partition, s.through) {
                    tracing::warn!(service = self.service, topic = %s.topic, partition = s.partition, offset = s.through, %error, "cannot store the offset");
                }
            }
        }
        Ok(())
    }

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
            let outgoing = processor.published(&self.published)?;
            self.published.clear();
            let records: Vec<Outbound<'_>> = outgoing.iter().map(Outgoing::outbound).collect();
            let sent = send(self.sink, &records).await?;
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
        // Without a store, the batch's records are marked done here: the
        // last group can be delivered while the next batch is read.
        let pipelined = self.store.is_none() && !self.settles_elsewhere;
        let (last, awaited) = match end.groups.split_last() {
            Some((last, before)) if pipelined => (Some(last), before),
            _ => (None, &end.groups[..]),
        };
        for group in awaited {
            let records: Vec<Outbound<'_>> = group.iter().map(Outgoing::outbound).collect();
            let sent = send(self.sink, &records).await?;
            self.published.extend(sent);
        }
        let mut letters = Vec::new();
        for (record, reason) in &end.dead_letters {
            letters.push(self.dead_letter(record, reason)?);
        }
        let dlq = self.outputs.topics.name(Topic::Dlq);
        if let Some(last) = last {
            let mut owned: Vec<OwnedOutbound> = last.iter().map(|o| owned(o.outbound())).collect();
            let reported = owned.iter().map(|o| o.topic.clone()).collect();
            owned.extend(letters.into_iter().map(|(key, payload)| OwnedOutbound {
                topic: dlq.to_string(),
                partition: None,
                key,
                payload,
            }));
            self.in_flight.push(InFlight {
                sending: self.sink.send_owned(owned),
                reported,
                done: std::mem::take(&mut self.done),
            });
            return Ok(());
        }
        let records: Vec<Outbound<'_>> = letters
            .iter()
            .map(|(key, payload)| Outbound {
                topic: dlq,
                partition: None,
                key,
                payload,
            })
            .collect();
        send(self.sink, &records).await?;
        Ok(())
    }

    /// Lands what is in flight until at most `keep` batches are left.
    async fn land(&mut self, keep: usize) -> Result<(), RuntimeError> {
        self.in_flight
            .land(keep, self.source, self.service, &mut self.published)
            .await
    }

    fn dead_letter(
        &self,
        record: &InboundRecord,
        reason: &str,
    ) -> Result<(Vec<u8>, Vec<u8>), RuntimeError> {
        Ok(encode_dead_letter(
            record,
            reason,
            self.service,
            self.outputs.dlq_payload_bytes,
            &self.dead_letter_codec,
        )?)
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
        let mut step = Step::new(
            record,
            &self.outputs.topics,
            self.store,
            Some(&self.pending),
        );
        let decoded = match self.source.oversized(record) {
            Some(error) => Err(error),
            None => processor.decode(record),
        };
        let (applied, undecodable) = match decoded {
            Ok(input) => (processor.apply(input, &mut step)?, false),
            Err(error) => {
                step.dead_letter(error.to_string());
                (Applied::Done, true)
            }
        };
        let staged = step.into_staged();
        match applied {
            Applied::Done => {
                self.stage(record, staged, Offset::Consumed).await?;
                if undecodable {
                    processor.dead_lettered(record);
                }
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
            Some(reason) => Some(self.dead_letter(record, reason)?),
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
                    topic: self.outputs.topics.name(Topic::Dlq),
                    partition: None,
                    key,
                    payload,
                });
            }
            let mut landed = send(self.sink, &records).await?;
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
            self.pending.publish(OutboxEntry {
                topic: self.outputs.topics.name(Topic::Dlq).to_string(),
                key,
                payload,
                partition: None,
            });
        }
        Ok(())
    }

    /// `record` is handled: it is marked done once its batch is committed
    /// (unless the processor settles offsets itself).
    fn done(&mut self, record: &InboundRecord) {
        if !self.settles_elsewhere {
            self.done
                .note(&record.topic, record.partition, record.offset);
        }
    }

    /// Commits the batch in one write, publishes its outputs and marks its
    /// records done.
    async fn flush(&mut self) -> Result<(), RuntimeError> {
        if let Some(store) = self.store
            && !self.pending.is_empty()
        {
            store.commit(std::mem::take(&mut self.pending))?;
            let published = drain(store, self.sink).await?;
            self.published.extend(published);
        }
        for (topic, partition, offset) in self.done.iter() {
            self.source.mark_done(topic, partition, offset)?;
        }
        self.done.clear();
        Ok(())
    }
}
