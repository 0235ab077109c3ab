//! Records already waiting when the runtime reads are applied as one
//! batch: one RocksDB commit and one publish for all of them. A step still
//! sees what the steps before it in the batch staged, an action commits
//! what was staged before it runs, and every output is published once, in
//! input order.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use unicron_bus::{
    Consumer, DecodeError, EmbeddedBroker, InboundRecord, KafkaConfig, Producer, Subscription,
};
use unicron_runtime::{
    Applied, Durability, Outgoing, Processor, Published, RuntimeOptions, StartFrom, Step, Store,
};

const INPUT: &str = "batches.in";
const OUTPUT: &str = "batches.out";
const INPUTS: i64 = 400;
/// Inputs that ask for an action between two commits.
const ACTS: [i64; 3] = [150, 151, 300];
const KEYS: [&str; 3] = ["a", "b", "c"];

/// Counts inputs per key; an `act` input also runs an action.
struct Counter {
    /// Outputs published by each drain, in order.
    drains: Arc<Mutex<Vec<usize>>>,
    /// What a store read showed when each action ran.
    seen_at_act: Vec<Option<Vec<u8>>>,
    published: usize,
    all_published: Arc<Notify>,
}

fn count_key(key: &[u8]) -> Vec<u8> {
    [b"count/".as_slice(), key].concat()
}

impl Processor for Counter {
    type Input = bool;
    type Action = Vec<u8>;
    type Outcome = ();
    type Error = unicron_runtime::RuntimeError;

    fn decode(&self, record: &InboundRecord) -> Result<bool, DecodeError> {
        Ok(record.payload == b"act")
    }

    fn apply(&mut self, act: bool, step: &mut Step<'_>) -> Result<Applied<Vec<u8>>, Self::Error> {
        let record = step.record();
        let key = record.key.clone().unwrap_or_default();
        let count = step
            .state(&count_key(&key))?
            .map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
            + 1;
        step.put_state(count_key(&key), count.to_be_bytes());
        step.publish(
            OUTPUT,
            key.clone(),
            format!("{}={count}", record.offset).into_bytes(),
        );
        Ok(if act {
            Applied::Act(key)
        } else {
            Applied::Done
        })
    }

    /// Stands for a backend call.
    async fn act(&mut self, _: &Vec<u8>) {}

    /// `finish`'s step starts a batch of its own, so it reads only what
    /// is committed.
    fn finish(&mut self, key: Vec<u8>, _: (), step: &mut Step<'_>) -> Result<(), Self::Error> {
        self.seen_at_act.push(step.state(&count_key(&key))?);
        let offset = step.record().offset;
        step.publish(OUTPUT, key, format!("{offset}=acted").into_bytes());
        Ok(())
    }

    fn published(
        &mut self,
        published: &[Published],
        _: Option<&Store>,
    ) -> Result<Vec<Outgoing>, Self::Error> {
        if !published.is_empty() {
            self.drains.lock().unwrap().push(published.len());
            self.published += published.len();
            if self.published >= (INPUTS as usize) + ACTS.len() {
                self.all_published.notify_one();
            }
        }
        Ok(Vec::new())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_records_commit_and_publish_as_one_batch() {
    let broker = EmbeddedBroker::start(1).unwrap();
    for topic in [INPUT, OUTPUT, "unicron.dlq"] {
        broker.create_topic(topic, 1).unwrap();
    }
    let brokers = broker.bootstrap_servers().to_string();
    let kafka = KafkaConfig::default();
    let producer = Producer::new(&kafka, &brokers).unwrap();
    for i in 0..INPUTS {
        let key = KEYS[(i % KEYS.len() as i64) as usize];
        let payload: &[u8] = if ACTS.contains(&i) { b"act" } else { b"n" };
        producer
            .send_bytes(INPUT, key.as_bytes(), payload)
            .await
            .unwrap();
    }

    let dir = tempfile::tempdir().unwrap();
    let options = RuntimeOptions {
        service: "batches",
        group_id: "batches".into(),
        subscriptions: vec![Subscription::External {
            name: INPUT.into(),
            optional: false,
        }],
        durability: Durability::Store {
            state_dir: dir.path().to_path_buf(),
            sync: false,
            start: StartFrom::StoredOffsets,
        },
    };
    let drains = Arc::new(Mutex::new(Vec::new()));
    let all_published = Arc::new(Notify::new());
    let mut counter = Counter {
        drains: drains.clone(),
        seen_at_act: Vec::new(),
        published: 0,
        all_published: all_published.clone(),
    };
    let stop = all_published.clone();
    tokio::time::timeout(
        Duration::from_secs(60),
        unicron_runtime::run(&kafka, &brokers, &options, &mut counter, async move {
            stop.notified().await
        }),
    )
    .await
    .expect("every output published within a minute")
    .unwrap();

    // Batching happened, within its bound.
    let drains = drains.lock().unwrap().clone();
    let largest = drains.iter().copied().max().unwrap();
    assert!(largest > 1, "every drain published one record: {drains:?}");
    assert!(largest <= 128 + 1, "a drain of {largest} records");
    println!(
        "{} drains for {} outputs, largest {largest}",
        drains.len(),
        drains.iter().sum::<usize>()
    );

    // An action's record was committed before the action ran: the step
    // that finishes it reads its count from the store.
    let expected_at_act: Vec<Option<Vec<u8>>> = ACTS
        .iter()
        .map(|&i| Some(((i / KEYS.len() as i64) as u64 + 1).to_be_bytes().to_vec()))
        .collect();
    assert_eq!(counter.seen_at_act, expected_at_act);

    // Every input's output, once, in input order, with the count through
    // that input: a step saw what earlier steps of its batch staged.
    let reader = Consumer::new(&kafka, &brokers, "checker").unwrap();
    reader.assign(&[(OUTPUT, 0, None)]).unwrap();
    let mut outputs = Vec::new();
    while let Ok(Ok(record)) = tokio::time::timeout(Duration::from_secs(3), reader.recv()).await {
        outputs.push(String::from_utf8(record.payload).unwrap());
    }
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
    assert_eq!(outputs, expected);
    let store = Store::open(dir.path(), Default::default()).unwrap();
    assert_eq!(store.offset(INPUT, 0).unwrap(), Some(INPUTS));
    assert!(store.outbox().unwrap().is_empty(), "the outbox drained");
}
