//! Many clusters on one planner: N clusters of G GPUs (16 jobs each) join
//! through the cluster topic, then failures arrive at a multiple of the
//! paper setting's rate (one per 256 GPU-hours). Two modes:
//!
//! - the planner alone (default): failures are fed straight to the
//!   failures topic, as the detector would publish them, in event time
//!   `--speed` times faster than real time. Half are SEV3 (a reattempt: the
//!   cheap path), half SEV1 (an isolation and a re-plan of the whole
//!   cluster: the expensive one). Halfway through, the planner is stopped
//!   and started on its RocksDB state (`restart_s`); failure → command is
//!   also given for the failures produced before it (`*_before_restart`).
//! - the whole pipeline (`--pipeline`, [`pipeline`]): every node
//!   heartbeats at the agent's rate and failures arrive as the evidence the
//!   simulator emits for them (log lines, exits, silence), through the
//!   detector service and then the planner service.
//!
//! Both count records produced against records answered (any failure
//! never answered fails the run: the embedded broker drops data silently
//! past 5 MB a partition), and sample the process's RSS and the planner's
//! RocksDB size for their least-squares growth after a warm-up
//! ([`sampling`]). `--kafka` runs on a three-broker Apache Kafka cluster it
//! starts (`unicron_bus::testing::kafka`), `--brokers HOST:PORT` on any
//! other Kafka, instead of the embedded broker, on topics of a prefix new
//! to the run. `--kill-broker-after-minutes K` (pipeline, `--kafka`)
//! SIGKILLs the broker leading the failures topic's first partition K
//! minutes into the failures and restarts it 20 s later. Prints one JSON
//! object (and writes it with `--json FILE`).
//!
//! `tools/bench/clusters.sh [--pipeline] [--kafka | --brokers HOST:PORT]
//! [--clusters N] [--gpus-per-cluster G] [--minutes M] [--json FILE]` runs it.

mod pipeline;
mod planners;
mod sampling;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sampling::{Histogram, Sampler};
use unicron_bus::testing::kafka::{KafkaCluster, KafkaOptions};
use unicron_bus::{Consumer, Producer};
use unicron_codec::{AvroCodec, KafkaConfig};
use unicron_core::signing::CommandSigner;
use unicron_core::*;
use unicron_planner::PlannerSettings;

const START_MS: i64 = 1_764_000_000_000;
const JOBS: usize = 16;

pub struct Args {
    clusters: usize,
    gpus: usize,
    minutes: f64,
    rate: f64,
    speed: f64,
    json: Option<String>,
    pipeline: bool,
    /// Several planner processes (`planners`); 0: one planner in process.
    planners: usize,
    unicron: Option<std::path::PathBuf>,
    kill_after_minutes: f64,
    replay: bool,
    brokers: Option<String>,
    /// A standalone broker's process id, so its RSS is reported too.
    broker_pid: Option<u32>,
    /// `--brokers` is the embedded broker served by another process
    /// (`--serve-broker`): its topics exist already.
    mock_broker: bool,
    /// Only host the embedded broker with every topic, for another run.
    serve_broker: bool,
    /// What `--brokers` is, for the report.
    broker_label: Option<String>,
    /// Start a three-broker Apache Kafka cluster for the run.
    kafka: bool,
    /// Minutes into the failures at which the pipeline mode kills the
    /// leader broker of the failures topic's first partition (`--kafka`).
    kill_broker_after_minutes: Option<f64>,
    /// Detector instances in the pipeline's group from the start.
    detectors: usize,
    /// Minutes into the failures at which one more detector instance
    /// joins the group (a rebalance under load).
    add_detector_after_minutes: Option<f64>,
    /// The pipeline's first cluster sends this many times its normal rate
    /// (benign log lines on top of its heartbeats) for `flood_minutes`,
    /// starting `flood_after_minutes` into the failures.
    flood: Option<f64>,
    /// Each cluster's writers use its own topics, passed on by an
    /// in-process `unicron ingress` (`kafka.cluster_topics`).
    cluster_topics: bool,
    /// The ingress's `budget.records_per_s` (default: the shipped one).
    budget_records_per_s: Option<f64>,
    flood_after_minutes: f64,
    flood_minutes: f64,
    sample_s: f64,
    warmup_minutes: Option<f64>,
    /// Event seconds from an isolation's success to the node's repair.
    repair_s: f64,
}

fn args() -> Args {
    let mut a = Args {
        clusters: 100,
        gpus: 1024,
        minutes: 2.0,
        rate: 10.0,
        speed: 10.0,
        json: None,
        pipeline: false,
        brokers: None,
        broker_pid: None,
        mock_broker: false,
        serve_broker: false,
        broker_label: None,
        kafka: false,
        kill_broker_after_minutes: None,
        detectors: 1,
        add_detector_after_minutes: None,
        flood: None,
        cluster_topics: false,
        budget_records_per_s: None,
        flood_after_minutes: 1.0,
        flood_minutes: 1.0,
        sample_s: 5.0,
        warmup_minutes: None,
        repair_s: 30.0,
        planners: 0,
        unicron: None,
        kill_after_minutes: 1.0,
        replay: false,
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let value = argv.get(i + 1).cloned().unwrap_or_default();
        let number = |name: &str| -> f64 {
            value.parse().unwrap_or_else(|_| {
                eprintln!("{name}: `{value}` is not a number");
                std::process::exit(2)
            })
        };
        match argv[i].as_str() {
            "--clusters" => a.clusters = number("--clusters") as usize,
            "--gpus-per-cluster" => a.gpus = number("--gpus-per-cluster") as usize,
            "--minutes" => a.minutes = number("--minutes"),
            "--rate" => a.rate = number("--rate"),
            "--speed" => a.speed = number("--speed"),
            "--json" => a.json = Some(value),
            "--brokers" => a.brokers = Some(value),
            "--broker-label" => a.broker_label = Some(value),
            "--broker-pid" => a.broker_pid = Some(number("--broker-pid") as u32),
            "--sample-s" => a.sample_s = number("--sample-s"),
            "--flood" => a.flood = Some(number("--flood")),
            "--budget-records-per-s" => {
                a.budget_records_per_s = Some(number("--budget-records-per-s"))
            }
            "--flood-after-minutes" => a.flood_after_minutes = number("--flood-after-minutes"),
            "--flood-minutes" => a.flood_minutes = number("--flood-minutes"),
            "--warmup-minutes" => a.warmup_minutes = Some(number("--warmup-minutes")),
            "--repair-s" => a.repair_s = number("--repair-s"),
            "--planners" => a.planners = number("--planners") as usize,
            "--unicron" => a.unicron = Some(value.into()),
            "--kill-after-minutes" => a.kill_after_minutes = number("--kill-after-minutes"),
            "--detectors" => a.detectors = number("--detectors") as usize,
            "--add-detector-after-minutes" => {
                a.add_detector_after_minutes = Some(number("--add-detector-after-minutes"))
            }
            "--kill-broker-after-minutes" => {
                a.kill_broker_after_minutes = Some(number("--kill-broker-after-minutes"))
            }
            flag @ ("--pipeline" | "--replay" | "--mock-broker" | "--serve-broker" | "--kafka"
            | "--cluster-topics") => {
                match flag {
                    "--pipeline" => a.pipeline = true,
                    "--cluster-topics" => a.cluster_topics = true,
                    "--replay" => a.replay = true,
                    "--kafka" => a.kafka = true,
                    "--mock-broker" => a.mock_broker = true,
                    _ => a.serve_broker = true,
                }
                i += 1;
                continue;
            }
            // cargo bench passes --bench; nothing else is ours.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    if a.clusters == 0 || a.gpus < JOBS * 8 || a.sample_s <= 0.0 {
        eprintln!(
            "--clusters must be at least 1, --gpus-per-cluster at least {} and --sample-s positive",
            JOBS * 8
        );
        std::process::exit(2);
    }
    if (a.detectors != 1 || a.add_detector_after_minutes.is_some()) && !a.pipeline
        || a.detectors == 0
    {
        eprintln!("--detectors (at least 1) and --add-detector-after-minutes need --pipeline");
        std::process::exit(2);
    }
    if (a.cluster_topics || a.budget_records_per_s.is_some()) && (!a.pipeline || a.mock_broker) {
        eprintln!(
            "--cluster-topics and --budget-records-per-s need --pipeline and a broker of the run"
        );
        std::process::exit(2);
    }
    if a.flood.is_some_and(|x| !a.pipeline || x < 1.0) {
        eprintln!("--flood needs --pipeline and a multiple of 1 or more");
        std::process::exit(2);
    }
    if a.kill_broker_after_minutes.is_some() && !(a.kafka && a.pipeline) {
        eprintln!("--kill-broker-after-minutes needs --pipeline and --kafka");
        std::process::exit(2);
    }
    a
}

impl Args {
    /// Failures per real second: rate x one per 256 GPU-hours, x speed.
    fn failures_per_s(&self) -> f64 {
        self.rate * (self.clusters * self.gpus) as f64 / 256.0 / 3600.0 * self.speed
    }

    /// Samples before this are left out of the growth fit: RocksDB's
    /// memtables, caches and the allocator's arenas fill first.
    fn warmup_s(&self) -> f64 {
        60.0 * self
            .warmup_minutes
            .unwrap_or_else(|| (self.minutes / 4.0).min(5.0))
    }
}

/// The broker the run uses and a Kafka configuration for it.
pub struct Bus {
    pub brokers: String,
    pub kafka: KafkaConfig,
    /// Kept alive for the run.
    _embedded: Option<unicron_bus::EmbeddedBroker>,
    /// The Apache Kafka cluster of `--kafka`, stopped at the end.
    pub cluster: Option<std::sync::Arc<std::sync::Mutex<KafkaCluster>>>,
}

impl Bus {
    /// Stops the brokers this run started and removes their data (before
    /// `exit`, which skips destructors).
    pub fn shutdown(&self) {
        if let Some(cluster) = &self.cluster {
            cluster.lock().unwrap().close();
        }
    }

    /// Process ids of the brokers this run started, or `--broker-pid`.
    pub fn broker_pids(&self, a: &Args) -> Vec<u32> {
        match &self.cluster {
            Some(cluster) => {
                let cluster = cluster.lock().unwrap();
                cluster
                    .node_ids()
                    .into_iter()
                    .filter_map(|id| cluster.pid(id))
                    .collect()
            }
            None => a.broker_pid.into_iter().collect(),
        }
    }
}

/// The embedded broker's client configuration, without starting one. It
/// runs in another process here, so the consumers cannot tell it holds an
/// empty fetch for all of `fetch.wait.max.ms`: set it as `up` does.
fn embedded_config() -> KafkaConfig {
    let mut kafka = KafkaConfig::default();
    kafka.properties.insert(
        "session.timeout.ms".into(),
        unicron_codec::config::PropertyValue::Int(6000),
    );
    kafka.properties.insert(
        "fetch.wait.max.ms".into(),
        unicron_codec::config::PropertyValue::Int(5),
    );
    kafka
}

async fn bus(a: &Args) -> Bus {
    let mut cluster = None;
    let brokers = if a.kafka {
        let Some(libs) = unicron_bus::testing::kafka::kafka_libs() else {
            eprintln!("--kafka: no Apache Kafka jars (./dev setup test fetches them)");
            std::process::exit(2)
        };
        let started =
            KafkaCluster::start(&libs, None, &KafkaOptions::default()).unwrap_or_else(|e| {
                eprintln!("--kafka: {e}");
                std::process::exit(2)
            });
        let brokers = started.bootstrap_servers();
        eprintln!(
            "Apache Kafka {} on {brokers} (logs in {})",
            unicron_bus::testing::kafka::KAFKA_VERSION,
            started.dir().display()
        );
        cluster = Some(std::sync::Arc::new(std::sync::Mutex::new(started)));
        Some(brokers)
    } else {
        a.brokers.clone()
    };
    let Some(brokers) = &brokers else {
        let (broker, mut kafka) = unicron_bus::testing::embedded_with_topics();
        if a.cluster_topics {
            kafka.cluster_topics = true;
            broker
                .ensure_topics(&clusters_topology(a.clusters), &kafka.topic_prefix)
                .expect("the clusters' own topics");
        }
        return Bus {
            brokers: broker.bootstrap_servers().to_string(),
            kafka,
            _embedded: Some(broker),
            cluster: None,
        };
    };
    if a.mock_broker {
        // Served by `--serve-broker` with every topic, for this run alone;
        // its group rebalances wait for the session timeout, so short.
        return Bus {
            brokers: brokers.clone(),
            kafka: embedded_config(),
            _embedded: None,
            cluster: None,
        };
    }
    // Topics of a prefix no earlier run used: nothing left over is read.
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let kafka = KafkaConfig {
        topic_prefix: format!("bench{}.", since_epoch.as_secs()),
        cluster_topics: a.cluster_topics,
        ..KafkaConfig::default()
    };
    let mut topology = unicron_codec::Topology::builtin();
    if a.cluster_topics {
        topology.topics.extend(clusters_topology(a.clusters).topics);
    }
    unicron_bus::admin::ensure_topics(&kafka, brokers, &topology)
        .await
        .unwrap_or_else(|e| {
            eprintln!("--brokers {brokers}: cannot create the topics: {e}");
            std::process::exit(2)
        });
    Bus {
        brokers: brokers.clone(),
        kafka,
        _embedded: None,
        cluster,
    }
}

fn spec(max_gpus: i32, weight: f64) -> JobSpec {
    let points = (1..=max_gpus / 8)
        .map(|k| ThroughputPoint {
            gpus: k * 8,
            flops: f64::from(k * 8) * 1.4e14 * 0.97_f64.powf(f64::from(k).log2()),
        })
        .collect();
    JobSpec {
        weight,
        min_gpus: 8,
        max_gpus,
        unit_gpus: 8,
        dp_degree: max_gpus / 8,
        checkpoint_interval_s: 1800,
        throughput: points,
    }
}

/// Every cluster's own topics (`--cluster-topics`).
fn clusters_topology(clusters: usize) -> unicron_codec::Topology {
    let builtin = unicron_codec::Topology::builtin();
    unicron_codec::Topology {
        topics: (0..clusters)
            .flat_map(|c| builtin.of_cluster(&cluster_name(c)).topics)
            .collect(),
    }
}

pub fn cluster_name(c: usize) -> String {
    format!("c{c:04}")
}

pub fn node_name(n: usize) -> String {
    format!("n{n:04}")
}

/// Every cluster's nodes and its 16 jobs, on the cluster topic. A
/// cluster's records share a partition (keyed by cluster), so sending them
/// all at once keeps their order; awaiting each would take a broker round
/// trip a record (15 minutes for 1,000 clusters on a slow broker).
async fn join_clusters(bus: &Bus, producer: &Producer, clusters: usize, nodes: usize) {
    let codec = AvroCodec::default();
    let mut records = Vec::new();
    for cluster in (0..clusters).map(cluster_name) {
        let topics = unicron_codec::Topics::bound(&bus.kafka, &cluster);
        let topic = topics.name(unicron_codec::Topic::Cluster).to_string();
        let key = topics.key_str(unicron_codec::Topic::Cluster, &cluster);
        for n in 0..nodes {
            let mut e = ClusterEvent::new(&cluster, START_MS, ClusterEventKind::NodeJoined);
            e.node = Some(node_name(n));
            e.gpus = Some(8);
            records.push((topic.clone(), key.clone(), codec.encode(&e).unwrap()));
        }
        for j in 0..JOBS {
            let share = (nodes / JOBS + usize::from(j < nodes % JOBS)) as i32 * 8;
            let mut e = ClusterEvent::new(&cluster, START_MS, ClusterEventKind::JobSubmitted);
            e.job_id = Some(format!("job-{j}"));
            e.job = Some(spec(share, [1.0, 2.0, 1.5][j % 3]));
            records.push((topic.clone(), key.clone(), codec.encode(&e).unwrap()));
        }
    }
    for chunk in records.chunks(10_000) {
        let sends = chunk
            .iter()
            .map(|(topic, key, payload)| producer.send_bytes(topic, key.as_bytes(), payload));
        for sent in futures::future::join_all(sends).await {
            sent.unwrap();
        }
    }
}

fn planner_settings(bus: &Bus, state_dir: &std::path::Path, nodes: usize) -> PlannerSettings {
    let mut settings = PlannerSettings {
        state_dir: state_dir.to_path_buf(),
        group_id: format!("{}planner", bus.kafka.topic_prefix),
        ..PlannerSettings::default()
    };
    // Every SEV1 isolates: the blast radius would refuse most of a
    // failure rate this far above a real cluster's.
    settings.tuning.max_isolations_per_hour = Some(nodes as u32);
    settings
}

fn start_planner(bus: &Bus, settings: &PlannerSettings) -> tokio::task::JoinHandle<()> {
    let (k, b, s) = (bus.kafka.clone(), bus.brokers.clone(), settings.clone());
    tokio::spawn(async move {
        let signer = CommandSigner::from_seed("bench", [5; 32]);
        // Ends with an error when the broker stops at exit; not measured.
        let _ = unicron_planner::run(&k, &b, &s, signer, std::future::pending()).await;
    })
}

/// What the planner's and detector's own metrics say, at the end.
fn service_metrics(text: &str) -> serde_json::Value {
    let quantile = |name: &str, q: &str| {
        sampling::metric_sum(text, name, &[&format!("quantile=\"{q}\"")]) * 1e3
    };
    let mean = |name: &str| {
        let count = sampling::metric_sum(text, &format!("{name}_count"), &[]);
        if count == 0.0 {
            return 0.0;
        }
        sampling::metric_sum(text, &format!("{name}_sum"), &[]) / count * 1e3
    };
    serde_json::json!({
        "planner_decision_mean_ms": mean("unicron_planner_decision_seconds"),
        "planner_decision_p50_ms_last_window": quantile("unicron_planner_decision_seconds", "0.5"),
        "planner_decision_p99_ms_last_window": quantile("unicron_planner_decision_seconds", "0.99"),
        "detector_round_mean_ms": mean("unicron_detector_round_seconds"),
    })
}

/// The growth fields of the JSON from the samples.
fn growth(a: &Args, sampler: &Sampler) -> serde_json::Value {
    let warmup = a.warmup_s();
    let rss = sampling::slope_mb_per_h(&sampler.samples, warmup, 1000, |s| s.rss_mb);
    let state = sampling::slope_mb_per_h(&sampler.samples, warmup, 1000, |s| s.state_mb);
    let after_warmup = sampler.samples.iter().find(|s| s.t_s >= warmup);
    serde_json::json!({
        "warmup_s": warmup,
        "rss_slope_mb_per_h": rss.map(|(slope, _)| slope),
        "state_slope_mb_per_h": state.map(|(slope, _)| slope),
        "slope_points": rss.map_or(0, |(_, points)| points),
        "rss_mb_after_warmup": after_warmup.map(|s| s.rss_mb),
        "state_mb_after_warmup": after_warmup.map(|s| s.state_mb),
        "samples": sampler.samples.len(),
    })
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(into), serde_json::Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

/// The brokers' resident memory together, MB.
fn broker_rss_mb(pids: &[u32]) -> Option<f64> {
    let one = |pid: &u32| -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
    };
    let all: Vec<f64> = pids.iter().filter_map(one).collect();
    (!all.is_empty()).then(|| all.iter().sum())
}

/// Which broker the run used, for the report.
fn broker_label(a: &Args) -> &'static str {
    if a.kafka {
        return "kafka-3";
    }
    match (&a.brokers, a.mock_broker, a.broker_label.as_deref()) {
        (None, _, _) => "embedded",
        (Some(_), true, _) => "embedded, own process",
        (Some(_), false, _) => "standalone",
    }
}

/// Prints the result, writes it with `--json`, exits 1 on `missing`:
/// failures never answered plus records a stage read fewer of than the one
/// before it wrote (each such stage is printed before).
fn finish(a: &Args, result: serde_json::Value, missing: usize) {
    println!("{result}");
    if let Some(path) = &a.json {
        std::fs::write(path, format!("{result}\n")).unwrap();
    }
    if missing > 0 {
        eprintln!(
            "{missing} missing: failures never answered (`unanswered`) and records short at a stage (above)"
        );
        std::process::exit(1);
    }
}

/// A seeded generator, so every run meets the same failures.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.next(1 << 30) as f64 / f64::from(1u32 << 30)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    if a.serve_broker {
        // The embedded broker in a process of its own, so the measured
        // process's memory is the services' alone.
        let (broker, _) = unicron_bus::testing::embedded_with_topics();
        println!(
            "broker: {} pid {}",
            broker.bootstrap_servers(),
            std::process::id()
        );
        std::future::pending::<()>().await;
    }
    let metrics = unicron_bus::metrics::install().expect("the metrics recorder");
    let bus = bus(&a).await;
    let producer = Producer::new(&bus.kafka, &bus.brokers).unwrap();
    let nodes = a.gpus / 8;
    join_clusters(&bus, &producer, a.clusters, nodes).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = planner_settings(&bus, dir.path(), nodes);
    if a.planners > 0 {
        let (mut result, bad) = planners::run(&a, &bus, &producer).await;
        merge(
            &mut result,
            serde_json::json!({ "broker_rss_mb": broker_rss_mb(&bus.broker_pids(&a)) }),
        );
        bus.shutdown();
        finish(&a, result, bad);
        return;
    }
    if a.pipeline {
        let (mut result, missing) = pipeline::run(&a, &bus, &producer, &settings).await;
        merge(&mut result, service_metrics(&metrics.render()));
        merge(
            &mut result,
            serde_json::json!({ "broker_rss_mb": broker_rss_mb(&bus.broker_pids(&a)) }),
        );
        bus.shutdown();
        finish(&a, result, missing);
        return;
    }
    let (mut result, missing) = planner_alone(&a, &bus, &producer, &settings).await;
    merge(&mut result, service_metrics(&metrics.render()));
    bus.shutdown();
    finish(&a, result, missing);
}

/// Failure `i` of a run, as the detector would publish it: on a random
/// cluster and node, half SEV1 (an isolation and a re-plan), half SEV3
/// (a reattempt), its event time `--speed` times faster than real time.
pub fn random_failure(a: &Args, rng: &mut Lcg, clusters: &[String], i: usize) -> FailureEvent {
    let cluster = clusters[rng.next(clusters.len())].clone();
    let node = node_name(rng.next(a.gpus / 8));
    let sev1 = rng.next(2) == 0;
    let event_ms = START_MS + 60_000 + (i as f64 / a.failures_per_s() * 1000.0 * a.speed) as i64;
    FailureEvent {
        id: format!("f-{i}"),
        cluster,
        node: Some(node),
        gpu: None,
        job: None,
        rank: None,
        kind: if sev1 {
            FailureKind::EccError
        } else {
            FailureKind::NcclTimeout
        },
        severity: if sev1 { Severity::Sev1 } else { Severity::Sev3 },
        method: DetectionMethod::LogRule,
        rule: None,
        evidence: vec![],
        first_evidence_ms: event_ms,
        detected_ms: event_ms,
        slowdown: None,
    }
}

/// The planner alone: failures straight to the failures topic.
async fn planner_alone(
    a: &Args,
    bus: &Bus,
    producer: &Producer,
    settings: &PlannerSettings,
) -> (serde_json::Value, usize) {
    let names: Vec<String> = (0..a.clusters).map(cluster_name).collect();
    let planner = start_planner(bus, settings);
    let out = Consumer::new(
        &bus.kafka,
        &bus.brokers,
        &format!("{}bench", bus.kafka.topic_prefix),
    )
    .unwrap();
    let (commands_topic, decisions_topic) =
        (bus.kafka.topic("commands"), bus.kafka.topic("decisions"));
    out.subscribe(&[&commands_topic, &decisions_topic]).unwrap();
    let mut m = Measure::default();
    // Every job's first placement: the planner has read every cluster.
    let placements = a.clusters * JOBS;
    let placing = Instant::now();
    while m.placed < placements {
        let record = tokio::time::timeout(Duration::from_secs(600), out.recv())
            .await
            .expect("a placement within 10 minutes of the last")
            .unwrap();
        m.observe(&record, &commands_topic);
    }
    eprintln!(
        "{} clusters x {} GPUs placed in {:.1} s; feeding failures",
        a.clusters,
        a.gpus,
        placing.elapsed().as_secs_f64()
    );

    let per_s = a.failures_per_s();
    let total = (per_s * a.minutes * 60.0).round().max(1.0) as usize;
    let failures = bus.kafka.topic("failures");
    let fcodec = AvroCodec::<FailureEvent>::default();
    let mut rng = Lcg(42);
    let began = Instant::now();
    let mut sampler = Sampler::new(Duration::from_secs_f64(a.sample_s), &settings.state_dir);
    let mut planner = Some(planner);
    let mut rss_at_start = None;
    for i in 0..total {
        let due = began + Duration::from_secs_f64(i as f64 / per_s);
        loop {
            if sampler.due() {
                let s = sampler.take(m.decided_all);
                rss_at_start.get_or_insert(s.rss_mb);
            }
            let wait = due.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                break;
            }
            if let Ok(Ok(record)) = tokio::time::timeout(wait, out.recv()).await {
                m.observe(&record, &commands_topic);
            }
        }
        if i == total / 2
            && let Some(old) = planner.take()
        {
            // Stop the planner and start another on its RocksDB state: the
            // time until it decides the next failure is `restart_s`.
            old.abort();
            let _ = old.await;
            m.restarted = Some(Instant::now());
            start_planner(bus, settings);
        }
        let failure = random_failure(a, &mut rng, &names, i);
        m.sent(&failure.id);
        producer
            .send(&failures, &failure.cluster, &failure, &fcodec)
            .await
            .unwrap();
    }
    let drain_until = Instant::now() + Duration::from_secs(120);
    while m.undecided() > 0 && Instant::now() < drain_until {
        if let Ok(Ok(record)) = tokio::time::timeout(Duration::from_secs(5), out.recv()).await {
            m.observe(&record, &commands_topic);
        }
    }
    let elapsed = began.elapsed().as_secs_f64();
    sampler.take(m.decided_all);
    let mut result = serde_json::json!({
        "mode": "planner",
        "brokers": broker_label(a),
        "clusters": a.clusters,
        "gpus_per_cluster": a.gpus,
        "minutes": a.minutes,
        "failures": total,
        "inputs_per_s": total as f64 / elapsed,
        "decisions": m.decided,
        "commands_answering": m.latencies.len(),
        "decision_p50_ms": m.latencies.percentile_ms(0.5),
        "decision_p99_ms": m.latencies.percentile_ms(0.99),
        "decision_p50_ms_before_restart": m.before_restart.percentile_ms(0.5),
        "decision_p99_ms_before_restart": m.before_restart.percentile_ms(0.99),
        "planner_rss_mb": sampling::rss_mb(),
        "rss_mb_at_start_of_failures": rss_at_start.unwrap_or(0.0),
        "state_mb": sampling::dir_mb(&settings.state_dir),
        "max_lag_records": m.max_lag,
        "restart_s": m.restart_s,
    });
    merge(&mut result, growth(a, &sampler));
    (result, m.undecided())
}

/// What the planner-alone mode learns from the decisions and commands topics.
#[derive(Default)]
struct Measure {
    placed: usize,
    /// Failures produced and not yet decided, with when they were produced.
    waiting: BTreeMap<String, Instant>,
    /// Decided failures still waiting for their first command.
    commanded: BTreeMap<String, Instant>,
    decided: usize,
    /// Every decision, failures' or not: the unit of the growth fit.
    decided_all: usize,
    max_lag: usize,
    /// Failure produced → first command naming it, not counting failures
    /// produced while the planner was restarting.
    latencies: Histogram,
    /// The same for failures produced before the planner's restart: the
    /// steady state, without the takeover's wait.
    before_restart: Histogram,
    restarted: Option<Instant>,
    restart_s: Option<f64>,
    during_restart: std::collections::BTreeSet<String>,
}

impl Measure {
    fn sent(&mut self, id: &str) {
        if self.restarted.is_some() && self.restart_s.is_none() {
            self.during_restart.insert(id.to_string());
        }
        self.waiting.insert(id.to_string(), Instant::now());
        self.max_lag = self.max_lag.max(self.waiting.len());
    }

    fn undecided(&self) -> usize {
        self.waiting.len()
    }

    fn observe(&mut self, record: &unicron_codec::InboundRecord, commands_topic: &str) {
        if record.topic == commands_topic {
            let command = AvroCodec::<Command>::default()
                .decode(&record.payload)
                .unwrap();
            if command.action == CommandAction::Resume
                && command.causation.iter().all(|c| !c.starts_with('f'))
            {
                self.placed += 1;
            }
            for cause in &command.causation {
                if let Some(at) = self.commanded.remove(cause)
                    && !self.during_restart.remove(cause)
                {
                    self.latencies.record(at.elapsed());
                    if self.restarted.is_none_or(|r| at < r) {
                        self.before_restart.record(at.elapsed());
                    }
                }
            }
            return;
        }
        let decision = AvroCodec::<Decision>::default()
            .decode(&record.payload)
            .unwrap();
        self.decided_all += 1;
        if let Some(at) = self.waiting.remove(&decision.trigger.ref_id) {
            self.decided += 1;
            if let (Some(restarted), None) = (self.restarted, self.restart_s) {
                self.restart_s = Some(restarted.elapsed().as_secs_f64());
            }
            if !decision.command_ids.is_empty() {
                self.commanded.insert(decision.trigger.ref_id.clone(), at);
            }
        }
    }
}
