//! Several planners (`--planners N --unicron PATH`): N `unicron planner`
//! processes in one consumer group share the clusters on a standalone
//! broker. Failures are fed straight to them as in the planner-alone mode;
//! `--kill-after-minutes K` into the failures one planner is SIGKILLed and
//! restarted a second later on its store, as a supervisor would. The group
//! rebalances; partitions move, and their new owners take them over from
//! the newest checkpoints.
//!
//! Reports failure → decision latency before and after the kill, the
//! longest wait of a failure sent after it (the takeover as a client sees
//! it), what the takeovers logged (partitions, checkpoints restored,
//! decisions replayed), and from the decisions topic at the end: failures
//! decided more than once (must be 0), decisions out of their cluster's
//! input order (must be 0); with `--replay`, `unicron replay`'s divergences
//! (must be 0). Any of these, or a failure never decided, fails the run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use unicron_bus::{Consumer, Producer};
use unicron_codec::AvroCodec;
use unicron_core::*;

use crate::sampling::Histogram;
use crate::{Args, Bus, JOBS, Lcg, cluster_name};

/// The planner processes, killed when dropped.
struct Planners {
    children: Vec<Option<Child>>,
}

impl Drop for Planners {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A configuration for `unicron planner` on the run's topics and group.
fn write_config(bus: &Bus, work: &Path, nodes: usize) -> PathBuf {
    let key = work.join("planner.key");
    std::fs::write(&key, hex::encode([5u8; 32])).unwrap();
    let config = work.join("unicron.toml");
    std::fs::write(
        &config,
        format!(
            r#"[kafka]
brokers = "{brokers}"
topic_prefix = "{prefix}"
# A killed planner's partitions move once its session expires: short,
# as in the chaos scenario (docs/chaos.md).
session.timeout.ms = 6000
heartbeat.interval.ms = 1000
[metrics]
enabled = false
[status]
enabled = false
[planner]
group_id = "{prefix}planner"
key_id = "bench"
signing_key_file = "{key}"
[planner.tuning]
max_isolations_per_hour = {nodes}
"#,
            brokers = bus.brokers,
            prefix = bus.kafka.topic_prefix,
            key = key.display(),
        ),
    )
    .unwrap();
    config
}

/// Starts planner `i` on its state directory, appending to its log.
fn spawn(unicron: &Path, config: &Path, work: &Path, i: usize) -> Child {
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(&planner_logs(work, i + 1)[i])
        .unwrap();
    Command::new(unicron)
        .arg("--config")
        .arg(config)
        .arg("planner")
        .env(
            "UNICRON_PLANNER__STATE_DIR",
            work.join(format!("planner-{i}")),
        )
        .env("RUST_LOG", "warn,unicron=info")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", unicron.display()))
}

/// What the takeovers logged: `took over partition` lines.
fn takeovers(logs: &[PathBuf]) -> serde_json::Value {
    let (mut partitions, mut restored, mut replayed) = (0u64, 0u64, 0u64);
    for path in logs {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("took over partition")) {
            partitions += 1;
            restored += u64::from(line.contains("checkpoint=true"));
            replayed += line
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix("applied="))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    serde_json::json!({
        "takeovers": partitions,
        "takeovers_from_checkpoint": restored,
        "takeover_decisions_replayed": replayed,
    })
}

/// Duplicated and out-of-order decisions on the whole decisions topic.
fn audit(bus: &Bus, sent: &BTreeSet<String>) -> (usize, usize, usize) {
    let codec = AvroCodec::<Decision>::default();
    let records = unicron_bus::whole_topic::read_topic(
        &bus.kafka,
        &bus.brokers,
        &bus.kafka.topic("decisions"),
    )
    .unwrap();
    let mut ids_by_failure: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut last: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut out_of_order = 0;
    for decision in records.iter().filter_map(|r| codec.decode(&r.payload).ok()) {
        if sent.contains(&decision.trigger.ref_id) {
            ids_by_failure
                .entry(decision.trigger.ref_id.clone())
                .or_default()
                .insert(decision.id.clone());
        }
        // A decision re-published after a crash repeats its id.
        if !seen.insert(decision.id.clone()) {
            continue;
        }
        let at = last
            .entry((decision.cluster.clone(), decision.trigger.topic.clone()))
            .or_insert(-1);
        if decision.trigger.offset <= *at {
            out_of_order += 1;
        }
        *at = decision.trigger.offset;
    }
    let twice = ids_by_failure.values().filter(|ids| ids.len() > 1).count();
    (records.len(), twice, out_of_order)
}

fn replay(unicron: &Path, config: &Path, work: &Path) -> Option<u64> {
    let report = work.join("replay.json");
    let out = Command::new(unicron)
        .arg("--config")
        .arg(config)
        .args(["replay", "--from-kafka", "--json"])
        .arg(&report)
        .output()
        .ok()?;
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).ok()?).ok()?;
    if !out.status.success() {
        eprintln!("replay: {}", String::from_utf8_lossy(&out.stderr));
    }
    // The planner's half: the failures were written by hand, with no
    // evidence for the detector's half of replay to reproduce.
    value["decisions"]["diverged"].as_u64()
}

/// Runs the several-planners mode; the result and how many failures were
/// never decided or decided wrongly.
pub async fn run(a: &Args, bus: &Bus, producer: &Producer) -> (serde_json::Value, usize) {
    let unicron = a.unicron.clone().unwrap_or_else(|| {
        eprintln!("--planners needs --unicron PATH (the unicron binary)");
        std::process::exit(2)
    });
    if a.brokers.is_none() && !a.kafka {
        eprintln!("--planners needs a broker of its own (--kafka or --brokers)");
        std::process::exit(2);
    }
    let nodes = a.gpus / 8;
    let work = tempfile::Builder::new()
        .prefix("unicron-planners-")
        .tempdir()
        .unwrap();
    let work = work.keep();
    let config = write_config(bus, &work, nodes);
    let mut planners = Planners {
        children: (0..a.planners)
            .map(|i| Some(spawn(&unicron, &config, &work, i)))
            .collect(),
    };
    eprintln!("{} planners; logs in {}", a.planners, work.display());

    let out = Consumer::new(
        &bus.kafka,
        &bus.brokers,
        &format!("{}bench", bus.kafka.topic_prefix),
    )
    .unwrap();
    let decisions_topic = bus.kafka.topic("decisions");
    out.subscribe(&[&decisions_topic]).unwrap();
    let codec = AvroCodec::<Decision>::default();
    // Every cluster event decided: every cluster read and its jobs placed.
    let events = a.clusters * (nodes + JOBS);
    let mut decided = 0;
    let placing = Instant::now();
    while decided < events {
        let record = tokio::time::timeout(Duration::from_secs(600), out.recv())
            .await
            .expect("a cluster event decided within 10 minutes of the last")
            .unwrap();
        let decision = codec.decode(&record.payload).unwrap();
        decided += usize::from(decision.trigger.kind == "cluster_event");
    }
    let placed_s = placing.elapsed().as_secs_f64();
    eprintln!("{events} cluster events decided in {placed_s:.1} s; feeding failures");

    let names: Vec<String> = (0..a.clusters).map(cluster_name).collect();
    let per_s = a.failures_per_s();
    let total = (per_s * a.minutes * 60.0).round().max(1.0) as usize;
    let kill_at = (per_s * a.kill_after_minutes * 60.0).round() as usize;
    let failures = bus.kafka.topic("failures");
    let fcodec = AvroCodec::<FailureEvent>::default();
    let mut rng = Lcg(42);
    let mut waiting: BTreeMap<String, (Instant, bool)> = BTreeMap::new();
    let (mut before, mut after) = (Histogram::default(), Histogram::default());
    let mut sent = BTreeSet::new();
    let mut killed_at = None;
    let mut max_lag = 0;
    let began = Instant::now();
    let mut observe = |record: unicron_codec::InboundRecord,
                       waiting: &mut BTreeMap<String, (Instant, bool)>| {
        if let Ok(decision) = codec.decode(&record.payload)
            && let Some((at, after_kill)) = waiting.remove(&decision.trigger.ref_id)
        {
            if after_kill { &mut after } else { &mut before }.record(at.elapsed());
        }
    };
    for i in 0..total {
        let due = began + Duration::from_secs_f64(i as f64 / per_s);
        loop {
            let wait = due.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                break;
            }
            if let Ok(Ok(record)) = tokio::time::timeout(wait, out.recv()).await {
                observe(record, &mut waiting);
            }
        }
        if i == kill_at && killed_at.is_none() {
            // SIGKILL, then its supervisor starts it again on its store a
            // second later.
            if let Some(mut victim) = planners.children[0].take() {
                let _ = victim.kill();
                let _ = victim.wait();
            }
            killed_at = Some(Instant::now());
            eprintln!("planner-0 killed (SIGKILL) after {i} failures; restarting it in 1 s");
            tokio::time::sleep(Duration::from_secs(1)).await;
            planners.children[0] = Some(spawn(&unicron, &config, &work, 0));
        }
        let failure = crate::random_failure(a, &mut rng, &names, i);
        waiting.insert(failure.id.clone(), (Instant::now(), killed_at.is_some()));
        sent.insert(failure.id.clone());
        max_lag = max_lag.max(waiting.len());
        producer
            .send(&failures, &failure.cluster, &failure, &fcodec)
            .await
            .unwrap();
    }
    let drain_until = Instant::now() + Duration::from_secs(180);
    while !waiting.is_empty() && Instant::now() < drain_until {
        if let Ok(Ok(record)) = tokio::time::timeout(Duration::from_secs(5), out.recv()).await {
            observe(record, &mut waiting);
        }
    }
    let elapsed = began.elapsed().as_secs_f64();
    let undecided = waiting.len();
    drop(planners);
    let (decision_records, twice, out_of_order) = audit(bus, &sent);
    let diverged = if a.replay {
        replay(&unicron, &config, &work)
    } else {
        None
    };
    let mut result = serde_json::json!({
        "mode": "planners",
        "planners": a.planners,
        "clusters": a.clusters,
        "gpus_per_cluster": a.gpus,
        "minutes": a.minutes,
        "placement_s": placed_s,
        "failures": total,
        "inputs_per_s": total as f64 / elapsed,
        "decision_p50_ms_before_kill": before.percentile_ms(0.5),
        "decision_p99_ms_before_kill": before.percentile_ms(0.99),
        "decision_p50_ms_after_kill": after.percentile_ms(0.5),
        "decision_p99_ms_after_kill": after.percentile_ms(0.99),
        "longest_wait_after_kill_s": after.json()["max_ms"].as_f64().unwrap_or(0.0) / 1e3,
        "max_lag_records": max_lag,
        "undecided": undecided,
        "decision_records": decision_records,
        "failures_decided_twice": twice,
        "decisions_out_of_order": out_of_order,
        "replay_divergences": diverged,
        "work_dir": work.display().to_string(),
    });
    crate::merge(&mut result, takeovers(&planner_logs(&work, a.planners)));
    let bad =
        undecided + twice + out_of_order + diverged.map_or(usize::from(a.replay), |d| d as usize);
    (result, bad)
}

fn planner_logs(work: &Path, count: usize) -> Vec<PathBuf> {
    (0..count)
        .map(|i| work.join(format!("planner-{i}.log")))
        .collect()
}
