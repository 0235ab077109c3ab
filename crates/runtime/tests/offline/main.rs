//! The runtime's loop ordering, driven without a broker or the wall
//! clock: a scripted source places every rebalance and record, a
//! recording sink fails exactly where a test says. What crosses processes
//! (SIGKILL, a real group) is tested in `kill_nine` on the embedded broker.

mod backlog;
mod rounds;
mod script;

use std::collections::BTreeMap;
use std::sync::Arc;

use script::{Event, RecordingSink, ScriptedSource, record};
use unicron_codec::{AvroCodec, DecodeError, InboundRecord, KafkaConfig, Subscription};
use unicron_core::{DeadLetter, LogRecord};
use unicron_runtime::{
    Act, Applied, Durability, Never, OnStop, Outputs, Processor, Published, RuntimeError,
    RuntimeOptions, Settled, StartFrom, Step, Store, drive,
};
use unicron_store::StoreOptions;

const INPUT: &str = "toy.in";
const OUTPUT: &str = "toy.out";
const DLQ: &str = "unicron.dlq";

fn dead_letters() -> Outputs {
    Outputs::new(&KafkaConfig {
        dlq_payload_bytes: 1024,
        ..KafkaConfig::default()
    })
}

fn options(durability: Durability) -> RuntimeOptions {
    RuntimeOptions::new(
        "toy",
        "toy",
        vec![Subscription::External {
            name: INPUT.into(),
            optional: false,
        }],
        durability,
    )
}

fn stored(store: &Arc<Store>) -> Durability {
    Durability::Store {
        store: store.clone(),
        start: StartFrom::StoredOffsets,
    }
}

fn number(record: &InboundRecord) -> Result<i64, DecodeError> {
    std::str::from_utf8(&record.payload)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| DecodeError::Invalid {
            record: "toy input",
            reason: "not a number".into(),
        })
}

fn read_u64(bytes: Option<Vec<u8>>) -> u64 {
    bytes.map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap()))
}

/// Adds each input to a running sum and publishes `out-<offset>`.
struct RunningSum;

impl Processor for RunningSum {
    type Input = i64;
    type Action = Never;
    type Error = RuntimeError;

    fn decode(&self, record: &InboundRecord) -> Result<i64, DecodeError> {
        number(record)
    }

    fn apply(&mut self, n: i64, step: &mut Step<'_>) -> Result<Applied<Never>, RuntimeError> {
        let sum = read_u64(step.state(b"sum")?) + n as u64;
        step.put_state("sum", sum.to_be_bytes());
        let offset = step.record().offset;
        step.publish_bytes(OUTPUT, None, "c1", format!("out-{offset}").into_bytes());
        Ok(Applied::Done)
    }
}

/// Outputs go out only after the commit that staged them: a publish that
/// fails leaves them in the committed outbox, and the next start sends
/// them before anything else. Stopped at every send in turn, the service
/// still publishes every output exactly once and counts every input once.
#[tokio::test]
async fn a_failed_publish_loses_and_duplicates_nothing() {
    const INPUTS: i64 = 30;
    let dir = tempfile::tempdir().unwrap();
    let mut delivered: Vec<String> = Vec::new();
    let mut runs = 0;
    for failing_send in 1.. {
        runs += 1;
        let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
        // The group resumes at the offset committed with the state.
        let next = store.offset(INPUT, 0).unwrap().unwrap_or(0);
        let events = (next..INPUTS)
            .map(|o| record(INPUT, 0, o, "c1", (o * 10).to_string().as_bytes()))
            .collect();
        let source = ScriptedSource::new(&[(INPUT, 0)], events).unbatched();
        let sink = RecordingSink::failing_at(failing_send);
        let result = drive(
            &source,
            &sink,
            &options(stored(&store)),
            &dead_letters(),
            &mut RunningSum,
            source.done_through(INPUT, 0, INPUTS - 1),
        )
        .await;
        delivered.extend(sink.texts(OUTPUT));
        if result.is_ok() {
            break;
        }
        // What the failed send carried is committed, with its records'
        // offsets, and waits in the outbox.
        let committed = store.offset(INPUT, 0).unwrap().unwrap_or(0);
        for (_, entry) in store.outbox().unwrap() {
            let text = String::from_utf8(entry.payload).unwrap();
            let offset: i64 = text.strip_prefix("out-").unwrap().parse().unwrap();
            assert!(
                offset < committed,
                "{text} is in the outbox before its commit"
            );
            assert!(!delivered.contains(&text), "{text} was delivered already");
        }
    }
    assert!(runs > 5, "the publish failed {} times", runs - 1);
    let expected: Vec<String> = (0..INPUTS).map(|o| format!("out-{o}")).collect();
    assert_eq!(delivered, expected, "every output once, in order");
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(
        read_u64(store.state(b"sum").unwrap()),
        (0..INPUTS).map(|n| n as u64 * 10).sum::<u64>()
    );
    assert!(store.outbox().unwrap().is_empty());
}

/// Counts inputs per key and tells what its store showed when the group
/// moved partitions.
struct Counter {
    store: Arc<Store>,
    applied: Vec<(i32, i64)>,
    reassigned: Vec<(Vec<(String, i32)>, u64)>,
}

impl Processor for Counter {
    type Input = ();
    type Action = Never;
    type Error = RuntimeError;

    fn decode(&self, _: &InboundRecord) -> Result<(), DecodeError> {
        Ok(())
    }

    fn apply(&mut self, _: (), step: &mut Step<'_>) -> Result<Applied<Never>, RuntimeError> {
        let record = step.record();
        self.applied.push((record.partition, record.offset));
        let count = read_u64(step.state(b"count")?) + 1;
        step.put_state("count", count.to_be_bytes());
        Ok(Applied::Done)
    }

    async fn reassigned(&mut self, assigned: &[(String, i32)]) -> Result<(), RuntimeError> {
        let count = read_u64(self.store.state(b"count")?);
        self.reassigned.push((assigned.to_vec(), count));
        Ok(())
    }
}

/// A rebalance between records of one batch: records of a partition given
/// away are neither applied nor marked done (its new owner reads them),
/// and what was applied before the rebalance is committed before the
/// processor hears of it (a takeover reads the store).
#[tokio::test]
async fn a_rebalance_in_the_middle_of_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
    let source = ScriptedSource::new(
        &[(INPUT, 0), (INPUT, 1)],
        vec![
            record(INPUT, 1, 0, "a", b"1"),
            record(INPUT, 0, 0, "b", b"1"),
            record(INPUT, 1, 1, "a", b"1"),
            Event::Assign(vec![(INPUT.to_string(), 1)]),
            record(INPUT, 1, 2, "a", b"1"),
        ],
    );
    let mut counter = Counter {
        store: store.clone(),
        applied: Vec::new(),
        reassigned: Vec::new(),
    };
    drive(
        &source,
        &RecordingSink::default(),
        &options(stored(&store)),
        &dead_letters(),
        &mut counter,
        source.done_through(INPUT, 1, 2),
    )
    .await
    .unwrap();
    // All four records were read in one batch; the three read before the
    // rebalance carry the old generation. Partition 0 was given away.
    assert_eq!(counter.applied, vec![(1, 0), (1, 1), (1, 2)]);
    assert_eq!(
        counter.reassigned,
        vec![(vec![(INPUT.to_string(), 1)], 2)],
        "heard of once, after the two records before it were committed"
    );
    let marked = source.marked();
    assert_eq!(marked.get(&(INPUT.to_string(), 1)), Some(&2));
    assert_eq!(marked.get(&(INPUT.to_string(), 0)), None, "{marked:?}");
    assert_eq!(store.offset(INPUT, 0).unwrap(), None);
    assert_eq!(store.offset(INPUT, 1).unwrap(), Some(3));
}

/// Counts inputs per key; an `act` input also runs an action.
struct Batches {
    /// Outputs published by each drain, in order.
    drains: Vec<usize>,
    /// What a store read showed when each action finished.
    seen_at_act: Vec<Option<Vec<u8>>>,
}

fn count_key(key: &[u8]) -> Vec<u8> {
    [b"count/".as_slice(), key].concat()
}

/// Stands for a backend call; `finish`'s step starts a batch of its own,
/// so it reads only what is committed.
struct Acting(Vec<u8>);

impl Act<Batches> for Acting {
    type Outcome = ();

    async fn act(&self, _: &mut Batches) {}

    fn finish(self, _: (), batches: &mut Batches, step: &mut Step<'_>) -> Result<(), RuntimeError> {
        batches.seen_at_act.push(step.state(&count_key(&self.0))?);
        let offset = step.record().offset;
        step.publish_bytes(OUTPUT, None, self.0, format!("{offset}=acted").into_bytes());
        Ok(())
    }
}

impl Processor for Batches {
    type Input = bool;
    type Action = Acting;
    type Error = RuntimeError;

    fn decode(&self, record: &InboundRecord) -> Result<bool, DecodeError> {
        Ok(record.payload == b"act")
    }

    fn apply(&mut self, act: bool, step: &mut Step<'_>) -> Result<Applied<Acting>, RuntimeError> {
        let record = step.record();
        let key = record.key.clone().unwrap_or_default();
        let count = read_u64(step.state(&count_key(&key))?) + 1;
        step.put_state(count_key(&key), count.to_be_bytes());
        step.publish_bytes(
            OUTPUT,
            None,
            key.clone(),
            format!("{}={count}", record.offset).into_bytes(),
        );
        Ok(if act {
            Applied::Act(Acting(key))
        } else {
            Applied::Done
        })
    }

    fn published(
        &mut self,
        published: &[Published],
    ) -> Result<Vec<unicron_runtime::Outgoing>, RuntimeError> {
        if !published.is_empty() {
            self.drains.push(published.len());
        }
        Ok(Vec::new())
    }
}

/// Records already waiting are applied as one batch: one commit and one
/// publish for all of them. A step still sees what the steps before it in
/// the batch staged, an action commits what was staged before it runs,
/// and every output is published once, in input order.
#[tokio::test]
async fn waiting_records_commit_and_publish_as_one_batch() {
    const INPUTS: i64 = 400;
    const ACTS: [i64; 3] = [150, 151, 300];
    const KEYS: [&str; 3] = ["a", "b", "c"];
    let events = (0..INPUTS)
        .map(|i| {
            let key = KEYS[(i % KEYS.len() as i64) as usize];
            let payload: &[u8] = if ACTS.contains(&i) { b"act" } else { b"n" };
            record(INPUT, 0, i, key, payload)
        })
        .collect();
    let source = ScriptedSource::new(&[(INPUT, 0)], events);
    let sink = RecordingSink::default();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
    let mut batches = Batches {
        drains: Vec::new(),
        seen_at_act: Vec::new(),
    };
    drive(
        &source,
        &sink,
        &options(stored(&store)),
        &dead_letters(),
        &mut batches,
        source.done_through(INPUT, 0, INPUTS - 1),
    )
    .await
    .unwrap();

    // Batching happened, within its bound.
    let largest = batches.drains.iter().copied().max().unwrap();
    assert!(
        largest > 1,
        "every drain published one record: {:?}",
        batches.drains
    );
    assert!(largest <= 128 + 1, "a drain of {largest} records");

    // An action's record was committed before the action ran: the step
    // that finishes it reads its count from the store.
    let expected_at_act: Vec<Option<Vec<u8>>> = ACTS
        .iter()
        .map(|&i| Some(((i / KEYS.len() as i64) as u64 + 1).to_be_bytes().to_vec()))
        .collect();
    assert_eq!(batches.seen_at_act, expected_at_act);

    // Every input's output, once, in input order, with the count through
    // that input: a step saw what earlier steps of its batch staged.
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    let mut expected = Vec::new();
    for i in 0..INPUTS {
        let key = KEYS[(i % KEYS.len() as i64) as usize];
        let count = counts.entry(key).or_default();
        *count += 1;
        expected.push(format!("{i}={count}"));
        if ACTS.contains(&i) {
            expected.push(format!("{i}=acted"));
        }
    }
    assert_eq!(sink.texts(OUTPUT), expected);
    assert_eq!(store.offset(INPUT, 0).unwrap(), Some(INPUTS));
    assert!(store.outbox().unwrap().is_empty(), "the outbox drained");
}

/// Decodes log records; keeps what it was given.
#[derive(Default)]
struct Logs {
    applied: Vec<LogRecord>,
    dead_lettered: Vec<i64>,
}

impl Processor for Logs {
    type Input = LogRecord;
    type Action = Never;
    type Error = RuntimeError;

    fn decode(&self, record: &InboundRecord) -> Result<LogRecord, DecodeError> {
        AvroCodec::<LogRecord>::default().decode(&record.payload)
    }

    fn apply(&mut self, log: LogRecord, _: &mut Step<'_>) -> Result<Applied<Never>, RuntimeError> {
        self.applied.push(log);
        Ok(Applied::Done)
    }

    fn dead_lettered(&mut self, record: &InboundRecord) {
        self.dead_lettered.push(record.offset);
    }
}

fn log_line() -> LogRecord {
    LogRecord {
        cluster: "c1".into(),
        node: "node-3".into(),
        time_ms: 1_764_000_000_000,
        source: "stderr".into(),
        job: Some("gpt-13b".into()),
        rank: Some(7),
        gpu: None,
        line: "[Rank 7] Watchdog caught collective operation timeout".into(),
        attributes: BTreeMap::new(),
    }
}

/// Garbage and an oversized record go to the dead-letter topic with the
/// reason (the payload cut to the bound, its size kept), and the record
/// after them is applied.
#[tokio::test]
async fn bad_records_are_dead_lettered_and_the_next_is_applied() {
    let valid = log_line();
    let encoded = AvroCodec::<LogRecord>::default().encode(&valid).unwrap();
    let source = ScriptedSource::new(
        &[(INPUT, 0)],
        vec![
            record(INPUT, 0, 0, "node-3", &[0xde, 0xad, 0xbe, 0xef, 0x01]),
            record(INPUT, 0, 1, "node-3", &vec![b'x'; 5000]),
            record(INPUT, 0, 2, "node-3", &encoded),
        ],
    )
    .with_record_limit(4096);
    let sink = RecordingSink::default();
    let mut logs = Logs::default();
    drive(
        &source,
        &sink,
        &options(Durability::AtLeastOnce),
        &dead_letters(),
        &mut logs,
        source.done_through(INPUT, 0, 2),
    )
    .await
    .unwrap();
    assert_eq!(logs.applied, vec![valid]);
    assert_eq!(logs.dead_lettered, vec![0, 1]);
    let codec = AvroCodec::<DeadLetter>::default();
    let letters: Vec<DeadLetter> = sink
        .sent()
        .iter()
        .filter(|s| s.topic == DLQ)
        .inspect(|s| assert_eq!(s.key, INPUT.as_bytes()))
        .map(|s| codec.decode(&s.payload).unwrap())
        .collect();
    assert_eq!(letters.len(), 2);
    assert_eq!((letters[0].offset, letters[1].offset), (0, 1));
    assert_eq!(letters[0].source_topic, INPUT);
    assert_eq!(letters[0].payload, vec![0xde, 0xad, 0xbe, 0xef, 0x01]);
    assert!(
        letters[0].error.starts_with("avro LogRecord:"),
        "{}",
        letters[0].error
    );
    assert_eq!(letters[0].service, "toy");
    assert_eq!(letters[1].payload_size, 5000);
    assert_eq!(letters[1].payload.len(), 1024, "payload bounded");
    assert_eq!(
        letters[1].error,
        "record of 5000 bytes exceeds the limit of 4096 bytes"
    );
    assert_eq!(source.marked().get(&(INPUT.to_string(), 0)), Some(&2));
}

/// Stands for the archiver: records are durable once their "file" of
/// three closes; a dead-lettered record counts as settled.
#[derive(Default)]
struct Files {
    open: Vec<i64>,
    closed: Vec<Vec<i64>>,
    settled: Vec<Settled>,
    stopped_after: Option<usize>,
}

impl Files {
    fn close(&mut self) {
        if let Some(&last) = self.open.last() {
            self.closed.push(std::mem::take(&mut self.open));
            self.settled.push(Settled {
                topic: INPUT.to_string(),
                partition: 0,
                through: last,
            });
        }
    }
}

impl Processor for Files {
    type Input = i64;
    type Action = Never;
    type Error = RuntimeError;

    fn decode(&self, record: &InboundRecord) -> Result<i64, DecodeError> {
        number(record)
    }

    fn apply(&mut self, _: i64, step: &mut Step<'_>) -> Result<Applied<Never>, RuntimeError> {
        self.open.push(step.record().offset);
        if self.open.len() == 3 {
            self.close();
        }
        Ok(Applied::Done)
    }

    fn dead_lettered(&mut self, record: &InboundRecord) {
        self.open.push(record.offset);
    }

    fn settled(&mut self) -> Vec<Settled> {
        std::mem::take(&mut self.settled)
    }

    fn stopping(&mut self) -> Result<(), RuntimeError> {
        self.stopped_after =
            Some(self.closed.iter().map(Vec::len).sum::<usize>() + self.open.len());
        self.close();
        Ok(())
    }
}

/// With durability elsewhere, only what the processor settled is marked
/// done; asked to stop, the loop first reads to the end the partitions
/// had at the stop, then lets the processor close what is open.
#[tokio::test]
async fn settled_elsewhere_offsets_and_reading_to_the_end_on_stop() {
    let mut events: Vec<Event> = (0..8)
        .map(|o| record(INPUT, 0, o, "k", o.to_string().as_bytes()))
        .collect();
    events[4] = record(INPUT, 0, 4, "k", b"garbage");
    let source = ScriptedSource::new(&[(INPUT, 0)], events);
    let sink = RecordingSink::default();
    let mut options = options(Durability::Elsewhere);
    options.on_stop = OnStop::ReadToEnd {
        limit: std::time::Duration::from_secs(5),
    };
    let mut files = Files::default();
    // Asked to stop before reading anything.
    drive(
        &source,
        &sink,
        &options,
        &dead_letters(),
        &mut files,
        std::future::ready(()),
    )
    .await
    .unwrap();
    assert_eq!(
        files.stopped_after,
        Some(8),
        "all eight read before the stop"
    );
    assert_eq!(files.closed, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
    let marks: Vec<i64> = source.marks().into_iter().map(|(_, _, o)| o).collect();
    assert_eq!(marks, vec![2, 5, 7], "only settled offsets are marked");
    assert_eq!(sink.texts(DLQ).len(), 1, "the garbage was dead-lettered");
    assert_eq!(source.commits(), 1);
}

/// Work due by time: every tick queues an output for the end of the
/// batch, and hears of the outputs published since (even of none).
#[derive(Default)]
struct Ticking {
    ticks: usize,
    reports: usize,
    queued: Vec<unicron_runtime::Outgoing>,
    done: std::sync::Arc<tokio::sync::Notify>,
}

impl Processor for Ticking {
    type Input = ();
    type Action = Never;
    type Error = RuntimeError;

    fn decode(&self, _: &InboundRecord) -> Result<(), DecodeError> {
        Ok(())
    }

    fn apply(&mut self, _: (), _: &mut Step<'_>) -> Result<Applied<Never>, RuntimeError> {
        Ok(Applied::Done)
    }

    fn tick_every(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_secs(3600))
    }

    fn tick(&mut self, _: &unicron_runtime::Reading<'_>) -> Result<(), RuntimeError> {
        self.ticks += 1;
        self.queued.push(unicron_runtime::Outgoing {
            topic: OUTPUT.into(),
            partition: None,
            key: b"t".to_vec(),
            payload: format!("tick-{}", self.ticks).into_bytes(),
        });
        if self.ticks == 3 {
            self.done.notify_one();
        }
        Ok(())
    }

    fn end_batch(&mut self) -> Result<unicron_runtime::BatchEnd, RuntimeError> {
        let mut end = unicron_runtime::BatchEnd::default();
        if !self.queued.is_empty() {
            end.groups.push(std::mem::take(&mut self.queued));
        }
        Ok(end)
    }

    fn published(
        &mut self,
        _: &[Published],
    ) -> Result<Vec<unicron_runtime::Outgoing>, RuntimeError> {
        self.reports += 1;
        Ok(Vec::new())
    }
}

/// Ticks an hour apart run on tokio's paused clock: the test takes no
/// wall time, and each tick's output goes out right after it.
#[tokio::test(start_paused = true)]
async fn ticks_run_on_a_virtual_clock() {
    let source = ScriptedSource::new(&[(INPUT, 0)], Vec::new());
    let sink = RecordingSink::default();
    let mut ticking = Ticking::default();
    let done = ticking.done.clone();
    let started = std::time::Instant::now();
    drive(
        &source,
        &sink,
        &options(Durability::AtLeastOnce),
        &dead_letters(),
        &mut ticking,
        async move { done.notified().await },
    )
    .await
    .unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert_eq!(sink.texts(OUTPUT), ["tick-1", "tick-2", "tick-3"]);
    assert!(
        ticking.reports >= 3,
        "heard after every tick: {}",
        ticking.reports
    );
}
