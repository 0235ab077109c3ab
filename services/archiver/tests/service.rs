//! The archiver service on the embedded broker: records of several topics
//! are archived once each, in files with contiguous offset ranges, an
//! undecodable record goes to the DLQ (and from there into the archive of
//! `unicron.dlq`), and a restart on the same directory archives what came
//! since without duplicating anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use unicron_archiver::ArchiverSettings;
use unicron_bus::Producer;
use unicron_codec::archive::{self, ArchiveFile};
use unicron_codec::samples as fixtures;
use unicron_codec::schemas::AvroRecord;
use unicron_codec::{AvroCodec, KafkaConfig};
use unicron_core::{DeadLetter, Decision, FailureEvent, LogRecord};

const WAIT: Duration = Duration::from_secs(30);
const LOGS: &str = "unicron.logs";
const FAILURES: &str = "unicron.failures";
const DECISIONS: &str = "unicron.decisions";
const DLQ: &str = "unicron.dlq";

/// An archiver task; stop it before the broker goes, or closing its
/// consumer waits for a broker that is not there.
struct Running {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(kafka: &KafkaConfig, brokers: &str, settings: &ArchiverSettings) -> Running {
        let (stop, stopped) = oneshot::channel::<()>();
        let (kafka, brokers, settings) = (kafka.clone(), brokers.to_string(), settings.clone());
        let task = tokio::spawn(async move {
            unicron_archiver::run(&kafka, &brokers, &settings, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Running { stop, task }
    }

    async fn stop(self) {
        unicron_bus::testing::stop_service(self.stop, self.task, WAIT).await;
    }
}

/// What the test produced.
#[derive(Default)]
struct Sent {
    /// Offsets of valid records, by (topic, partition).
    valid: BTreeMap<(String, i32), BTreeSet<i64>>,
    /// (topic, partition, offset) of undecodable records.
    bad: BTreeSet<(String, i32, i64)>,
}

impl Sent {
    async fn record<T: AvroRecord>(
        &mut self,
        producer: &Producer,
        topic: &str,
        key: &str,
        value: &T,
    ) {
        let at = producer
            .send(topic, key, value, &AvroCodec::default())
            .await
            .unwrap();
        self.valid
            .entry((topic.to_string(), at.partition))
            .or_default()
            .insert(at.offset);
    }

    async fn garbage(&mut self, producer: &Producer, topic: &str, key: &str) {
        let at = producer
            .send_bytes(topic, key.as_bytes(), &[0xff, 0xfe, 0x01])
            .await
            .unwrap();
        self.bad
            .insert((topic.to_string(), at.partition, at.offset));
    }

    /// A burst: `logs` log lines from one node (one partition), and a few
    /// failures and decisions of two clusters.
    async fn burst(&mut self, producer: &Producer, logs: usize, base: usize) {
        for i in base..base + logs {
            let mut log = fixtures::log(i % 2 == 0);
            log.line = format!("{i}: {}", log.line);
            self.record(producer, LOGS, "node-3", &log).await;
            if i % 50 == 7 {
                let mut other = fixtures::log(false);
                other.node = format!("node-{}", i % 5);
                self.record(producer, LOGS, &other.node.clone(), &other)
                    .await;
            }
        }
        for i in base..base + 6 {
            let mut failure = fixtures::failure(i % 2 == 0);
            failure.id = format!("f-{i}");
            self.record(producer, FAILURES, &format!("c{}", i % 2), &failure)
                .await;
        }
        for i in base..base + 3 {
            let mut decision = fixtures::decision(true);
            decision.id = format!("d-{i}");
            self.record(producer, DECISIONS, "c1", &decision).await;
        }
    }
}

fn offsets<T: AvroRecord>(file: &ArchiveFile) -> Vec<i64> {
    archive::read::<T>(&file.path, T::RECORD)
        .unwrap()
        .iter()
        .map(|a| {
            assert_eq!(
                (a.topic.as_str(), a.partition),
                (file.topic.as_str(), file.partition)
            );
            a.offset
        })
        .collect()
}

/// A closed file and the offsets in it.
type FileOffsets = (ArchiveFile, Vec<i64>);

/// Every closed file, and the offsets in each, read file by file (so a
/// record archived twice would count twice).
fn archived(dir: &Path) -> Vec<FileOffsets> {
    archive::list(dir)
        .unwrap()
        .into_iter()
        .map(|file| {
            let offsets = match file.topic.as_str() {
                LOGS => offsets::<LogRecord>(&file),
                FAILURES => offsets::<FailureEvent>(&file),
                DECISIONS => offsets::<Decision>(&file),
                DLQ => offsets::<DeadLetter>(&file),
                other => panic!("unexpected topic {other}"),
            };
            (file, offsets)
        })
        .collect()
}

/// Whether everything sent is archived, and the dead letters too; if not,
/// what is missing.
fn complete(dir: &Path, sent: &Sent) -> Result<(), String> {
    let mut got: BTreeMap<(String, i32), BTreeSet<i64>> = BTreeMap::new();
    let mut dead_letters = 0;
    for (file, offsets) in archived(dir) {
        if file.topic == DLQ {
            dead_letters += offsets.len();
        } else {
            got.entry((file.topic, file.partition))
                .or_default()
                .extend(offsets);
        }
    }
    let mut missing = Vec::new();
    for (partition, want) in &sent.valid {
        let have = got.get(partition).cloned().unwrap_or_default();
        let lacking: Vec<&i64> = want.difference(&have).collect();
        if !lacking.is_empty() {
            missing.push(format!("{}/{}: {lacking:?}", partition.0, partition.1));
        }
    }
    if dead_letters < sent.bad.len() {
        missing.push(format!("{DLQ}: {dead_letters} of {}", sent.bad.len()));
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join(", "))
    }
}

async fn wait_complete(dir: &Path, sent: &Sent) {
    let deadline = Instant::now() + WAIT;
    while let Err(missing) = complete(dir, sent) {
        assert!(Instant::now() < deadline, "not archived in time: {missing}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Every record once; per partition, the files' ranges and the
/// dead-lettered offsets tile the log from offset 0 with no gap and no
/// overlap; the dead letters say why.
fn check(dir: &Path, sent: &Sent) {
    let mut by_partition: BTreeMap<(String, i32), Vec<FileOffsets>> = BTreeMap::new();
    for (file, offsets) in archived(dir) {
        if file.topic != DLQ {
            by_partition
                .entry((file.topic.clone(), file.partition))
                .or_default()
                .push((file, offsets));
        }
    }
    assert_eq!(
        by_partition.keys().collect::<Vec<_>>(),
        sent.valid.keys().collect::<Vec<_>>()
    );
    for ((topic, partition), files) in &by_partition {
        let bad: BTreeSet<i64> = sent
            .bad
            .iter()
            .filter(|(t, p, _)| t == topic && p == partition)
            .map(|&(_, _, o)| o)
            .collect();
        let mut next = 0;
        let mut all: Vec<i64> = Vec::new();
        for (file, offsets) in files {
            while bad.contains(&next) {
                next += 1;
            }
            assert_eq!(
                file.first, next,
                "{topic}/{partition}: gap or overlap before {file:?}"
            );
            let expected: Vec<i64> = (file.first..=file.last)
                .filter(|o| !bad.contains(o))
                .collect();
            assert_eq!(offsets, &expected, "{file:?}");
            all.extend(offsets);
            next = file.last + 1;
        }
        let want: Vec<i64> = sent.valid[&(topic.clone(), *partition)]
            .iter()
            .copied()
            .collect();
        assert_eq!(all, want, "{topic}/{partition}: archived once each");
    }

    let letters = archive::read_topic::<DeadLetter>(dir, DLQ).unwrap();
    let letters: Vec<(String, i32, i64)> = letters
        .into_iter()
        .map(|a| {
            assert_eq!(a.record.service, "archiver");
            assert!(
                a.record.error.contains("avro LogRecord"),
                "{}",
                a.record.error
            );
            (a.record.source_topic, a.record.partition, a.record.offset)
        })
        .collect();
    assert_eq!(letters, sent.bad.iter().cloned().collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_is_archived_once_across_a_restart() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let (broker, kafka) = unicron_bus::testing::embedded_with_topics();
    let brokers = broker.bootstrap_servers().to_string();
    let producer = Producer::new(&kafka, &brokers).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = ArchiverSettings {
        dir: dir.path().to_path_buf(),
        max_file_bytes: 4096,
        max_file_age_s: 1.0,
        ..ArchiverSettings::default()
    };

    // A backlog, with an undecodable record in the middle of one partition.
    let mut sent = Sent::default();
    sent.burst(&producer, 150, 0).await;
    sent.garbage(&producer, LOGS, "node-3").await;
    sent.burst(&producer, 150, 150).await;
    let running = Running::start(&kafka, &brokers, &settings);
    wait_complete(dir.path(), &sent).await;
    running.stop().await;
    check(dir.path(), &sent);
    let (node3_partition, _) = sent.bad.iter().map(|(_, p, o)| (*p, *o)).next().unwrap();
    let node3_files = archive::list(dir.path())
        .unwrap()
        .iter()
        .filter(|f| f.topic == LOGS && f.partition == node3_partition)
        .count();
    assert!(node3_files >= 3, "{node3_files} files: no size roll");

    // More records while it is down, and an unfinished file as a crash
    // would leave it: the restart deletes it and archives only what is new.
    sent.burst(&producer, 100, 300).await;
    let leftover = dir.path().join(LOGS).join(format!(
        "{node3_partition:05}-00000000000000099999.avro.part"
    ));
    std::fs::write(&leftover, b"half a file").unwrap();
    let running = Running::start(&kafka, &brokers, &settings);
    wait_complete(dir.path(), &sent).await;
    // A stop closes every open file: anything archived twice is in them.
    running.stop().await;
    assert!(!leftover.exists());
    check(dir.path(), &sent);
    drop(broker);
}

/// A stop right after the last records were published, with both cores
/// busy: the archiver reads to the ends the partitions had at the stop, so
/// the archive ends with the last record of every topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_under_load_archives_the_tail_of_every_topic() {
    let (broker, kafka) = unicron_bus::testing::embedded_with_topics();
    let brokers = broker.bootstrap_servers().to_string();
    let producer = Producer::new(&kafka, &brokers).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = ArchiverSettings {
        dir: dir.path().to_path_buf(),
        max_file_age_s: 1.0,
        ..ArchiverSettings::default()
    };
    let busy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let busy = busy.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while busy.load(std::sync::atomic::Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                x
            })
        })
        .collect();
    let running = Running::start(&kafka, &brokers, &settings);
    let mut sent = Sent::default();
    // Running, with its partitions assigned.
    sent.burst(&producer, 10, 0).await;
    wait_complete(dir.path(), &sent).await;
    sent.burst(&producer, 400, 10).await;
    // Stopped as soon as the last record is acknowledged: nothing waits
    // for the archiver to have read it.
    running.stop().await;
    busy.store(false, std::sync::atomic::Ordering::Relaxed);
    for s in spinners {
        s.join().unwrap();
    }
    complete(dir.path(), &sent).unwrap_or_else(|missing| panic!("not archived: {missing}"));
    check(dir.path(), &sent);
    drop(broker);
}
