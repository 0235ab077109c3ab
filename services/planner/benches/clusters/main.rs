//! Many clusters on one planner: N clusters of G GPUs (16 jobs each) join
//! through the cluster topic, then failures arrive on the failures topic at
//! a multiple of the paper setting's rate (one per 256 GPU-hours), in event
//! time `--speed` times faster than real time, for `--minutes`. This is the
//! planner alone: failures are fed straight to it, as the detector would
//! publish them. Half are SEV3 (a reattempt: the cheap path), half SEV1 (an
//! isolation and a re-plan of the whole cluster: the expensive one).
//!
//! It measures failure produced → first command naming it consumed, counts
//! failures produced against failures answered (any gap fails the run: the
//! embedded broker drops data silently past 5 MB a partition), the process's
//! RSS (planner and embedded broker together), the planner's RocksDB size,
//! and how long a planner stopped and started on the same state takes to
//! decide again. Prints one JSON object (and writes it with `--json FILE`).
//!
//! `tools/bench/clusters.sh [--clusters N] [--gpus-per-cluster G]
//! [--minutes M] [--json FILE]` runs it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use unicron_bus::{AvroCodec, Consumer, Producer};
use unicron_core::signing::CommandSigner;
use unicron_core::*;
use unicron_planner::PlannerSettings;

const START_MS: i64 = 1_764_000_000_000;
const JOBS: usize = 16;

struct Args {
    clusters: usize,
    gpus: usize,
    minutes: f64,
    rate: f64,
    speed: f64,
    json: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        clusters: 100,
        gpus: 1024,
        minutes: 2.0,
        rate: 10.0,
        speed: 10.0,
        json: None,
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
            // cargo bench passes --bench; nothing else is ours.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    if a.clusters == 0 || a.gpus < JOBS * 8 {
        eprintln!(
            "--clusters must be at least 1 and --gpus-per-cluster at least {}",
            JOBS * 8
        );
        std::process::exit(2);
    }
    a
}

fn cluster_event(cluster: &str, kind: ClusterEventKind) -> ClusterEvent {
    ClusterEvent::new(cluster, START_MS, kind)
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

/// A seeded generator, so every run meets the same failures.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn dir_mb(path: &std::path::Path) -> f64 {
    let mut total = 0u64;
    if let Ok(entries) = std::fs::read_dir(path) {
        for e in entries.flatten() {
            let meta = e.metadata();
            match meta {
                Ok(m) if m.is_dir() => total += (dir_mb(&e.path()) * 1_048_576.0) as u64,
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total as f64 / 1_048_576.0
}

fn start_planner(
    kafka: &unicron_bus::KafkaConfig,
    brokers: &str,
    settings: &PlannerSettings,
) -> tokio::task::JoinHandle<()> {
    let (k, b, s) = (kafka.clone(), brokers.to_string(), settings.clone());
    tokio::spawn(async move {
        let signer = CommandSigner::from_seed("bench", [5; 32]);
        // Ends with an error when the broker stops at exit; not measured.
        let _ = unicron_planner::run(&k, &b, &s, signer, std::future::pending()).await;
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let (broker, kafka) = unicron_bus::testing::embedded_with_topics();
    let brokers = broker.bootstrap_servers().to_string();
    let producer = Producer::new(&kafka, &brokers).unwrap();
    let cluster_topic = kafka.topic("cluster");
    let nodes = a.gpus / 8;
    let names: Vec<String> = (0..a.clusters).map(|c| format!("c{c:04}")).collect();
    for cluster in &names {
        for n in 0..nodes {
            let mut e = cluster_event(cluster, ClusterEventKind::NodeJoined);
            e.node = Some(format!("n{n:04}"));
            e.gpus = Some(8);
            producer
                .send(&cluster_topic, cluster, &e, &AvroCodec::default())
                .await
                .unwrap();
        }
        for j in 0..JOBS {
            let share = (nodes / JOBS + usize::from(j < nodes % JOBS)) as i32 * 8;
            let mut e = cluster_event(cluster, ClusterEventKind::JobSubmitted);
            e.job_id = Some(format!("job-{j}"));
            e.job = Some(spec(share, [1.0, 2.0, 1.5][j % 3]));
            producer
                .send(&cluster_topic, cluster, &e, &AvroCodec::default())
                .await
                .unwrap();
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let mut settings = PlannerSettings {
        state_dir: dir.path().to_path_buf(),
        ..PlannerSettings::default()
    };
    // Every SEV1 isolates: the blast radius would refuse most of a
    // failure rate this far above a real cluster's.
    settings.tuning.max_isolations_per_hour = Some(nodes as u32);
    let planner = start_planner(&kafka, &brokers, &settings);
    let out = Consumer::new(&kafka, &brokers, "bench").unwrap();
    let (commands_topic, decisions_topic) = (kafka.topic("commands"), kafka.topic("decisions"));
    out.subscribe(&[&commands_topic, &decisions_topic]).unwrap();
    let mut m = Measure::default();
    // Every job's first placement: the planner has read every cluster.
    let placements = a.clusters * JOBS;
    let placing = Instant::now();
    while m.placed < placements {
        let record = tokio::time::timeout(Duration::from_secs(600), out.recv())
            .await
            .expect("job placements within 10 minutes")
            .unwrap();
        m.observe(&record, &commands_topic);
    }
    eprintln!(
        "{} clusters x {} GPUs placed in {:.1} s; feeding failures",
        a.clusters,
        a.gpus,
        placing.elapsed().as_secs_f64()
    );

    // Failures per real second: rate x one per 256 GPU-hours, x speed.
    let per_s = a.rate * (a.clusters * a.gpus) as f64 / 256.0 / 3600.0 * a.speed;
    let total = (per_s * a.minutes * 60.0).round().max(1.0) as usize;
    let failures = kafka.topic("failures");
    let fcodec = AvroCodec::<FailureEvent>::default();
    let mut rng = Lcg(42);
    let began = Instant::now();
    let mut planner = Some(planner);
    let mut rss = Vec::new();
    for i in 0..total {
        let due = began + Duration::from_secs_f64(i as f64 / per_s);
        loop {
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
            start_planner(&kafka, &brokers, &settings);
        }
        let cluster = &names[rng.next(names.len())];
        let node = format!("n{:04}", rng.next(nodes));
        let sev1 = rng.next(2) == 0;
        let event_ms = START_MS + 60_000 + (i as f64 / per_s * 1000.0 * a.speed) as i64;
        let failure = FailureEvent {
            id: format!("f-{i}"),
            cluster: cluster.clone(),
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
        };
        m.sent(&failure.id);
        producer
            .send(&failures, cluster, &failure, &fcodec)
            .await
            .unwrap();
        if i % 50 == 0 {
            rss.push(rss_mb());
        }
    }
    let drain_until = Instant::now() + Duration::from_secs(120);
    while m.undecided() > 0 && Instant::now() < drain_until {
        if let Ok(Ok(record)) = tokio::time::timeout(Duration::from_secs(5), out.recv()).await {
            m.observe(&record, &commands_topic);
        }
    }
    let elapsed = began.elapsed().as_secs_f64();
    let result = serde_json::json!({
        "clusters": a.clusters,
        "gpus_per_cluster": a.gpus,
        "failures": total,
        "inputs_per_s": total as f64 / elapsed,
        "decisions": m.decided,
        "commands_answering": m.latencies.len(),
        "decision_p50_ms": m.percentile(0.5),
        "decision_p99_ms": m.percentile(0.99),
        "planner_rss_mb": rss_mb(),
        "rss_mb_at_start_of_failures": rss.first().copied().unwrap_or(0.0),
        "state_mb": dir_mb(dir.path()),
        "max_lag_records": m.max_lag,
        "restart_s": m.restart_s,
    });
    println!("{result}");
    if let Some(path) = &a.json {
        std::fs::write(path, format!("{result}\n")).unwrap();
    }
    if m.undecided() > 0 {
        eprintln!("{} failures produced and never decided", m.undecided());
        std::process::exit(1);
    }
}

/// What the bench learns from the decisions and commands topics.
#[derive(Default)]
struct Measure {
    placed: usize,
    /// Failures produced and not yet decided, with when they were produced.
    waiting: BTreeMap<String, Instant>,
    /// Decided failures still waiting for their first command.
    commanded: BTreeMap<String, Instant>,
    decided: usize,
    max_lag: usize,
    /// Failure produced → first command naming it, not counting failures
    /// produced while the planner was restarting.
    latencies: Vec<Duration>,
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

    fn observe(&mut self, record: &unicron_bus::InboundRecord, commands_topic: &str) {
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
                    && !self.during_restart.contains(cause)
                {
                    self.latencies.push(at.elapsed());
                }
            }
            return;
        }
        let decision = AvroCodec::<Decision>::default()
            .decode(&record.payload)
            .unwrap();
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

    fn percentile(&self, p: f64) -> f64 {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        sorted
            .get(((sorted.len().max(1) - 1) as f64 * p).round() as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    }
}
