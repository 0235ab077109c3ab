//! The whole pipeline: the clusters' nodes heartbeat at the agent's rate
//! (`agent.heartbeat_interval_s`, 1 s; the detector calls a node lost 3 s
//! after its last one), and failures arrive as the evidence the simulator
//! emits for them (`unicron_simulator::faults::manifest`: log lines, a
//! process exit, a node going dark), through the detector service and then
//! the planner service, both in this process. The bench plays the clusters
//! around them: it answers every command as an executor would (succeeded),
//! repairs isolated nodes `--repair-s` later, and moves each node's job and
//! rank as the planner's decisions assign them.
//!
//! Event time runs at real time here (heartbeats are real-time signals), so
//! failures come at `--rate` x `--speed` times the paper rate in event
//! time: the same failures per real second as the planner-alone mode.
//! Failed nodes are picked in a seeded rotation that skips nodes still
//! failed, dark or isolated, and jobs where the detector would fold the
//! failure into an earlier one (docs/detector.md, correlation): a symptom
//! (NCCL timeout, network error, exit) within the dedupe window after a
//! root cause of the same job, or within the correlation window of another
//! symptom of it. Each injected failure then owes exactly one command.
//!
//! `--detectors N` runs N detector services in one consumer group (they
//! split the input partitions), `--add-detector-after-minutes K` starts one
//! more K minutes into the failures: the group rebalances under load, and
//! whatever the members lose or repeat shows in the counts below.
//!
//! Measured per failure: evidence produced → failure record consumed →
//! first command naming it consumed, and per stage the records produced
//! against those consumed. A failure that never got a command fails the
//! run, and so does a stage that consumed fewer records than were produced.
//! `unexpected_failures` are failures on nodes where nothing was injected
//! (false verdicts), `unexpected_why` the same by rule, method and the
//! node's history, with a few in `unexpected_samples`.
//! `detector_consume_per_s` is the detector's input records over the whole
//! run (the input rate when it keeps up), `detector_catch_up_per_s` its
//! read rate over the sampling intervals it lagged by more than 20,000
//! records throughout (its capacity beside everything else this machine
//! runs), `detector_at_end` its holds and lag gauges, `raw_consume_per_s` a
//! plain rdkafka consumer reading the same input topics from their start on
//! the same brokers at the end of the run: the transport's limit.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use unicron_bus::{Consumer, Producer};
use unicron_codec::{AvroCodec, InboundRecord};
use unicron_core::detector::correlate::is_symptom;
use unicron_core::*;
use unicron_detector::DetectorSettings;
use unicron_planner::PlannerSettings;
use unicron_simulator::faults;

use crate::sampling::{self, Histogram, Sampler};
use crate::{Args, Bus, JOBS, Lcg, START_MS, cluster_name, node_name, start_planner};

/// The agent's default heartbeat interval (`agent.heartbeat_interval_s`)
/// and the simulator's (`sim.heartbeat_interval_s`).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// How long `--kill-broker-after-minutes` keeps the killed broker down:
/// past Kafka's broker session (9 s), so its partitions get new leaders.
const BROKER_DOWN: Duration = Duration::from_secs(20);

/// Heartbeats go out in this many slots an interval, so the broker sees a
/// steady stream rather than one burst a second.
const SLOTS: usize = 10;
/// Heartbeats before the first failure: every node is known to the
/// detector and the clusters' clocks run.
const HEARTBEAT_WARMUP: Duration = Duration::from_secs(10);
/// A detector lag (records) above which it reads as fast as it can.
const CATCHING_UP: f64 = 20_000.0;
/// How long the run waits for the last failures' commands.
const DRAIN: Duration = Duration::from_secs(120);

#[derive(Default)]
struct Node {
    job: Option<usize>,
    rank: u32,
    /// Sends nothing, heartbeats included (a lost node), until repaired.
    dark: bool,
    /// Taken out by the planner, not yet repaired.
    isolated: bool,
    /// A failure injected here waits for its command.
    failing: bool,
}

struct Cluster {
    name: String,
    nodes: Vec<Node>,
    /// Each job's nodes in rank order, as the planner last assigned them.
    jobs: Vec<Vec<usize>>,
    /// Each job's latest injected root cause and symptom.
    last_root: Vec<Option<Instant>>,
    last_symptom: Vec<Option<Instant>>,
}

/// How long after a failure of a job the detector would fold another into
/// it, with a margin: (symptom after a root cause, any failure after a symptom).
struct Quiet {
    after_root: Duration,
    after_symptom: Duration,
}

impl Quiet {
    fn of(detector: &unicron_core::detector::DetectorConfig) -> Quiet {
        let margin = 5.0 + detector.allowed_lateness_s;
        Quiet {
            after_root: Duration::from_secs_f64(detector.dedupe_window_s + margin),
            after_symptom: Duration::from_secs_f64(detector.correlation_window_s + margin),
        }
    }
}

impl Cluster {
    fn assign(&mut self, job: usize, nodes: &[usize]) {
        for &n in &self.jobs[job] {
            if self.nodes[n].job == Some(job) {
                self.nodes[n].job = None;
            }
        }
        for (rank, &n) in nodes.iter().enumerate() {
            self.nodes[n].job = Some(job);
            self.nodes[n].rank = rank as u32;
        }
        self.jobs[job] = nodes.to_vec();
    }
}

/// One injected failure on its way to a command.
struct Injection {
    kind: FailureKind,
    produced: Instant,
    detected: Option<Instant>,
    failure_ids: Vec<String>,
}

/// Records the bench's own producers had acknowledged.
#[derive(Default)]
struct Sent {
    heartbeats: AtomicU64,
    /// Benign log lines of a flood (`--flood`).
    flood: AtomicU64,
    evidence: AtomicU64,
    results: AtomicU64,
    repairs: AtomicU64,
    errors: AtomicU64,
}

/// Everything the run learns; owned by its one loop.
struct Run {
    clusters: Vec<Cluster>,
    cluster_index: HashMap<String, usize>,
    pending: HashMap<(usize, usize), Injection>,
    by_failure: HashMap<String, (usize, usize)>,
    /// Failure ids named by a command read before the failure record
    /// itself (the topics are fetched independently), and when.
    commanded_early: HashMap<String, Instant>,
    /// Isolated nodes and when they are repaired, soonest first.
    repairs: VecDeque<(Instant, usize, usize)>,
    placed: std::collections::BTreeSet<(usize, usize)>,
    injected: usize,
    commanded: usize,
    failures_consumed: usize,
    /// Failure records no injected failure explains, by kind.
    unexpected: BTreeMap<String, usize>,
    /// The same by rule, method and what the node had been through
    /// (never injected, answered earlier, no node named), and a few whole.
    unexpected_why: BTreeMap<String, usize>,
    unexpected_samples: Vec<serde_json::Value>,
    /// Nodes ever injected, with the latest injection's time.
    injected_at: HashMap<(usize, usize), Instant>,
    /// Every failure read, by cluster: (when, kind, node, job, rule), to
    /// show what became of an injection never detected.
    read_by_cluster: HashMap<usize, Vec<(Instant, String)>>,
    /// The job each pending injection's evidence named.
    injected_job: HashMap<(usize, usize), Option<String>>,
    /// Injected kind → a different detected kind.
    misclassified: BTreeMap<String, usize>,
    /// Why a failure was decided without a command, by reason.
    no_command: BTreeMap<String, usize>,
    decisions: usize,
    commands: usize,
    /// Where every output record read sat: the bench's own group re-reads
    /// from its committed offsets when its coordinator dies with a broker,
    /// and a record read again is not a new failure or command.
    read_at: BTreeSet<(String, i32, i64)>,
    read_again: usize,
    commands_by_action: BTreeMap<String, usize>,
    evidence_to_failure: Histogram,
    failure_to_command: Histogram,
    evidence_to_command: Histogram,
    evidence_to_failure_by_kind: BTreeMap<String, Histogram>,
    /// (failure read, failure → command) of every answered failure, to
    /// split by the phases of a broker kill.
    /// Each answered failure: its cluster, when the failure was read,
    /// failure → command and evidence → command.
    answers: Vec<(usize, Instant, Duration, Duration)>,
}

fn index_of(name: &str, prefix: char) -> Option<usize> {
    name.strip_prefix(prefix)?.parse().ok()
}

fn job_index(name: &str) -> Option<usize> {
    name.strip_prefix("job-")?.parse().ok()
}

pub async fn run(
    a: &Args,
    bus: &Bus,
    producer: &Producer,
    settings: &PlannerSettings,
) -> (serde_json::Value, usize) {
    let metrics = unicron_bus::metrics::install().expect("the metrics recorder");
    let nodes = a.gpus / 8;
    let detector_settings = DetectorSettings {
        group_id: format!("{}detector", bus.kafka.topic_prefix),
        ..DetectorSettings::default()
    };
    for _ in 0..a.detectors {
        start_detector(bus, &detector_settings);
    }
    if a.cluster_topics {
        let mut settings = unicron_ingress::IngressSettings {
            group_id: format!("{}ingress", bus.kafka.topic_prefix),
            ..Default::default()
        };
        if let Some(rate) = a.budget_records_per_s {
            settings.budget.records_per_s = rate;
        }
        let (kafka, brokers) = (bus.kafka.clone(), bus.brokers.clone());
        tokio::spawn(async move {
            if let Err(e) =
                unicron_ingress::run(&kafka, &brokers, &settings, std::future::pending()).await
            {
                eprintln!("ingress: {e}");
            }
        });
    }
    start_planner(bus, settings);
    let out = Consumer::new(
        &bus.kafka,
        &bus.brokers,
        &format!("{}bench", bus.kafka.topic_prefix),
    )
    .unwrap();
    let topic = |name: &str| bus.kafka.topic(name);
    let (failures_topic, decisions_topic, commands_topic) =
        (topic("failures"), topic("decisions"), topic("commands"));
    out.subscribe(&[&failures_topic, &decisions_topic, &commands_topic])
        .unwrap();

    let mut run = Run {
        clusters: (0..a.clusters)
            .map(|c| Cluster {
                name: cluster_name(c),
                nodes: (0..nodes).map(|_| Node::default()).collect(),
                jobs: vec![Vec::new(); JOBS],
                last_root: vec![None; JOBS],
                last_symptom: vec![None; JOBS],
            })
            .collect(),
        cluster_index: (0..a.clusters).map(|c| (cluster_name(c), c)).collect(),
        pending: HashMap::new(),
        by_failure: HashMap::new(),
        commanded_early: HashMap::new(),
        repairs: VecDeque::new(),
        placed: Default::default(),
        injected: 0,
        commanded: 0,
        failures_consumed: 0,
        unexpected: BTreeMap::new(),
        unexpected_why: BTreeMap::new(),
        unexpected_samples: Vec::new(),
        injected_at: HashMap::new(),
        read_by_cluster: HashMap::new(),
        injected_job: HashMap::new(),
        misclassified: BTreeMap::new(),
        no_command: BTreeMap::new(),
        decisions: 0,
        commands: 0,
        read_at: BTreeSet::new(),
        read_again: 0,
        commands_by_action: BTreeMap::new(),
        evidence_to_failure: Histogram::default(),
        failure_to_command: Histogram::default(),
        evidence_to_command: Histogram::default(),
        evidence_to_failure_by_kind: BTreeMap::new(),
        answers: Vec::new(),
    };
    let bench_began = Instant::now();
    let now_ms = move || START_MS + bench_began.elapsed().as_millis() as i64;
    let sent = Arc::new(Sent::default());
    let io = Io {
        producer: producer.clone(),
        sent: sent.clone(),
        topics: (0..a.clusters)
            .map(|c| unicron_codec::Topics::bound(&bus.kafka, &cluster_name(c)))
            .collect(),
    };

    // Every job's first placement: the planner has read every cluster.
    let placing = Instant::now();
    while run.placed.len() < a.clusters * JOBS {
        let record = tokio::time::timeout(Duration::from_secs(600), out.recv())
            .await
            .expect("a placement within 10 minutes of the last")
            .unwrap();
        run.observe(&record, &out_topics(bus), &io, now_ms(), a.repair_s);
    }
    eprintln!(
        "{} clusters x {} GPUs placed in {:.1} s; heartbeats from {} nodes, failures after {} s",
        a.clusters,
        a.gpus,
        placing.elapsed().as_secs_f64(),
        a.clusters * nodes,
        HEARTBEAT_WARMUP.as_secs()
    );

    let per_s = a.failures_per_s();
    let total = (per_s * a.minutes * 60.0).round().max(1.0) as usize;
    let mut rng = Lcg(42);
    // A seeded rotation over every node of every cluster.
    let mut rotation: Vec<(usize, usize)> = (0..a.clusters)
        .flat_map(|c| (0..nodes).map(move |n| (c, n)))
        .collect();
    for i in (1..rotation.len()).rev() {
        rotation.swap(i, rng.next(i + 1));
    }
    let mut turn = 0;
    let heartbeat_ack = Arc::new(Mutex::new(Histogram::default()));
    let slot_every = HEARTBEAT_EVERY / SLOTS as u32;
    let mut next_slot = Instant::now();
    let mut slot = 0;
    let heartbeats_began = Instant::now();
    let began = heartbeats_began + HEARTBEAT_WARMUP;
    let mut next_failure = began;
    let mut sampler = Sampler::new(Duration::from_secs_f64(a.sample_s), &settings.state_dir);
    let groups = [
        ("detector", detector_settings.group_id.clone()),
        ("planner", settings.group_id.clone()),
    ];
    let mut max_lag = BTreeMap::<&str, f64>::new();
    let mut lag_at_end_of_failures = BTreeMap::<&str, f64>::new();
    let mut drain_until = None;
    let mut skipped_turns = 0usize;
    let quiet = Quiet::of(&detector_settings.tuning);
    // `--kill-broker-after-minutes`: the fault runs off the loop; it
    // reports (broker, killed at, back in sync at) when done.
    let mut broker_kill_at = a
        .kill_broker_after_minutes
        .map(|m| began + Duration::from_secs_f64(m * 60.0));
    let (fault_done, mut fault_report) = tokio::sync::mpsc::channel(1);
    let mut add_detector_at = a
        .add_detector_after_minutes
        .map(|m| began + Duration::from_secs_f64(m * 60.0));
    let mut broker_fault: Option<(u32, Instant, Instant)> = None;
    let flood_at = began + Duration::from_secs_f64(a.flood_after_minutes * 60.0);
    let flood_window = flood_at..flood_at + Duration::from_secs_f64(a.flood_minutes * 60.0);
    // Idle ticks travel in the detector's rounds, not on the agent topic:
    // nothing to take off.
    let inputs_in = |text: &str| {
        sampling::metric_sum(
            text,
            "unicron_records_in_total",
            &[&format!("topic=\"{}\"", topic("agent"))],
        ) + sampling::metric_sum(
            text,
            "unicron_records_in_total",
            &[&format!("topic=\"{}\"", topic("logs"))],
        )
    };
    // (wall time, detector inputs read, its lag) at the previous sample,
    // and its read rates over the intervals it lagged throughout.
    let mut previous: Option<(Instant, f64, f64)> = None;
    let mut catch_up_rates: Vec<f64> = Vec::new();
    loop {
        let injecting = run.injected < total;
        if !injecting && drain_until.is_none() {
            drain_until = Some(Instant::now() + DRAIN);
            let text = metrics.render();
            for (stage, group) in &groups {
                lag_at_end_of_failures.insert(stage, lag(&text, group));
            }
            eprintln!("all {total} failures injected; waiting for the last commands");
        }
        if drain_until.is_some_and(|until| run.pending.is_empty() || Instant::now() >= until) {
            break;
        }
        let next_repair = run.repairs.front().map(|r| r.0);
        tokio::select! {
            biased;
            _ = tokio::time::sleep_until(next_slot.into()) => {
                send_heartbeats(&run, &io, slot, now_ms(), next_slot, &heartbeat_ack);
                if let Some(x) = a.flood.filter(|_| flood_window.contains(&Instant::now())) {
                    send_flood(&run, &io, slot, now_ms(), x);
                }
                slot = (slot + 1) % SLOTS;
                next_slot += slot_every;
            }
            _ = tokio::time::sleep_until(next_failure.into()), if injecting => {
                // A hang shows only as missing progress, which this bench
                // does not report: draw again.
                let kind = loop {
                    let kind = faults::pick(rng.unit());
                    if kind != FailureKind::TaskHang {
                        break kind;
                    }
                };
                // The next node in the rotation that can fail now.
                let mut tries = 0;
                let target = loop {
                    let (c, n) = rotation[turn % rotation.len()];
                    turn += 1;
                    if run.can_fail(c, n, kind, &quiet) {
                        break Some((c, n));
                    }
                    tries += 1;
                    if tries == rotation.len() {
                        break None;
                    }
                };
                skipped_turns += tries;
                if let Some((c, n)) = target {
                    let gpu = rng.next(8) as u32;
                    run.inject(c, n, kind, gpu, &io, now_ms());
                }
                next_failure = began + Duration::from_secs_f64(run.injected as f64 / per_s);
                if target.is_none() {
                    next_failure += Duration::from_secs(1);
                }
            }
            _ = tokio::time::sleep_until(next_repair.unwrap_or(next_slot).into()), if next_repair.is_some() => {
                let (_, c, n) = run.repairs.pop_front().expect("peeked");
                run.repair(c, n, &io, now_ms());
            }
            _ = tokio::time::sleep_until(broker_kill_at.unwrap_or(next_slot).into()), if broker_kill_at.is_some() => {
                broker_kill_at = None;
                let cluster = bus.cluster.clone().expect("--kafka");
                let (topic, done) = (failures_topic.clone(), fault_done.clone());
                tokio::task::spawn_blocking(move || {
                    let mut cluster = cluster.lock().unwrap();
                    let Some(leader) = cluster.leader(&topic, 0) else {
                        eprintln!("{topic}[0] has no leader to kill");
                        return;
                    };
                    eprintln!("kill -9 broker {leader}, leader of {topic}[0]; restarting it in 20 s");
                    let killed = Instant::now();
                    cluster.kill(leader);
                    std::thread::sleep(BROKER_DOWN);
                    if let Err(e) = cluster.start_node(leader) {
                        eprintln!("broker {leader} did not start again: {e}");
                        return;
                    }
                    let _ = cluster.wait_in_sync(Duration::from_secs(300));
                    eprintln!("broker {leader} back, every partition in sync after {:.1} s", killed.elapsed().as_secs_f64());
                    let _ = done.blocking_send((leader, killed, Instant::now()));
                });
            }
            _ = tokio::time::sleep_until(add_detector_at.unwrap_or(next_slot).into()), if add_detector_at.is_some() => {
                add_detector_at = None;
                eprintln!("one more detector joins the group");
                start_detector(bus, &detector_settings);
            }
            Some(report) = fault_report.recv() => {
                broker_fault = Some(report);
            }
            _ = tokio::time::sleep_until(sampler.next_at().into()) => {
                let sample = sampler.take(run.decisions);
                // Commands of failures answered long ago (their later
                // commands), not of failures still to be read.
                run.commanded_early.retain(|_, at| at.elapsed() < DRAIN);
                let text = metrics.render();
                let lags: Vec<(&str, f64)> = groups.iter().map(|(stage, group)| (*stage, lag(&text, group))).collect();
                for (stage, value) in &lags {
                    let max = max_lag.entry(stage).or_default();
                    *max = max.max(*value);
                }
                let read = inputs_in(&text);
                if let Some((at, read_then, lag_then)) = previous
                    && lag_then > CATCHING_UP
                    && lags[0].1 > CATCHING_UP
                {
                    catch_up_rates.push((read - read_then) / at.elapsed().as_secs_f64());
                }
                previous = Some((Instant::now(), read, lags[0].1));
                eprintln!(
                    "t={:.0}s injected={} failures={} commanded={} pending={} decisions={} rss={:.1}MB state={:.1}MB lag detector={:.0} planner={:.0} heartbeat-ack-p99={:.0}ms",
                    sample.t_s, run.injected, run.failures_consumed, run.commanded, run.pending.len(),
                    run.decisions, sample.rss_mb, sample.state_mb, lags[0].1, lags[1].1,
                    heartbeat_ack.lock().unwrap().percentile_ms(0.99),
                );
            }
            record = out.recv() => {
                if let Ok(record) = record {
                    run.observe(&record, &out_topics(bus), &io, now_ms(), a.repair_s);
                }
            }
        }
    }
    let injecting_s = run.injected as f64 / per_s;
    sampler.take(run.decisions);

    // Heartbeats stop; the detector reads what is left of its inputs.
    let produced = |sent: &Sent| {
        sent.heartbeats.load(Ordering::Relaxed) + sent.evidence.load(Ordering::Relaxed)
    };
    let commands_out = |text: &str| {
        sampling::metric_sum(
            text,
            "unicron_records_out_total",
            &[&format!("topic=\"{}\"", topic("commands"))],
        )
    };
    let settled = |run: &Run| {
        let text = metrics.render();
        inputs_in(&text) >= produced(&sent) as f64 && run.commands as f64 >= commands_out(&text)
    };
    let settle_until = Instant::now() + Duration::from_secs(30);
    while !settled(&run) && Instant::now() < settle_until {
        if let Ok(Ok(record)) = tokio::time::timeout(Duration::from_millis(200), out.recv()).await {
            run.observe(&record, &out_topics(bus), &io, now_ms(), a.repair_s);
        }
    }
    let text = metrics.render();
    // The detector's rate over the whole run; its capacity when it lagged
    // throughout (a detector that keeps up reads at the input rate).
    let detector_consume_per_s =
        inputs_in(&text) / heartbeats_began.elapsed().as_secs_f64().max(1e-9);
    let raw_consume_per_s = raw_consume_per_s(
        &bus.brokers,
        &[&topic("agent"), &topic("logs")],
        produced(&sent),
    );
    let records = |direction: &str, name: &str| {
        sampling::metric_sum(
            &text,
            &format!("unicron_records_{direction}_total"),
            &[&format!("topic=\"{}\"", topic(name))],
        ) as u64
    };
    let stages = serde_json::json!({
        "heartbeats_produced": sent.heartbeats.load(Ordering::Relaxed),
        "evidence_produced": sent.evidence.load(Ordering::Relaxed),
        "detector_consumed": inputs_in(&text) as u64,
        "detector_idle_ticks": sampling::metric_sum(&text, "unicron_detector_idle_ticks_total", &[]) as u64,
        "failures_published": records("out", "failures"),
        "failures_consumed_by_planner": records("in", "failures").saturating_sub(run.failures_consumed as u64),
        "failures_consumed_by_bench": run.failures_consumed,
        "decisions_published": records("out", "decisions"),
        "decisions_consumed": run.decisions,
        "commands_published": records("out", "commands"),
        "commands_consumed": run.commands,
        // What the topic holds: tells a reader that missed records from a
        // counter that counted more than were written.
        "commands_in_topic": records_in_topic(bus, &topic("commands")),
        "outputs_read_again_by_bench": run.read_again,
        "results_produced": sent.results.load(Ordering::Relaxed),
        "results_consumed_by_planner": records("in", "command-results"),
        "repairs_produced": sent.repairs.load(Ordering::Relaxed),
        "send_errors": sent.errors.load(Ordering::Relaxed),
    });
    let number = |name: &str| stages[name].as_u64().unwrap_or(0);
    // Each stage against the one before it; a shortfall is data the broker
    // dropped or a consumer never read.
    let lost = [
        (
            "detector inputs",
            number("heartbeats_produced") + number("evidence_produced"),
            number("detector_consumed"),
        ),
        (
            "failures (planner)",
            number("failures_published"),
            number("failures_consumed_by_planner"),
        ),
        (
            "failures (bench)",
            number("failures_published"),
            number("failures_consumed_by_bench"),
        ),
        (
            "commands",
            number("commands_published"),
            number("commands_consumed"),
        ),
    ];
    let mut stage_shortfall = 0;
    for (stage, produced, consumed) in lost {
        if consumed < produced {
            eprintln!("{stage}: {produced} produced, {consumed} consumed");
            stage_shortfall += (produced - consumed) as usize;
        }
    }
    let unanswered = run.pending.len();
    let mut undetected = BTreeMap::<&str, usize>::new();
    let mut undetected_samples = Vec::new();
    for (&(c, n), injection) in run.pending.iter().filter(|(_, i)| i.detected.is_none()) {
        *undetected.entry(injection.kind.symbol()).or_default() += 1;
        if undetected_samples.len() < 8 {
            // What the detector said about the cluster around then.
            let nearby: Vec<String> = run
                .read_by_cluster
                .get(&c)
                .into_iter()
                .flatten()
                .filter(|(at, _)| {
                    at.saturating_duration_since(injection.produced) < Duration::from_secs(90)
                        && injection.produced.saturating_duration_since(*at)
                            < Duration::from_secs(90)
                })
                .map(|(at, what)| {
                    let after = at
                        .saturating_duration_since(injection.produced)
                        .as_secs_f64()
                        - injection
                            .produced
                            .saturating_duration_since(*at)
                            .as_secs_f64();
                    format!("{after:+.1}s {what}")
                })
                .collect();
            undetected_samples.push(serde_json::json!({
                "cluster": cluster_name(c),
                "node": node_name(n),
                "job": run.injected_job.get(&(c, n)),
                "kind": injection.kind.symbol(),
                "injected_s": injection.produced.saturating_duration_since(began).as_secs_f64(),
                "failures_of_the_cluster_within_90_s": nearby,
            }));
        }
    }
    if unanswered > 0 {
        eprintln!(
            "{unanswered} failures without a command; never detected: {undetected:?}; decided without a command: {:?}",
            run.no_command
        );
    }
    let heartbeat_ack = heartbeat_ack.lock().unwrap();
    let by_kind: serde_json::Map<String, serde_json::Value> = run
        .evidence_to_failure_by_kind
        .iter()
        .map(|(kind, h)| (kind.clone(), h.json()))
        .collect();
    let mut result = serde_json::json!({
        "mode": "pipeline",
        "brokers": crate::broker_label(a),
        "clusters": a.clusters,
        "gpus_per_cluster": a.gpus,
        "nodes": a.clusters * nodes,
        "minutes": a.minutes,
        "failures": run.injected,
        "failures_per_s": run.injected as f64 / injecting_s.max(1e-9),
        "inputs_per_s": (a.clusters * nodes) as f64 / HEARTBEAT_EVERY.as_secs_f64()
            + sent.evidence.load(Ordering::Relaxed) as f64 / injecting_s.max(1e-9),
        "commanded": run.commanded,
        "unanswered": unanswered,
        "decisions": run.decisions,
        "commands": run.commands,
        "commands_by_action": run.commands_by_action,
        "decision_p50_ms": run.evidence_to_command.percentile_ms(0.5),
        "decision_p99_ms": run.evidence_to_command.percentile_ms(0.99),
        "evidence_to_failure": run.evidence_to_failure.json(),
        "failure_to_command": run.failure_to_command.json(),
        "evidence_to_command": run.evidence_to_command.json(),
        "evidence_to_failure_by_kind": by_kind,
        "heartbeat_ack": heartbeat_ack.json(),
        "unexpected_failures": run.unexpected,
        "unexpected_why": run.unexpected_why,
        "unexpected_samples": run.unexpected_samples,
        "undetected": undetected,
        "undetected_samples": undetected_samples,
        "misclassified": run.misclassified,
        "decided_without_command": run.no_command,
        "rotation_skips": skipped_turns,
        "max_lag_records": max_lag,
        "lag_at_end_of_failures": lag_at_end_of_failures,
        "stages": stages,
        "detector_consume_per_s": detector_consume_per_s,
        // Its capacity, measured in the run: the mean read rate over the
        // intervals it lagged by more than CATCHING_UP records throughout.
        "detector_catch_up_per_s": (!catch_up_rates.is_empty())
            .then(|| catch_up_rates.iter().sum::<f64>() / catch_up_rates.len() as f64),
        "detector_at_end": {
            "silence_timers_held": sampling::metric_sum(&text, "unicron_detector_silence_timers_held", &[]),
            "lag_guard_held": sampling::metric_sum(&text, "unicron_detector_lag_guard_held", &[]),
            "input_lag_records": sampling::metric_sum(&text, "unicron_detector_input_lag_records", &[]),
            "partition_delay_s": sampling::metric_sum(&text, "unicron_detector_partition_delay_seconds", &[]),
            "rounds": sampling::metric_sum(&text, "unicron_detector_rounds_total", &[]),
        },
        "raw_consume_per_s": raw_consume_per_s,
        "planner_rss_mb": sampling::rss_mb(),
        "state_mb": sampling::dir_mb(&settings.state_dir),
        "restart_s": null,
    });
    crate::merge(
        &mut result,
        serde_json::json!({
            "detectors": a.detectors,
            "detector_added_after_minutes": a.add_detector_after_minutes,
        }),
    );
    if let Some((broker, killed, back)) = broker_fault {
        // Failures read before the kill, between the kill and every
        // partition back in sync, and after.
        let mut phases = [
            Histogram::default(),
            Histogram::default(),
            Histogram::default(),
        ];
        for (_, read, latency, _) in &run.answers {
            let phase = if *read < killed {
                0
            } else if *read < back {
                1
            } else {
                2
            };
            phases[phase].record(*latency);
        }
        let [before, during, after] = phases;
        crate::merge(
            &mut result,
            serde_json::json!({ "broker_kill": {
                "broker": broker,
                "at_s": killed.saturating_duration_since(began).as_secs_f64(),
                "down_s": BROKER_DOWN.as_secs_f64(),
                "back_in_sync_s": back.saturating_duration_since(killed).as_secs_f64(),
                "failure_to_command_before": before.json(),
                "failure_to_command_during": during.json(),
                "failure_to_command_after": after.json(),
            }}),
        );
    }
    if a.cluster_topics {
        let rejected = |reason: &str| {
            sampling::metric_sum(
                &text,
                "unicron_ingress_rejected_total",
                &[&format!("reason=\"{reason}\"")],
            ) as u64
        };
        crate::merge(
            &mut result,
            serde_json::json!({ "ingress": {
                "budget_records_per_s": a.budget_records_per_s
                    .unwrap_or(unicron_core::ingress_budget::BudgetConfig::default().records_per_s),
                "forwarded": sampling::metric_sum(&text, "unicron_ingress_forwarded_total", &[]) as u64,
                "dropped_over_budget": rejected("over_budget_records") + rejected("over_budget_bytes"),
                "dead_lettered": rejected("foreign_cluster") + rejected("undecodable"),
            }}),
        );
    }
    if let Some(x) = a.flood {
        // The other clusters' failures read before, during and after the
        // first cluster's flood.
        let mut failure = [(); 3].map(|_| Histogram::default());
        let mut evidence = [(); 3].map(|_| Histogram::default());
        for (c, read, to_command, from_evidence) in &run.answers {
            if *c == 0 {
                continue;
            }
            let phase = if *read < flood_window.start {
                0
            } else if *read < flood_window.end {
                1
            } else {
                2
            };
            failure[phase].record(*to_command);
            evidence[phase].record(*from_evidence);
        }
        let [fb, fd, fa] = failure;
        let [eb, ed, ea] = evidence;
        crate::merge(
            &mut result,
            serde_json::json!({ "flood": {
                "cluster": cluster_name(0),
                "times_normal_rate": x,
                "extra_records_per_s": (x - 1.0) * nodes as f64 / HEARTBEAT_EVERY.as_secs_f64(),
                "flood_records_sent": sent.flood.load(Ordering::Relaxed),
                "at_s": a.flood_after_minutes * 60.0,
                "minutes": a.flood_minutes,
                "others_failure_to_command_before": fb.json(),
                "others_failure_to_command_during": fd.json(),
                "others_failure_to_command_after": fa.json(),
                "others_evidence_to_command_before": eb.json(),
                "others_evidence_to_command_during": ed.json(),
                "others_evidence_to_command_after": ea.json(),
            }}),
        );
    }
    crate::merge(&mut result, crate::growth(a, &sampler));
    (result, unanswered + stage_shortfall)
}

/// How many records `topic` holds (high less low watermark, summed).
fn records_in_topic(bus: &Bus, topic: &str) -> i64 {
    let reader = unicron_bus::whole_topic::PartitionReader::new(&bus.kafka, &bus.brokers)
        .expect("a partition reader");
    reader
        .partitions(topic)
        .expect("partitions")
        .into_iter()
        .map(|p| {
            let (low, high) = reader.watermarks(topic, p).expect("watermarks");
            high - low
        })
        .sum()
}

/// Records/s a plain rdkafka consumer reads the detector's input topics at,
/// from their beginning, on the run's brokers: the transport's limit on
/// this machine for the detector's records (`records` of them; at most 120 s).
fn raw_consume_per_s(brokers: &str, topics: &[&str], records: u64) -> f64 {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    let raw: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "raw-consume")
        .set("enable.auto.commit", "false")
        // As the services' consumers: no 1-s pause once the prefetch
        // queue fills.
        .set("fetch.queue.backoff.ms", "20")
        .create()
        .expect("a raw consumer");
    let mut assignment = TopicPartitionList::new();
    for topic in topics {
        let metadata = raw
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .expect("topic metadata");
        for t in metadata.topics() {
            for p in t.partitions() {
                assignment
                    .add_partition_offset(topic, p.id(), Offset::Beginning)
                    .expect("a partition");
            }
        }
    }
    raw.assign(&assignment).expect("assigned");
    let (mut seen, mut first) = (0u64, None);
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen < records && Instant::now() < deadline {
        if let Some(Ok(_)) = raw.poll(Duration::from_millis(100)) {
            first.get_or_insert_with(Instant::now);
            seen += 1;
        }
    }
    first.map_or(0.0, |f: Instant| {
        seen as f64 / f.elapsed().as_secs_f64().max(1e-9)
    })
}

/// One more detector instance in the run's group, in this process.
fn start_detector(bus: &Bus, settings: &DetectorSettings) {
    let (k, b, s) = (bus.kafka.clone(), bus.brokers.clone(), settings.clone());
    tokio::spawn(async move {
        // Ends with an error when the broker stops at exit; any other is
        // worth seeing (the run then shows every failure unanswered).
        if let Err(e) =
            unicron_detector::run(&k, &b, s.build().unwrap(), std::future::pending()).await
        {
            eprintln!("detector stopped: {e}");
        }
    });
}

/// The bench's consumer topics: (failures, decisions, commands).
fn out_topics(bus: &Bus) -> [String; 3] {
    ["failures", "decisions", "commands"].map(|t| bus.kafka.topic(t))
}

/// A consumer group's lag summed over its partitions.
fn lag(text: &str, group: &str) -> f64 {
    sampling::metric_sum(
        text,
        "unicron_consumer_lag_records",
        &[&format!("group=\"{group}\"")],
    )
}

/// Where the bench's records go, and its counts of them.
struct Io {
    producer: Producer,
    sent: Arc<Sent>,
    /// Each cluster's topics (its own with `--cluster-topics`).
    topics: Vec<unicron_codec::Topics>,
}

impl Io {
    /// Where cluster `c`'s writers send records of `topic`.
    fn topic(&self, c: usize, topic: unicron_codec::Topic) -> String {
        self.topics[c].name(topic).to_string()
    }

    /// The key cluster `c`'s writers give a record of `topic` keyed `key`.
    fn key(&self, c: usize, topic: unicron_codec::Topic, key: &str) -> String {
        self.topics[c].key_str(topic, key)
    }

    /// Sends `records` (topic, key, payload) in order, in the background;
    /// `counter` counts the acknowledged ones.
    fn send_in_order(
        &self,
        records: Vec<(String, String, Vec<u8>)>,
        counter: fn(&Sent) -> &AtomicU64,
    ) {
        let (producer, sent) = (self.producer.clone(), self.sent.clone());
        tokio::spawn(async move {
            for (topic, key, payload) in records {
                match producer.send_bytes(&topic, key.as_bytes(), &payload).await {
                    Ok(_) => counter(&sent).fetch_add(1, Ordering::Relaxed),
                    Err(_) => sent.errors.fetch_add(1, Ordering::Relaxed),
                };
            }
        });
    }
}

/// One slot's heartbeats, sent at once; the slot's last acknowledgement
/// against when it was due goes into `ack`.
fn send_heartbeats(
    run: &Run,
    io: &Io,
    slot: usize,
    time_ms: i64,
    due: Instant,
    ack: &Arc<Mutex<Histogram>>,
) {
    let codec = AvroCodec::<AgentEvent>::default();
    let mut batch = Vec::new();
    for (c, cluster) in run.clusters.iter().enumerate() {
        let topic = io.topic(c, unicron_codec::Topic::Agent);
        for (n, node) in cluster.nodes.iter().enumerate().skip(slot).step_by(SLOTS) {
            if node.dark {
                continue;
            }
            let name = node_name(n);
            let mut beat =
                AgentEvent::new(&cluster.name, &name, time_ms, AgentEventKind::Heartbeat);
            beat.job = node.job.map(|j| format!("job-{j}"));
            batch.push((
                topic.clone(),
                io.key(c, unicron_codec::Topic::Agent, &name),
                codec.encode(&beat).expect("a heartbeat encodes"),
            ));
        }
    }
    let (producer, sent, ack) = (io.producer.clone(), io.sent.clone(), ack.clone());
    tokio::spawn(async move {
        let sends = batch
            .iter()
            .map(|(topic, key, payload)| producer.send_bytes(topic, key.as_bytes(), payload));
        for result in futures::future::join_all(sends).await {
            match result {
                Ok(_) => sent.heartbeats.fetch_add(1, Ordering::Relaxed),
                Err(_) => sent.errors.fetch_add(1, Ordering::Relaxed),
            };
        }
        ack.lock().unwrap().record(due.elapsed());
    });
}

/// The flood's share of one slot: `times - 1` benign log lines from each
/// of the first cluster's nodes in the slot, on top of its heartbeats.
fn send_flood(run: &Run, io: &Io, slot: usize, time_ms: i64, times: f64) {
    let codec = AvroCodec::<LogRecord>::default();
    let cluster = &run.clusters[0];
    let extra = (times - 1.0).round() as usize;
    let mut batch = Vec::new();
    for (n, node) in cluster.nodes.iter().enumerate().skip(slot).step_by(SLOTS) {
        if node.dark {
            continue;
        }
        let name = node_name(n);
        for i in 0..extra {
            let line = LogRecord {
                cluster: cluster.name.clone(),
                node: name.clone(),
                time_ms,
                source: "app".into(),
                job: node.job.map(|j| format!("job-{j}")),
                rank: None,
                gpu: None,
                line: format!("INFO rank {n} step {time_ms} micro-batch {i} loss 2.31 lr 3.0e-4"),
                attributes: Default::default(),
            };
            batch.push((
                name.clone(),
                codec.encode(&line).expect("a log line encodes"),
            ));
        }
    }
    let (producer, sent, topic) = (
        io.producer.clone(),
        io.sent.clone(),
        io.topic(0, unicron_codec::Topic::Logs),
    );
    tokio::spawn(async move {
        let records: Vec<unicron_bus::Outbound<'_>> = batch
            .iter()
            .map(|(key, payload)| unicron_bus::Outbound {
                topic: &topic,
                partition: None,
                key: key.as_bytes(),
                payload,
            })
            .collect();
        match producer.send_all(&records).await {
            Ok(landed) => sent.flood.fetch_add(landed.len() as u64, Ordering::Relaxed),
            Err(_) => sent.errors.fetch_add(1, Ordering::Relaxed),
        };
    });
}

impl Run {
    /// Whether a failure of `kind` on node `n` of cluster `c` would reach
    /// the planner as a failure of its own.
    fn can_fail(&self, c: usize, n: usize, kind: FailureKind, quiet: &Quiet) -> bool {
        let cluster = &self.clusters[c];
        let node = &cluster.nodes[n];
        let Some(job) = node.job else {
            return false;
        };
        let since = |at: Option<Instant>, quiet: Duration| at.is_none_or(|t| t.elapsed() > quiet);
        !node.dark
            && !node.isolated
            && !node.failing
            && since(cluster.last_symptom[job], quiet.after_symptom)
            && (!is_symptom(kind) || since(cluster.last_root[job], quiet.after_root))
    }

    /// `kind` on node `n` of cluster `c`, sent as the simulator shows it.
    fn inject(&mut self, c: usize, n: usize, kind: FailureKind, gpu: u32, io: &Io, time_ms: i64) {
        let cluster = &mut self.clusters[c];
        let node = &mut cluster.nodes[n];
        let (job, rank) = (node.job.map(|j| format!("job-{j}")), node.rank);
        let name = node_name(n);
        let shown = faults::manifest(kind, &name, gpu, rank);
        let mut records = Vec::new();
        for line in shown.lines {
            let log = LogRecord {
                cluster: cluster.name.clone(),
                node: name.clone(),
                time_ms,
                source: if line.starts_with("kernel:") {
                    "kmsg".into()
                } else {
                    "training".into()
                },
                job: job.clone(),
                rank: Some(rank as i32),
                gpu: Some(gpu as i32),
                line,
                attributes: BTreeMap::new(),
            };
            let payload = AvroCodec::default()
                .encode(&log)
                .expect("a log line encodes");
            records.push((
                io.topic(c, unicron_codec::Topic::Logs),
                io.key(c, unicron_codec::Topic::Logs, &name),
                payload,
            ));
        }
        if let Some(code) = shown.exit_code {
            let mut exit =
                AgentEvent::new(&cluster.name, &name, time_ms, AgentEventKind::ProcessExit);
            exit.job = job.clone();
            exit.rank = Some(rank as i32);
            exit.exit_code = Some(code);
            let payload = AvroCodec::default().encode(&exit).expect("an exit encodes");
            records.push((
                io.topic(c, unicron_codec::Topic::Agent),
                io.key(c, unicron_codec::Topic::Agent, &name),
                payload,
            ));
        }
        // A DCGM counter that moves with the line (ECC) is left out: the
        // line alone classifies it, and telemetry has its own bench.
        node.dark = shown.node_down;
        node.failing = true;
        if let Some(j) = node.job {
            let last = if is_symptom(kind) {
                &mut cluster.last_symptom
            } else {
                &mut cluster.last_root
            };
            last[j] = Some(Instant::now());
        }
        self.injected += 1;
        self.injected_at.insert((c, n), Instant::now());
        self.injected_job.insert((c, n), job.clone());
        self.pending.insert(
            (c, n),
            Injection {
                kind,
                produced: Instant::now(),
                detected: None,
                failure_ids: Vec::new(),
            },
        );
        io.send_in_order(records, |s| &s.evidence);
    }

    fn repair(&mut self, c: usize, n: usize, io: &Io, time_ms: i64) {
        let cluster = &mut self.clusters[c];
        let node = &mut cluster.nodes[n];
        node.isolated = false;
        node.dark = false;
        let mut event = ClusterEvent::new(&cluster.name, time_ms, ClusterEventKind::NodeRepaired);
        event.node = Some(node_name(n));
        event.gpus = Some(8);
        let payload = AvroCodec::default()
            .encode(&event)
            .expect("a repair encodes");
        io.send_in_order(
            vec![(
                io.topic(c, unicron_codec::Topic::Cluster),
                io.key(c, unicron_codec::Topic::Cluster, &cluster.name),
                payload,
            )],
            |s| &s.repairs,
        );
    }

    fn observe(
        &mut self,
        record: &InboundRecord,
        [failures, decisions, commands]: &[String; 3],
        io: &Io,
        time_ms: i64,
        repair_s: f64,
    ) {
        if !self
            .read_at
            .insert((record.topic.clone(), record.partition, record.offset))
        {
            self.read_again += 1;
            return;
        }
        if record.topic == *failures {
            let failure = AvroCodec::<FailureEvent>::default()
                .decode(&record.payload)
                .unwrap();
            self.on_failure(failure);
        } else if record.topic == *decisions {
            let decision = AvroCodec::<Decision>::default()
                .decode(&record.payload)
                .unwrap();
            self.on_decision(decision);
        } else if record.topic == *commands {
            let command = AvroCodec::<Command>::default()
                .decode(&record.payload)
                .unwrap();
            self.on_command(command, io, time_ms, repair_s);
        }
    }

    fn on_failure(&mut self, failure: FailureEvent) {
        self.failures_consumed += 1;
        if let Some(&c) = self.cluster_index.get(&failure.cluster) {
            self.read_by_cluster.entry(c).or_default().push((
                Instant::now(),
                format!(
                    "{} node={} job={} rule={} first_evidence={}",
                    failure.kind.symbol(),
                    failure.node.as_deref().unwrap_or("-"),
                    failure.job.as_deref().unwrap_or("-"),
                    failure.rule.as_deref().unwrap_or("-"),
                    failure.first_evidence_ms
                ),
            ));
        }
        let key = self
            .cluster_index
            .get(&failure.cluster)
            .copied()
            .zip(failure.node.as_deref().and_then(|node| index_of(node, 'n')));
        let Some(injection) = key.and_then(|key| self.pending.get_mut(&key)) else {
            *self
                .unexpected
                .entry(failure.kind.symbol().to_string())
                .or_default() += 1;
            let history = match key.map(|k| self.injected_at.get(&k)) {
                None => "no node".to_string(),
                Some(None) => "never injected".to_string(),
                Some(Some(at)) => format!("injected {:.0} s before", at.elapsed().as_secs_f64()),
            };
            let why = format!(
                "{} {} {} ({})",
                failure.kind.symbol(),
                failure.method.symbol(),
                failure.rule.as_deref().unwrap_or("-"),
                history.split(' ').next().unwrap_or("")
            );
            *self.unexpected_why.entry(why).or_default() += 1;
            if self.unexpected_samples.len() < 12 {
                self.unexpected_samples.push(serde_json::json!({
                    "id": failure.id,
                    "node": failure.node,
                    "job": failure.job,
                    "history": history,
                    "detected_after_evidence_ms": failure.detected_ms - failure.first_evidence_ms,
                    "evidence": failure.evidence.iter().map(|e| format!("{}[{}]@{} {}", e.topic, e.partition, e.offset, e.excerpt)).collect::<Vec<_>>(),
                }));
            }
            return;
        };
        if injection.detected.is_none() {
            let took = injection.produced.elapsed();
            injection.detected = Some(Instant::now());
            self.evidence_to_failure.record(took);
            self.evidence_to_failure_by_kind
                .entry(injection.kind.symbol().to_string())
                .or_default()
                .record(took);
            if failure.kind != injection.kind {
                *self
                    .misclassified
                    .entry(format!(
                        "{} as {}",
                        injection.kind.symbol(),
                        failure.kind.symbol()
                    ))
                    .or_default() += 1;
            }
        }
        injection.failure_ids.push(failure.id.clone());
        let key = key.expect("matched");
        match self.commanded_early.remove(&failure.id) {
            Some(command_read) => self.answered(key, command_read),
            None => {
                self.by_failure.insert(failure.id, key);
            }
        }
    }

    /// The injection at `key` got its first command, read at `command_read`.
    fn answered(&mut self, key: (usize, usize), command_read: Instant) {
        let Some(injection) = self.pending.remove(&key) else {
            return;
        };
        for id in &injection.failure_ids {
            self.by_failure.remove(id);
        }
        let detected = injection.detected.expect("a failure record was read");
        self.failure_to_command
            .record(command_read.saturating_duration_since(detected));
        self.answers.push((
            key.0,
            detected,
            command_read.saturating_duration_since(detected),
            command_read.saturating_duration_since(injection.produced),
        ));
        self.evidence_to_command
            .record(command_read.saturating_duration_since(injection.produced));
        self.commanded += 1;
        self.clusters[key.0].nodes[key.1].failing = false;
    }

    fn on_decision(&mut self, decision: Decision) {
        self.decisions += 1;
        if let Some(&c) = self.cluster_index.get(&decision.cluster) {
            for (job, nodes) in &decision.assignment {
                let (Some(j), Some(nodes)) = (
                    job_index(job).filter(|j| *j < JOBS),
                    nodes
                        .iter()
                        .map(|n| index_of(n, 'n'))
                        .collect::<Option<Vec<usize>>>(),
                ) else {
                    continue;
                };
                self.clusters[c].assign(j, &nodes);
            }
        }
        if decision.command_ids.is_empty() && self.by_failure.contains_key(&decision.trigger.ref_id)
        {
            *self.no_command.entry(decision.reason).or_default() += 1;
        }
    }

    fn on_command(&mut self, command: Command, io: &Io, time_ms: i64, repair_s: f64) {
        self.commands += 1;
        *self
            .commands_by_action
            .entry(command.action.symbol().to_string())
            .or_default() += 1;
        let c = self.cluster_index.get(&command.cluster).copied();
        if let (Some(c), CommandAction::Resume, Some(j)) = (
            c,
            command.action,
            command.job.as_deref().and_then(job_index),
        ) {
            self.placed.insert((c, j));
        }
        if let (Some(c), CommandAction::IsolateNode) = (c, command.action) {
            for n in command.nodes.iter().filter_map(|n| index_of(n, 'n')) {
                self.clusters[c].nodes[n].isolated = true;
                self.repairs
                    .push_back((Instant::now() + Duration::from_secs_f64(repair_s), c, n));
            }
        }
        for cause in &command.causation {
            match self.by_failure.get(cause) {
                Some(&key) => self.answered(key, Instant::now()),
                // Detector failure ids start so; cluster-event causes do not.
                None if cause.starts_with("f:") => {
                    self.commanded_early
                        .entry(cause.clone())
                        .or_insert_with(Instant::now);
                }
                None => {}
            }
        }
        // The executor's answer: every command succeeds at once.
        let result = CommandResult {
            command_id: command.id,
            cluster: command.cluster.clone(),
            time_ms,
            status: CommandStatus::Succeeded,
            reason: None,
            duration_ms: 0,
            executor: "bench".into(),
            node: None,
        };
        let payload = AvroCodec::default()
            .encode(&result)
            .expect("a result encodes");
        let c = self.cluster_index[&command.cluster];
        io.send_in_order(
            vec![(
                io.topic(c, unicron_codec::Topic::CommandResults),
                io.key(c, unicron_codec::Topic::CommandResults, &command.cluster),
                payload,
            )],
            |s| &s.results,
        );
    }
}
