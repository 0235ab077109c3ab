//! Effectively-once across crashes: a processor that commits state, offsets
//! and outbox in one batch, then publishes and acknowledges the outbox, is
//! crashed at every point between commit and drain. After a restart, the
//! state counts every input exactly once and every output is published.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use unicron_store::{Commit, OutboxEntry, Store, StoreOptions};

const TOPIC: &str = "in";
const INPUTS: i64 = 40;

/// The input log: offset i carries the number i + 1.
fn input(offset: i64) -> i64 {
    offset + 1
}

/// Where the processor may stop dead.
#[derive(Clone, Copy, Debug)]
enum CrashPoint {
    /// After committing input `n`, before publishing its outbox.
    AfterCommit(i64),
    /// After publishing input `n`'s output, before marking it delivered.
    AfterPublish(i64),
}

/// Publishes every pending outbox entry to `published` (the "Kafka" of the
/// test, a list on disk that survives the crash), then marks it delivered.
fn drain(store: &Store, published: &Path, crash: Option<CrashPoint>, current: i64) {
    for (key, entry) in store.outbox().unwrap() {
        let mut log = std::fs::read_to_string(published).unwrap_or_default();
        log.push_str(std::str::from_utf8(&entry.payload).unwrap());
        log.push('\n');
        std::fs::write(published, log).unwrap();
        if let Some(CrashPoint::AfterPublish(n)) = crash
            && n == current
        {
            std::process::abort();
        }
        store.outbox_delivered(key).unwrap();
    }
}

/// Runs the processor from the stored offset to the end of the input.
fn run(dir: &Path, crash: Option<CrashPoint>) {
    let store = Store::open(dir.join("db"), StoreOptions::default()).unwrap();
    let published = dir.join("published.txt");
    // Restart: first re-publish what a crash left in the outbox.
    drain(&store, &published, None, -1);
    let start = store.offset(TOPIC, 0).unwrap().unwrap_or(0);
    for offset in start..INPUTS {
        let sum = store
            .state(b"sum")
            .unwrap()
            .map(|b| i64::from_be_bytes(b.try_into().unwrap()))
            .unwrap_or(0);
        let mut commit = Commit::new();
        commit
            .put_state("sum", (sum + input(offset)).to_be_bytes())
            .consumed(TOPIC, 0, offset + 1)
            .publish(OutboxEntry {
                topic: "out".into(),
                // Deterministic id from the input offset, as commands have.
                key: format!("out-{offset}").into_bytes(),
                payload: format!("out-{offset}").into_bytes(),
                partition: None,
            });
        store.commit(commit).unwrap();
        if let Some(CrashPoint::AfterCommit(n)) = crash
            && n == offset
        {
            std::process::abort();
        }
        drain(&store, &published, crash, offset);
    }
}

/// Runs `run` in a child process (this test binary, re-entered), so the
/// crash is a real abort with no destructors and no flush.
fn run_in_child(dir: &Path, crash: CrashPoint) {
    let (kind, n) = match crash {
        CrashPoint::AfterCommit(n) => ("commit", n),
        CrashPoint::AfterPublish(n) => ("publish", n),
    };
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["child_processor", "--exact", "--ignored", "--nocapture"])
        .env("STORE_CRASH_DIR", dir)
        .env("STORE_CRASH_AT", format!("{kind}:{n}"))
        .status()
        .unwrap();
    assert!(
        !status.success(),
        "the child must have crashed at {crash:?}"
    );
}

/// Entry point of the child process, run only by `run_in_child`.
#[test]
#[ignore = "entry point of the crash tests' child process"]
fn child_processor() {
    let (Ok(dir), Ok(at)) = (
        std::env::var("STORE_CRASH_DIR"),
        std::env::var("STORE_CRASH_AT"),
    ) else {
        return;
    };
    let (kind, n) = at.split_once(':').unwrap();
    let n: i64 = n.parse().unwrap();
    let crash = match kind {
        "commit" => CrashPoint::AfterCommit(n),
        _ => CrashPoint::AfterPublish(n),
    };
    run(Path::new(&dir), Some(crash));
}

fn outcome(dir: &Path) -> (i64, BTreeMap<String, usize>) {
    let store = Store::open(dir.join("db"), StoreOptions::default()).unwrap();
    let sum = i64::from_be_bytes(store.state(b"sum").unwrap().unwrap().try_into().unwrap());
    assert!(store.outbox().unwrap().is_empty(), "outbox fully drained");
    let mut counts = BTreeMap::new();
    for line in std::fs::read_to_string(dir.join("published.txt"))
        .unwrap()
        .lines()
    {
        *counts.entry(line.to_string()).or_insert(0) += 1;
    }
    (sum, counts)
}

#[test]
fn crash_between_commit_and_drain_loses_and_duplicates_nothing() {
    let expected_sum: i64 = (0..INPUTS).map(input).sum();
    for n in [0, 1, 17, INPUTS - 1] {
        let dir = tempfile::tempdir().unwrap();
        run_in_child(dir.path(), CrashPoint::AfterCommit(n));
        run(dir.path(), None);
        let (sum, counts) = outcome(dir.path());
        assert_eq!(
            sum, expected_sum,
            "input applied once each (crash after commit {n})"
        );
        assert_eq!(counts.len() as i64, INPUTS, "every output published");
        assert!(counts.values().all(|c| *c == 1), "no duplicate: {counts:?}");
    }
}

#[test]
fn crash_between_publish_and_ack_republishes_the_same_id_only() {
    let expected_sum: i64 = (0..INPUTS).map(input).sum();
    let n = 9;
    let dir = tempfile::tempdir().unwrap();
    run_in_child(dir.path(), CrashPoint::AfterPublish(n));
    run(dir.path(), None);
    let (sum, counts) = outcome(dir.path());
    assert_eq!(sum, expected_sum);
    assert_eq!(counts.len() as i64, INPUTS);
    // Published but not acknowledged: sent again with the same deterministic
    // id, which consumers drop (the executor's dedupe table).
    let again: Vec<_> = counts.iter().filter(|(_, c)| **c > 1).collect();
    assert_eq!(again, vec![(&format!("out-{n}"), &2)]);
}

#[test]
fn drop_without_drain_keeps_the_outbox_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let mut commit = Commit::new();
        commit
            .put_state("k", "v1")
            .consumed("a", 2, 10)
            .consumed("b", 0, 3)
            .remember("cmd-1", "succeeded")
            .publish(OutboxEntry {
                topic: "t".into(),
                key: b"k".to_vec(),
                payload: b"p1".to_vec(),
                partition: None,
            })
            .publish(OutboxEntry {
                topic: "t".into(),
                key: b"k".to_vec(),
                payload: b"p2".to_vec(),
                partition: None,
            });
        let keys = store.commit(commit).unwrap();
        assert_eq!(keys.len(), 2);
    }
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(store.state(b"k").unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(store.offset("a", 2).unwrap(), Some(10));
    assert_eq!(store.offset("a", 1).unwrap(), None);
    assert_eq!(
        store.offsets().unwrap(),
        vec![("a".to_string(), 2, 10), ("b".to_string(), 0, 3)]
    );
    assert_eq!(
        store.remembered(b"cmd-1").unwrap().as_deref(),
        Some(&b"succeeded"[..])
    );
    let pending: Vec<_> = store.outbox().unwrap();
    assert_eq!(pending.len(), 2);
    assert_eq!(pending[0].1.payload, b"p1");
    assert_eq!(pending[1].1.payload, b"p2");
    // New entries go after the surviving ones.
    store.outbox_delivered(pending[0].0).unwrap();
    let mut commit = Commit::new();
    commit.publish(OutboxEntry {
        topic: "t".into(),
        key: vec![],
        payload: b"p3".to_vec(),
        partition: None,
    });
    let keys = store.commit(commit).unwrap();
    assert!(keys[0] > pending[1].0);
    let payloads: Vec<_> = store
        .outbox()
        .unwrap()
        .into_iter()
        .map(|(_, e)| e.payload)
        .collect();
    assert_eq!(payloads, vec![b"p2".to_vec(), b"p3".to_vec()]);
}

#[test]
fn state_prefix_scan_is_bounded_to_the_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let mut commit = Commit::new();
    commit
        .put_state("c1/job/a", "1")
        .put_state("c1/job/b", "2")
        .put_state("c2/job/a", "3")
        .put_state("c0/x", "0");
    store.commit(commit).unwrap();
    let keys: Vec<_> = store
        .state_with_prefix(b"c1/")
        .unwrap()
        .into_iter()
        .map(|(k, _)| String::from_utf8(k).unwrap())
        .collect();
    assert_eq!(keys, ["c1/job/a", "c1/job/b"]);
    let mut commit = Commit::new();
    commit.delete_state("c1/job/a");
    store.commit(commit).unwrap();
    assert_eq!(store.state(b"c1/job/a").unwrap(), None);
}

#[test]
fn steps_appended_to_one_commit_read_and_write_as_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let mut batch = Commit::new();
    let mut first = Commit::new();
    first
        .put_state("k", "1")
        .put_state("gone", "x")
        .remember("id", "a")
        .consumed(TOPIC, 0, 1);
    batch.append(first);
    assert_eq!(batch.staged_state(b"k"), Some(Some(b"1".as_slice())));
    assert_eq!(batch.staged_state(b"other"), None);
    let mut second = Commit::new();
    second
        .put_state("k", "2")
        .delete_state("gone")
        .remember("id", "b")
        .consumed(TOPIC, 0, 2)
        .publish(OutboxEntry {
            topic: "out".into(),
            key: b"k".to_vec(),
            payload: b"2".to_vec(),
            partition: None,
        });
    batch.append(second);
    // The later step's writes win, as they will in the store.
    assert_eq!(batch.staged_state(b"k"), Some(Some(b"2".as_slice())));
    assert_eq!(batch.staged_state(b"gone"), Some(None));
    assert_eq!(batch.staged_remembered(b"id"), Some(b"b".as_slice()));
    store.commit(batch).unwrap();
    assert_eq!(store.state(b"k").unwrap(), Some(b"2".to_vec()));
    assert_eq!(store.state(b"gone").unwrap(), None);
    assert_eq!(store.remembered(b"id").unwrap(), Some(b"b".to_vec()));
    assert_eq!(store.offset(TOPIC, 0).unwrap(), Some(2));
    let outbox = store.outbox().unwrap();
    assert_eq!(outbox.len(), 1);
    store
        .outbox_delivered_all(&outbox.iter().map(|(key, _)| *key).collect::<Vec<_>>())
        .unwrap();
    assert!(store.outbox().unwrap().is_empty());
}
