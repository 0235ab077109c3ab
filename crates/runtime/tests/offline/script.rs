//! A scripted [`Source`] and a recording [`Sink`]: the runtime's loop
//! driven with no broker, each rebalance and failure placed exactly.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;

use tokio::sync::Notify;
use unicron_bus::BusError;
use unicron_bus::producer::{Delivered, Outbound, OwnedOutbound, Sending};
use unicron_codec::{DecodeError, InboundRecord};
use unicron_runtime::{Positions, Sink, Source};

/// What the source hands the loop next.
#[derive(Debug, Clone)]
pub enum Event {
    Record(InboundRecord),
    /// The group assigns exactly these partitions (a rebalance).
    Assign(Vec<(String, i32)>),
}

/// A record of `topic`'s partition 0 unless said otherwise.
pub fn record(topic: &str, partition: i32, offset: i64, key: &str, payload: &[u8]) -> Event {
    Event::Record(InboundRecord {
        topic: topic.to_string(),
        partition,
        offset,
        key: Some(key.as_bytes().to_vec()),
        payload: payload.to_vec(),
        timestamp_ms: Some(1_000 + offset),
        caught_up: false,
    })
}

#[derive(Default)]
struct Script {
    events: VecDeque<Event>,
    generation: u64,
    assigned: BTreeSet<(String, i32)>,
    /// The last offset marked done, by partition.
    marked: BTreeMap<(String, i32), i64>,
    /// Every offset marked done, in order.
    marks: Vec<(String, i32, i64)>,
    commits: usize,
    /// Hands out one record per batch.
    unbatched: bool,
    /// Events handed out so far.
    handed_out: usize,
}

/// Hands out the scripted events in order; waits forever when none are
/// left, as a consumer with nothing to read does.
pub struct ScriptedSource {
    script: Mutex<Script>,
    more: Notify,
    max_record_bytes: usize,
}

impl ScriptedSource {
    /// A source holding `assigned` from the start.
    pub fn new(assigned: &[(&str, i32)], events: Vec<Event>) -> ScriptedSource {
        let script = Script {
            events: events.into(),
            assigned: assigned.iter().map(|(t, p)| (t.to_string(), *p)).collect(),
            ..Script::default()
        };
        ScriptedSource {
            script: Mutex::new(script),
            more: Notify::new(),
            max_record_bytes: 1024,
        }
    }

    /// Records larger than `bytes` are oversized.
    pub fn with_record_limit(mut self, bytes: usize) -> ScriptedSource {
        self.max_record_bytes = bytes;
        self
    }

    /// Hands out one record at a time: each is a batch of its own.
    pub fn unbatched(self) -> ScriptedSource {
        self.script.lock().unwrap().unbatched = true;
        self
    }

    /// Every offset marked done, in order.
    pub fn marks(&self) -> Vec<(String, i32, i64)> {
        self.script.lock().unwrap().marks.clone()
    }

    /// The last offset marked done of each partition.
    pub fn marked(&self) -> BTreeMap<(String, i32), i64> {
        self.script.lock().unwrap().marked.clone()
    }

    pub fn commits(&self) -> usize {
        self.script.lock().unwrap().commits
    }

    /// Whether the records through the `n`-th scripted event (0-based)
    /// were handed out.
    pub fn sent_through(&self, n: usize) -> bool {
        let script = self.script.lock().unwrap();
        script.handed_out > n
    }

    /// Whether every scripted event was handed out.
    pub fn exhausted(&self) -> bool {
        self.script.lock().unwrap().events.is_empty()
    }

    /// Completes once every event was handed out and `partition`'s records
    /// through `last` are marked done: the point a test stops the loop.
    pub async fn done_through(&self, topic: &str, partition: i32, last: i64) {
        loop {
            let notified = self.more.notified();
            {
                let script = self.script.lock().unwrap();
                if script.events.is_empty()
                    && script
                        .marked
                        .get(&(topic.to_string(), partition))
                        .is_some_and(|m| *m >= last)
                {
                    return;
                }
            }
            notified.await;
        }
    }

    fn next(&self) -> Option<InboundRecord> {
        let mut script = self.script.lock().unwrap();
        loop {
            let event = script.events.pop_front()?;
            script.handed_out += 1;
            match event {
                Event::Record(record) => return Some(record),
                Event::Assign(partitions) => {
                    script.assigned = partitions.into_iter().collect();
                    script.generation += 1;
                }
            }
        }
    }
}

impl Positions for ScriptedSource {
    fn caught_up_with(&self, _: &str, _: i32, _: i64) -> bool {
        self.exhausted()
    }

    fn high_watermark(&self, _: &str, _: i32) -> Option<i64> {
        None
    }
}

impl Source for ScriptedSource {
    async fn recv(&self) -> Result<InboundRecord, BusError> {
        match self.next() {
            Some(record) => Ok(record),
            None => std::future::pending().await,
        }
    }

    fn try_recv(&self) -> Option<Result<InboundRecord, BusError>> {
        if self.script.lock().unwrap().unbatched {
            return None;
        }
        self.next().map(Ok)
    }

    fn oversized(&self, record: &InboundRecord) -> Option<DecodeError> {
        (record.payload.len() > self.max_record_bytes).then_some(DecodeError::Oversized {
            size: record.payload.len(),
            limit: self.max_record_bytes,
        })
    }

    fn mark_done(&self, topic: &str, partition: i32, offset: i64) -> Result<(), BusError> {
        let mut script = self.script.lock().unwrap();
        script.marked.insert((topic.to_string(), partition), offset);
        script.marks.push((topic.to_string(), partition, offset));
        self.more.notify_waiters();
        Ok(())
    }

    fn commit_now(&self) -> Result<(), BusError> {
        self.script.lock().unwrap().commits += 1;
        Ok(())
    }

    /// Every partition with a scripted record left ends after its last one.
    fn unread_ends(&self) -> Result<BTreeMap<(String, i32), i64>, BusError> {
        let script = self.script.lock().unwrap();
        let mut ends = BTreeMap::new();
        for event in &script.events {
            if let Event::Record(r) = event {
                ends.insert((r.topic.clone(), r.partition), r.offset + 1);
            }
        }
        Ok(ends)
    }

    fn generation(&self) -> u64 {
        self.script.lock().unwrap().generation
    }

    fn holds(&self, topic: &str, partition: i32) -> bool {
        self.script
            .lock()
            .unwrap()
            .assigned
            .contains(&(topic.to_string(), partition))
    }

    fn assigned(&self) -> Vec<(String, i32)> {
        self.script
            .lock()
            .unwrap()
            .assigned
            .iter()
            .cloned()
            .collect()
    }

    fn connection_losses(&self) -> u64 {
        0
    }
}

/// One record the sink took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub topic: String,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
}

#[derive(Default)]
struct Sends {
    sent: Vec<Sent>,
    /// `send_all` calls so far.
    calls: usize,
    /// The call (1-based) that fails, delivering nothing.
    fails_at: Option<usize>,
}

/// Keeps what is sent, in order; can be told to fail one call.
#[derive(Default)]
pub struct RecordingSink {
    sends: Mutex<Sends>,
    /// When set, a `send_owned` delivery completes only with a permit.
    gate: Option<std::sync::Arc<tokio::sync::Semaphore>>,
}

impl RecordingSink {
    /// A sink whose `send_owned` deliveries each wait for a permit of
    /// `gate` (the records are recorded at once, as a producer queues).
    pub fn gated(gate: std::sync::Arc<tokio::sync::Semaphore>) -> RecordingSink {
        RecordingSink {
            gate: Some(gate),
            ..RecordingSink::default()
        }
    }

    /// A sink whose `call`-th `send_all` fails, delivering nothing.
    pub fn failing_at(call: usize) -> RecordingSink {
        RecordingSink {
            sends: Mutex::new(Sends {
                fails_at: Some(call),
                ..Sends::default()
            }),
            gate: None,
        }
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.sends.lock().unwrap().sent.clone()
    }

    /// The payloads sent to `topic`, as text.
    pub fn texts(&self, topic: &str) -> Vec<String> {
        self.sent()
            .into_iter()
            .filter(|s| s.topic == topic)
            .map(|s| String::from_utf8_lossy(&s.payload).into_owned())
            .collect()
    }
}

impl Sink for RecordingSink {
    /// Recorded at once, as a producer queues at once; delivered when
    /// awaited.
    fn send_owned(&self, records: Vec<OwnedOutbound>) -> Sending {
        let outbound: Vec<Outbound<'_>> = records.iter().map(OwnedOutbound::outbound).collect();
        let result = self.record(&outbound);
        let gate = self.gate.clone();
        Box::pin(async move {
            if let Some(gate) = gate {
                gate.acquire().await.expect("the gate stays open").forget();
            }
            result
        })
    }

    async fn send_all(&self, records: &[Outbound<'_>]) -> Result<Vec<Delivered>, BusError> {
        self.record(records)
    }
}

impl RecordingSink {
    fn record(&self, records: &[Outbound<'_>]) -> Result<Vec<Delivered>, BusError> {
        let mut sends = self.sends.lock().unwrap();
        sends.calls += 1;
        if sends.fails_at == Some(sends.calls) {
            return Err(BusError::Internal("the broker went away".into()));
        }
        let mut delivered = Vec::new();
        for record in records {
            let offset = sends
                .sent
                .iter()
                .filter(|s| s.topic == record.topic)
                .count() as i64;
            sends.sent.push(Sent {
                topic: record.topic.to_string(),
                key: record.key.to_vec(),
                payload: record.payload.to_vec(),
            });
            delivered.push(Delivered {
                partition: record.partition.unwrap_or(0),
                offset,
            });
        }
        Ok(delivered)
    }
}
