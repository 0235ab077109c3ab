//! The planner service on the embedded broker: failures in, decisions and
//! commands out; restarts and rebuilds publish nothing twice.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::oneshot;
use unicron_bus::testing::GroupProgress;
use unicron_bus::{Consumer, EmbeddedBroker, Producer};
use unicron_codec::{AvroCodec, KafkaConfig};
use unicron_core::signing::CommandSigner;
use unicron_core::testing;
use unicron_core::*;
use unicron_planner::PlannerSettings;

const WAIT: Duration = Duration::from_secs(30);

struct Harness {
    broker: EmbeddedBroker,
    kafka: KafkaConfig,
    producer: Producer,
    time_ms: i64,
}

impl Harness {
    fn new() -> Harness {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let (broker, kafka) = unicron_bus::testing::embedded_with_topics();
        let producer = Producer::new(&kafka, broker.bootstrap_servers()).unwrap();
        Harness {
            broker,
            kafka,
            producer,
            time_ms: 1_764_000_000_000,
        }
    }

    fn brokers(&self) -> String {
        self.broker.bootstrap_servers().to_string()
    }

    async fn cluster_event(&mut self, event: ClusterEvent) {
        let topic = self.kafka.topic("cluster");
        let cluster = event.cluster.clone();
        self.producer
            .send(&topic, &cluster, &event, &AvroCodec::default())
            .await
            .unwrap();
    }

    async fn setup_cluster(&mut self, cluster: &str) {
        for n in 1..=4 {
            self.time_ms += 1000;
            let joined = testing::node_joined(cluster, &format!("n{n}"), 8, self.time_ms);
            self.cluster_event(joined).await;
        }
        self.time_ms += 1000;
        self.cluster_event(ClusterEvent {
            cluster: cluster.into(),
            time_ms: self.time_ms,
            kind: ClusterEventKind::JobSubmitted,
            node: None,
            gpus: None,
            job_id: Some("gpt".into()),
            job: Some(JobSpec {
                weight: 1.0,
                min_gpus: 8,
                max_gpus: 32,
                unit_gpus: 8,
                dp_degree: 4,
                checkpoint_interval_s: 1800,
                throughput: vec![
                    ThroughputPoint {
                        gpus: 8,
                        flops: 1e15,
                    },
                    ThroughputPoint {
                        gpus: 32,
                        flops: 3.8e15,
                    },
                ],
            }),
            address: None,
            launch: None,
            snapshot_address: None,
            snapshots: Vec::new(),
            restored: None,
            check: None,
            reason: None,
        })
        .await;
    }

    async fn failure(&mut self, cluster: &str, node: &str, kind: FailureKind) -> String {
        self.time_ms += 10_000;
        let id = format!("f-{cluster}-{}", self.time_ms);
        let failure = testing::failure(
            id.clone(),
            cluster,
            node,
            kind,
            self.time_ms - 100,
            self.time_ms,
        );
        let topic = self.kafka.topic("failures");
        self.producer
            .send(&topic, cluster, &failure, &AvroCodec::default())
            .await
            .unwrap();
        id
    }

    /// Starts a planner; drop or send on the returned channel to stop it.
    fn start(
        &self,
        state_dir: &std::path::Path,
    ) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        self.start_with(PlannerSettings {
            state_dir: state_dir.to_path_buf(),
            ..PlannerSettings::default()
        })
    }

    fn start_with(
        &self,
        settings: PlannerSettings,
    ) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let (stop, stopped) = oneshot::channel::<()>();
        let (kafka, brokers) = (self.kafka.clone(), self.brokers());
        let task = tokio::spawn(async move {
            let signer = CommandSigner::from_seed("test", [3; 32]);
            unicron_planner::run(&kafka, &brokers, &settings, signer, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        (stop, task)
    }

    fn reader(&self, topic: &str, group: &str) -> Consumer {
        let consumer = Consumer::new(&self.kafka, &self.brokers(), group).unwrap();
        consumer.subscribe(&[&self.kafka.topic(topic)]).unwrap();
        consumer
    }
}

/// Stops a planner and waits for it, before the broker goes.
async fn stop_planner(stop: oneshot::Sender<()>, task: tokio::task::JoinHandle<()>) {
    unicron_bus::testing::stop_service(stop, task, WAIT).await;
}

async fn read<T: unicron_codec::schemas::AvroRecord>(consumer: &Consumer, n: usize) -> Vec<T> {
    unicron_bus::testing::read_records(consumer, n, WAIT).await
}

/// Nothing came of the inputs but the `decisions` the test read: once the
/// planner committed every input record, the decisions topic holds
/// exactly that many, ever.
async fn nothing_more(h: &Harness, decisions: i64) {
    let progress = GroupProgress::new(&h.kafka, &h.brokers(), &PlannerSettings::default().group_id);
    let inputs = ["failures", "cluster", "command-results"].map(|t| h.kafka.topic(t));
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    progress.committed_all_of(&inputs, WAIT).await;
    let written = progress.written(&h.kafka.topic("decisions"));
    assert_eq!(written, decisions, "decisions in all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_become_decisions_and_signed_commands() {
    let mut h = Harness::new();
    let dir = tempfile::tempdir().unwrap();
    h.setup_cluster("c1").await;
    let (stop, task) = h.start(dir.path());
    let commands = h.reader("commands", "t-commands");
    let decisions = h.reader("decisions", "t-decisions");

    // Five setup events: five decisions; the job placement is one resume.
    let placed: Vec<Command> = read(&commands, 1).await;
    assert_eq!(placed[0].action, CommandAction::Resume);
    assert_eq!(placed[0].nodes.len(), 4);
    let failure_id = h.failure("c1", "n2", FailureKind::NcclTimeout).await;
    let cmds: Vec<Command> = read(&commands, 1).await;
    assert_eq!(cmds[0].action, CommandAction::Reattempt);
    assert!(cmds[0].causation.contains(&failure_id));
    let public = CommandSigner::from_seed("test", [3; 32]).verifying_key();
    signing::verify(&cmds[0], |id| (id == "test").then_some(public)).unwrap();

    let all: Vec<Decision> = read(&decisions, 6).await;
    assert_eq!(all[5].trigger.ref_id, failure_id);
    assert_eq!(all[5].command_ids, vec![cmds[0].id.clone()]);
    assert!(
        all[..4].iter().all(|d| d.command_ids.is_empty()),
        "node joins alone change nothing"
    );
    stop_planner(stop, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_input_is_dead_lettered_and_processing_goes_on() {
    let mut h = Harness::new();
    let dir = tempfile::tempdir().unwrap();
    h.producer
        .send_bytes(&h.kafka.topic("failures"), b"c1", b"\xff\xfe not avro")
        .await
        .unwrap();
    // Semantically impossible: a node event without a node.
    h.cluster_event(ClusterEvent::new("c1", 1, ClusterEventKind::NodeJoined))
        .await;
    h.setup_cluster("c1").await;
    let (stop, task) = h.start(dir.path());
    let dlq = h.reader("dlq", "t-dlq");
    let letters: Vec<DeadLetter> = read(&dlq, 2).await;
    let mut reasons: Vec<String> = letters.iter().map(|l| l.error.clone()).collect();
    reasons.sort();
    assert!(
        reasons[0].starts_with("NodeJoined without node"),
        "{reasons:?}"
    );
    assert!(reasons[1].starts_with("avro FailureEvent"), "{reasons:?}");
    let commands = h.reader("commands", "t-commands");
    let placed: Vec<Command> = read(&commands, 1).await;
    assert_eq!(placed[0].action, CommandAction::Resume);
    stop_planner(stop, task).await;
}

/// Stop the planner and start it again on the same store: every input is
/// decided exactly once. Then a second instance with an empty store
/// rebuilds the cluster from the inputs in Kafka and decides on top of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_decide_once_and_empty_stores_rebuild() {
    let mut h = Harness::new();
    let dir = tempfile::tempdir().unwrap();
    h.setup_cluster("c1").await;
    h.failure("c1", "n1", FailureKind::CudaError).await;

    let decisions = h.reader("decisions", "t-decisions");
    let (stop, task) = h.start(dir.path());
    let first: Vec<Decision> = read(&decisions, 6).await;
    stop.send(()).unwrap();
    task.await.unwrap();

    h.failure("c1", "n3", FailureKind::EccError).await;
    let (stop, task) = h.start(dir.path());
    let second: Vec<Decision> = read(&decisions, 1).await;
    assert!(
        second[0].reason.contains("isolate n3"),
        "{}",
        second[0].reason
    );
    nothing_more(&h, 7).await;
    stop.send(()).unwrap();
    task.await.unwrap();

    let mut ids = BTreeMap::new();
    for d in first.iter().chain(&second) {
        *ids.entry(d.id.clone()).or_insert(0) += 1;
    }
    assert_eq!(ids.len(), 7);
    assert!(ids.values().all(|c| *c == 1), "{ids:?}");

    // A new instance, no local state (a new volume, or partitions moved to
    // it): it catches up from the decision log, publishing nothing, and its
    // next decision is the one the previous owner's state leads to.
    let fresh = tempfile::tempdir().unwrap();
    let (stop, task) = h.start(fresh.path());
    let failure = h.failure("c1", "n4", FailureKind::NcclTimeout).await;
    let third: Vec<Decision> = read(&decisions, 1).await;
    assert_eq!(third[0].trigger.ref_id, failure);
    assert!(third[0].reason.contains("reattempt"), "{}", third[0].reason);
    nothing_more(&h, 8).await;
    stop_planner(stop, task).await;
    // The log replays exactly, decisions and commands, across both owners.
    let comparison = replay_log(&h);
    assert_eq!(comparison.compared, 8, "{comparison:?}");
    assert_eq!(comparison.diverged, 0, "{comparison:?}");
}

/// Replays every recorded decision of the log on a fresh planner.
fn replay_log(h: &Harness) -> unicron_core::replay::Comparison {
    use unicron_bus::whole_topic::read_topic;
    use unicron_core::planner::{Input, InputEvent, Planner, PlannerConfig};
    let brokers = h.brokers();
    let read_all = |name: &str| read_topic(&h.kafka, &brokers, &h.kafka.topic(name)).unwrap();
    let mut inputs = BTreeMap::new();
    let mut add = |record: unicron_codec::InboundRecord, event: InputEvent| {
        inputs.insert(
            (record.topic.clone(), record.partition, record.offset),
            Input {
                topic: record.topic,
                partition: record.partition,
                offset: record.offset,
                event,
            },
        );
    };
    for record in read_all("failures") {
        let event = AvroCodec::<FailureEvent>::default().decode(&record.payload);
        add(record, InputEvent::Failure(event.unwrap()));
    }
    for record in read_all("cluster") {
        let event = AvroCodec::<ClusterEvent>::default().decode(&record.payload);
        add(record, InputEvent::Cluster(event.unwrap()));
    }
    let decisions: Vec<Decision> = read_all("decisions")
        .iter()
        .map(|r| AvroCodec::<Decision>::default().decode(&r.payload).unwrap())
        .collect();
    let commands: Vec<Command> = read_all("commands")
        .iter()
        .map(|r| AvroCodec::<Command>::default().decode(&r.payload).unwrap())
        .collect();
    let steps = unicron_core::replay::steps(&decisions, &inputs, &commands, None);
    let mut planner = Planner::new(
        PlannerConfig::default(),
        CommandSigner::from_seed("replay", [9; 32]),
    );
    unicron_core::replay::replay_planner(&mut planner, &steps, |_| true).0
}

/// Retention has removed a cluster's first inputs (the embedded broker
/// drops a partition's oldest records past 5 MB): a planner taking over
/// with an empty store starts from the previous owner's checkpoint,
/// replays the one decision after it, and decides the next failure as the
/// previous owner's state leads to, publishing nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_after_retention_starts_from_the_checkpoint() {
    let mut h = Harness::new();
    let decisions = h.reader("decisions", "t-decisions");
    let settings = |dir: &std::path::Path| PlannerSettings {
        state_dir: dir.to_path_buf(),
        checkpoint_every_decisions: 2,
        ..PlannerSettings::default()
    };
    let first_owner = tempfile::tempdir().unwrap();
    let (stop, task) = h.start_with(settings(first_owner.path()));
    h.setup_cluster("c1").await;
    h.failure("c1", "n1", FailureKind::CudaError).await;
    let before: Vec<Decision> = read(&decisions, 6).await;

    // 7 MB of records nobody can decode on the cluster's partitions.
    let garbage = vec![0xffu8; 1_000_000];
    for topic in ["failures", "cluster"] {
        for _ in 0..7 {
            h.producer
                .send_bytes(&h.kafka.topic(topic), b"c1", &garbage)
                .await
                .unwrap();
        }
    }
    // One decision after the last checkpoint (taken every 2 decisions).
    h.failure("c1", "n3", FailureKind::EccError).await;
    let after: Vec<Decision> = read(&decisions, 1).await;
    assert!(
        after[0].reason.contains("isolate n3"),
        "{}",
        after[0].reason
    );
    stop_planner(stop, task).await;

    let partition = after[0].trigger.partition;
    let reader = unicron_bus::whole_topic::PartitionReader::new(&h.kafka, &h.brokers()).unwrap();
    for decision in &before {
        let t = &decision.trigger;
        let (low, _) = reader.watermarks(&t.topic, partition).unwrap();
        assert!(
            low > t.offset,
            "{} {}: an early input is still there (low watermark {low})",
            t.topic,
            t.offset
        );
    }
    let (low, high) = reader
        .watermarks(&h.kafka.topic("planner-checkpoints"), partition)
        .unwrap();
    assert!(high > low, "no checkpoint was written");

    let second_owner = tempfile::tempdir().unwrap();
    let (stop, task) = h.start_with(settings(second_owner.path()));
    let failure = h.failure("c1", "n4", FailureKind::NcclTimeout).await;
    let next: Vec<Decision> = read(&decisions, 1).await;
    assert_eq!(next[0].trigger.ref_id, failure);
    assert!(next[0].reason.contains("reattempt"), "{}", next[0].reason);
    // It knows n3 is isolated: only the previous owner's state says so.
    assert!(
        !next[0].alternatives[next[0].chosen_index.unwrap() as usize]
            .allocation
            .is_empty(),
        "{:?}",
        next[0]
    );
    nothing_more(&h, 8).await;
    stop_planner(stop, task).await;
}

/// A checkpoint whose chunk is not a cluster state (a bad producer, a bit
/// flip) is refused before it reaches the store: a planner with an empty
/// store falls back to the decisions log and decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_checkpoint_chunk_is_skipped_and_the_planner_decides() {
    let mut h = Harness::new();
    let decisions = h.reader("decisions", "t-decisions");
    let first_owner = tempfile::tempdir().unwrap();
    let (stop, task) = h.start(first_owner.path());
    h.setup_cluster("c1").await;
    let before: Vec<Decision> = read(&decisions, 5).await;
    stop_planner(stop, task).await;

    // A chunk that is not JSON and a manifest naming it, claiming every
    // input and decision so far is in the checkpoint.
    let partition = before[0].trigger.partition;
    let reader = unicron_bus::whole_topic::PartitionReader::new(&h.kafka, &h.brokers()).unwrap();
    let topic = h.kafka.topic("planner-checkpoints");
    let codec = AvroCodec::<PlannerCheckpoint>::default();
    let chunk = PlannerCheckpoint {
        input_partition: partition,
        cluster: "c1".into(),
        state: b"\x00\xffnot a cluster state".to_vec(),
        manifest: None,
    };
    let at = h
        .producer
        .send_bytes_to(
            &topic,
            Some(partition),
            b"c1",
            &codec.encode(&chunk).unwrap(),
        )
        .await
        .unwrap();
    let consumed = ["failures", "cluster", "command-results"]
        .iter()
        .map(|t| {
            let name = h.kafka.topic(t);
            let (_, high) = reader.watermarks(&name, partition).unwrap();
            ConsumedOffset {
                topic: name,
                next_offset: high,
            }
        })
        .collect();
    let (_, decisions_high) = reader
        .watermarks(&h.kafka.topic("decisions"), partition)
        .unwrap();
    let manifest = PlannerCheckpoint {
        input_partition: partition,
        cluster: String::new(),
        state: Vec::new(),
        manifest: Some(CheckpointManifest {
            consumed,
            decisions_next_offset: decisions_high,
            clusters: vec![CheckpointedCluster {
                cluster: "c1".into(),
                chunk_offsets: vec![at.offset],
            }],
        }),
    };
    h.producer
        .send_bytes_to(
            &topic,
            Some(partition),
            b"",
            &codec.encode(&manifest).unwrap(),
        )
        .await
        .unwrap();

    let second_owner = tempfile::tempdir().unwrap();
    let (stop, task) = h.start(second_owner.path());
    let failure = h.failure("c1", "n2", FailureKind::NcclTimeout).await;
    let next: Vec<Decision> = read(&decisions, 1).await;
    assert_eq!(next[0].trigger.ref_id, failure);
    // It knows the job: only the decisions log can have told it.
    assert!(next[0].reason.contains("reattempt"), "{}", next[0].reason);
    stop_planner(stop, task).await;
}
