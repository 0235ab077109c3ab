//! A toy service with no protocol code of its own (a running sum per key)
//! is killed with SIGKILL again and again while it works through its
//! input. Afterwards its state has counted every input exactly once, every
//! input has its output, and an output published twice (a kill between
//! publishing and clearing the outbox) is byte-identical to the first: the
//! runtime alone makes the service effectively-once (docs/design.md §4).
//!
//! One program plays both parts: with `TOY_STATE_DIR` set it is the
//! service, otherwise the test that starts and kills it.

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use unicron_bus::{Consumer, EmbeddedBroker, Producer};
use unicron_codec::{DecodeError, InboundRecord, KafkaConfig, Subscription};
use unicron_runtime::{
    Applied, Durability, Never, Processor, RuntimeOptions, StartFrom, Step, Store,
};
use unicron_store::StoreOptions;

const INPUT: &str = "toy.in";
const OUTPUT: &str = "toy.out";
const PARTITIONS: i32 = 3;
const INPUTS: i64 = 600;
const KEYS: [&str; 4] = ["a", "b", "c", "d"];
/// The one record that cannot be decoded.
const BAD: &str = "not a number";

/// Adds each input to its key's sum and publishes the new sum.
struct RunningSum;

impl Processor for RunningSum {
    type Input = i64;
    type Action = Never;
    type Error = unicron_runtime::RuntimeError;

    fn decode(&self, record: &InboundRecord) -> Result<i64, DecodeError> {
        std::str::from_utf8(&record.payload)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| DecodeError::Invalid {
                record: "toy input",
                reason: "not a number".into(),
            })
    }

    fn apply(&mut self, n: i64, step: &mut Step<'_>) -> Result<Applied<Never>, Self::Error> {
        let key = step.record().key.clone().unwrap_or_default();
        let state_key = [b"sum/".as_slice(), &key].concat();
        let sum = step
            .state(&state_key)?
            .map_or(0, |b| i64::from_be_bytes(b.try_into().expect("8 bytes")))
            + n;
        step.put_state(state_key, sum.to_be_bytes());
        let record = step.record();
        let output = format!("{}/{}={sum}", record.partition, record.offset);
        step.publish_bytes(OUTPUT, None, key, output.into_bytes());
        Ok(Applied::Done)
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    match std::env::var("TOY_STATE_DIR") {
        Ok(dir) => runtime.block_on(service(dir, std::env::var("TOY_BROKERS").unwrap())),
        Err(_) => {
            runtime.block_on(sigkilled_service_is_effectively_once());
            println!("test sigkilled_service_is_effectively_once ... ok");
        }
    }
}

async fn service(state_dir: String, brokers: String) {
    let store = Store::open(state_dir, StoreOptions::default()).unwrap();
    let options = RuntimeOptions::new(
        "toy",
        "toy",
        vec![Subscription::External {
            name: INPUT.into(),
            optional: false,
        }],
        Durability::Store {
            store: Arc::new(store),
            start: StartFrom::StoredOffsets,
        },
    );
    let kafka = KafkaConfig::default();
    unicron_runtime::run(
        &kafka,
        &brokers,
        &options,
        &mut RunningSum,
        std::future::pending(),
    )
    .await
    .unwrap();
}

fn start(state_dir: &std::path::Path, brokers: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .env("TOY_STATE_DIR", state_dir)
        .env("TOY_BROKERS", brokers)
        .spawn()
        .unwrap()
}

async fn sigkilled_service_is_effectively_once() {
    let broker = EmbeddedBroker::start(1).unwrap();
    for topic in [INPUT, OUTPUT, "unicron.dlq"] {
        broker.create_topic(topic, PARTITIONS).unwrap();
    }
    let brokers = broker.bootstrap_servers().to_string();
    let kafka = KafkaConfig::default();
    let producer = Producer::new(&kafka, &brokers).unwrap();
    // What each input record is, by (partition, offset), in order.
    let mut inputs: BTreeMap<(i32, i64), (String, Option<i64>)> = BTreeMap::new();
    for i in 0..INPUTS {
        let key = KEYS[(i % KEYS.len() as i64) as usize];
        let payload = if i == INPUTS / 2 {
            BAD.to_string()
        } else {
            (i * 7 % 100).to_string()
        };
        let at = producer
            .send_bytes(INPUT, key.as_bytes(), payload.as_bytes())
            .await
            .unwrap();
        inputs.insert(
            (at.partition, at.offset),
            (key.into(), payload.parse().ok()),
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let reader = Consumer::new(&kafka, &brokers, "checker").unwrap();
    reader
        .assign(
            &(0..PARTITIONS)
                .map(|p| (OUTPUT, p, None))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let mut outputs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let wanted = inputs.values().filter(|(_, n)| n.is_some()).count();
    let mut kills = 0;
    let deadline = Instant::now() + Duration::from_secs(240);
    while distinct(&outputs) < wanted {
        assert!(Instant::now() < deadline, "the service did not finish");
        let mut child = start(dir.path(), &brokers);
        // Killed at varying points of its work: start-up, catch-up, steady state.
        let life = Duration::from_millis(700 + 397 * (kills % 7));
        let until = Instant::now() + life;
        while Instant::now() < until {
            collect(&reader, &mut outputs, Duration::from_millis(50)).await;
        }
        if kills < 12 {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        } else {
            // Enough kills: let it finish, then stop it the same way.
            while distinct(&outputs) < wanted && Instant::now() < deadline {
                collect(&reader, &mut outputs, Duration::from_millis(200)).await;
            }
            child.kill().unwrap();
        }
        child.wait().unwrap();
    }
    collect(&reader, &mut outputs, Duration::from_secs(1)).await;
    assert!(kills >= 12, "killed {kills} times");

    // Every input has exactly one distinct output, and it is the key's
    // running sum through that input: no input counted twice or skipped.
    let mut sums: BTreeMap<&str, i64> = BTreeMap::new();
    let mut by_key: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
    for (&(partition, offset), (key, _)) in &inputs {
        by_key.entry(key).or_default().push((partition, offset));
    }
    for (key, positions) in by_key {
        for (partition, offset) in positions {
            let Some(n) = inputs[&(partition, offset)].1 else {
                continue;
            };
            let sum = sums.entry(key).or_default();
            *sum += n;
            let id = format!("{partition}/{offset}");
            let seen = outputs
                .get(&id)
                .unwrap_or_else(|| panic!("no output for {id}"));
            let expected = format!("{id}={sum}");
            assert!(
                seen.iter().all(|s| *s == expected),
                "{id}: outputs {seen:?}, expected {expected}"
            );
        }
    }
    assert_eq!(distinct(&outputs), wanted, "outputs only for inputs");
    let republished: usize = outputs.values().map(|v| v.len() - 1).sum();
    println!("{kills} kills, {wanted} outputs, {republished} published again after a kill");

    // The undecodable record reached the dead-letter topic.
    let dlq = Consumer::new(&kafka, &brokers, "dlq-checker").unwrap();
    dlq.assign(
        &(0..PARTITIONS)
            .map(|p| ("unicron.dlq", p, None))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let letter = tokio::time::timeout(Duration::from_secs(10), dlq.recv())
        .await
        .expect("a dead letter")
        .unwrap();
    assert!(String::from_utf8_lossy(&letter.payload).contains("not a number"));
}

/// Distinct outputs by input id.
fn distinct(outputs: &BTreeMap<String, Vec<String>>) -> usize {
    outputs.len()
}

/// Reads outputs for up to `wait`.
async fn collect(reader: &Consumer, outputs: &mut BTreeMap<String, Vec<String>>, wait: Duration) {
    let until = Instant::now() + wait;
    while let Ok(Ok(record)) = tokio::time::timeout(
        until.saturating_duration_since(Instant::now()),
        reader.recv(),
    )
    .await
    {
        let text = String::from_utf8(record.payload).unwrap();
        let id = text.split('=').next().unwrap().to_string();
        outputs.entry(id).or_default().push(text);
    }
}
