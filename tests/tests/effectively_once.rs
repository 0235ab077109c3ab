//! docs/design.md §4's effectively-once pattern across the real pieces: inputs read
//! from the embedded broker, state + offsets + outbox committed in one
//! RocksDB batch, the outbox published with the idempotent producer. The
//! processor is stopped dead between commit and publish again and again;
//! the output topic still holds every output exactly once and the state
//! counts every input exactly once.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use unicron_bus::{Consumer, EmbeddedBroker, KafkaConfig, Producer};
use unicron_store::{Commit, OutboxEntry, Store, StoreOptions};

const INPUT: &str = "test.in";
const OUTPUT: &str = "test.out";
const INPUTS: i64 = 30;
const WAIT: Duration = Duration::from_secs(30);

/// Publishes and acknowledges everything pending in the outbox.
async fn drain(store: &Store, producer: &Producer) {
    for (key, entry) in store.outbox().unwrap() {
        producer
            .send_bytes(&entry.topic, &entry.key, &entry.payload)
            .await
            .unwrap();
        store.outbox_delivered(key).unwrap();
    }
}

/// Runs the processor from its stored offset. With `stop_after_commit`, it
/// stops dead right after committing that many inputs, outbox unpublished.
async fn run(dir: &Path, brokers: &str, stop_after_commit: Option<i64>) -> i64 {
    let config = KafkaConfig::default();
    let store = Store::open(dir, StoreOptions::default()).unwrap();
    let producer = Producer::new(&config, brokers).unwrap();
    drain(&store, &producer).await;

    let next = store.offset(INPUT, 0).unwrap();
    let consumer = Consumer::new(&config, brokers, "processor").unwrap();
    consumer.assign(&[(INPUT, 0, next)]).unwrap();
    let mut committed = 0;
    let mut offset = next.unwrap_or(0);
    while offset < INPUTS {
        let record = tokio::time::timeout(WAIT, consumer.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            record.offset, offset,
            "resumes exactly at the stored offset"
        );
        let n: i64 = std::str::from_utf8(&record.payload)
            .unwrap()
            .parse()
            .unwrap();
        let sum = store
            .state(b"sum")
            .unwrap()
            .map_or(0, |b| i64::from_be_bytes(b.try_into().unwrap()));
        let mut commit = Commit::new();
        commit
            .put_state("sum", (sum + n).to_be_bytes())
            .consumed(INPUT, 0, record.offset + 1)
            .publish(OutboxEntry {
                topic: OUTPUT.into(),
                key: b"c1".to_vec(),
                payload: format!("out-{}", record.offset).into_bytes(),
                partition: None,
            });
        store.commit(commit).unwrap();
        committed += 1;
        if stop_after_commit == Some(committed) {
            return committed; // dropped: no drain, no clean shutdown
        }
        drain(&store, &producer).await;
        offset += 1;
    }
    committed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stops_between_commit_and_publish_lose_and_duplicate_nothing() {
    let broker = EmbeddedBroker::start(1).unwrap();
    broker.create_topic(INPUT, 1).unwrap();
    broker.create_topic(OUTPUT, 1).unwrap();
    let brokers = broker.bootstrap_servers().to_string();
    let producer = Producer::new(&KafkaConfig::default(), &brokers).unwrap();
    for n in 0..INPUTS {
        producer
            .send_bytes(INPUT, b"c1", (n * 10).to_string().as_bytes())
            .await
            .unwrap();
    }

    let dir = tempfile::tempdir().unwrap();
    let mut runs = 0;
    let mut processed = 0;
    // Stop after 1, 2, 3, ... inputs until the input is exhausted.
    for stop in 1.. {
        runs += 1;
        processed += run(dir.path(), &brokers, Some(stop)).await;
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        if store.offset(INPUT, 0).unwrap() == Some(INPUTS) {
            break;
        }
    }
    // A final clean run publishes what the last stop left in the outbox.
    run(dir.path(), &brokers, None).await;
    assert!(runs > 5, "the processor was stopped {runs} times");
    assert_eq!(processed, INPUTS, "each input committed once");

    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let sum = i64::from_be_bytes(store.state(b"sum").unwrap().unwrap().try_into().unwrap());
    assert_eq!(sum, (0..INPUTS).map(|n| n * 10).sum::<i64>());
    assert!(store.outbox().unwrap().is_empty());

    let reader = Consumer::new(&KafkaConfig::default(), &brokers, "checker").unwrap();
    reader.assign(&[(OUTPUT, 0, None)]).unwrap();
    let mut seen = BTreeMap::new();
    for _ in 0..INPUTS {
        let record = tokio::time::timeout(WAIT, reader.recv())
            .await
            .unwrap()
            .unwrap();
        *seen
            .entry(String::from_utf8(record.payload).unwrap())
            .or_insert(0) += 1;
    }
    assert_eq!(
        seen.len() as i64,
        INPUTS,
        "every output published: {seen:?}"
    );
    assert!(seen.values().all(|c| *c == 1), "no duplicates: {seen:?}");
    // And nothing beyond the INPUTS outputs.
    let extra = tokio::time::timeout(Duration::from_millis(500), reader.recv()).await;
    assert!(extra.is_err(), "unexpected extra output: {extra:?}");
}
