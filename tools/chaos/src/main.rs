//! `unicron-chaos`: the services as separate processes on a three-broker
//! Apache Kafka cluster, killed while they work, judged by the simulator's
//! ground truth and by replay (`tools/chaos/run.sh`, docs/chaos.md).
//!
//! Detector, two planners in one consumer group, the executor and the
//! simulator run as `unicron` processes against Kafka. Meanwhile the driver
//! SIGKILLs a planner at random points and restarts it, kills the executor
//! between acting and publishing its result (through a relay in front of
//! the simulator), SIGKILLs the broker that leads the planner's first
//! input partition, restarts every broker in turn, and stops one planner
//! for a while so partitions move. The last line is
//! `chaos: kills=K failures=F actions=A duplicates_suppressed=S duplicate_actions=D lost=L divergence=V`
//! and the exit code is 0 only when D, L and V are 0.

mod broker;
mod procs;
mod proxy;
mod verdict;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use unicron_codec::KafkaConfig;

use crate::procs::Service;

/// Simulated seconds per real second.
const SPEED: f64 = 30.0;
/// Real seconds of skew between partitions the detector allows.
const LATENESS_REAL_S: f64 = 10.0;
/// Fewest real seconds between two planner kills.
const MIN_KILL_GAP_S: f64 = 12.0;
/// How long planner-a is frozen with SIGSTOP: past its 6 s session.
const PAUSE_S: f64 = 20.0;
/// The share of the run in which planners are killed.
const KILL_WINDOW: f64 = 0.8;

#[derive(Debug, Parser)]
#[command(
    name = "unicron-chaos",
    about = "Kill unicron's services while they work; check nothing is lost or done twice."
)]
struct Args {
    /// Real minutes the simulated cluster runs.
    #[arg(long, default_value_t = 6.0)]
    minutes: f64,
    /// Planner SIGKILLs, at least 12 s apart in the first 80% of the run
    /// (20 kills need 5 minutes); fewer only when the run is too short.
    #[arg(long, default_value_t = 20)]
    kills: u32,
    /// Seed of the kill schedule and of the simulation.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The unicron binary (default: next to this one).
    #[arg(long, value_name = "PATH")]
    unicron: Option<PathBuf>,
    /// Apache Kafka's jars (default: $UNICRON_KAFKA_LIBS, else where
    /// `./dev setup test` puts them).
    #[arg(long, value_name = "DIR")]
    kafka_libs: Option<PathBuf>,
    /// No broker faults (leader kill, rolling restart): services only.
    #[arg(long)]
    no_broker_faults: bool,
    /// Give every consumer a static group.instance.id, as StatefulSet pods
    /// do (docs/operations.md).
    #[arg(long)]
    static_members: bool,
    /// Keep configuration, logs and the broker's storage here.
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(&args) {
        Ok(clean) if clean => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// A small seeded generator for the kill schedule (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [lo, hi).
    fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One failure of each severity, spread over the first 60% of the run, on
/// nodes far apart; the rest of the run is for recovery.
fn write_trace(path: &Path, sim_s: f64) -> anyhow::Result<usize> {
    let kinds = [
        "nccl_timeout",
        "cuda_error",
        "ecc_error",
        "lost_connection",
        "task_hang",
    ];
    let count = ((sim_s * 0.6 - 300.0) / 600.0).clamp(1.0, 40.0) as usize;
    let mut text = String::from("time_s,node,kind\n");
    for i in 0..count {
        let time = 300.0 + i as f64 * (sim_s * 0.6 - 300.0) / count as f64;
        let node = (i * 5 + 1) % 16;
        text.push_str(&format!(
            "{time:.0},node-{node:03},{}\n",
            kinds[i % kinds.len()]
        ));
    }
    std::fs::write(path, text)?;
    Ok(count)
}

fn run(args: &Args) -> anyhow::Result<bool> {
    let unicron = match &args.unicron {
        Some(path) => path.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("locating the unicron binary")?
            .join("unicron"),
    };
    anyhow::ensure!(
        unicron.is_file(),
        "--unicron: {} not found",
        unicron.display()
    );
    let kafka_libs = args
        .kafka_libs
        .clone()
        .or_else(unicron_bus::testing::kafka::kafka_libs)
        .context("--kafka-libs: no Apache Kafka jars (./dev setup test fetches them)")?;
    let scratch;
    let work = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => {
            scratch = tempfile::Builder::new()
                .prefix("unicron-chaos-")
                .tempdir()?;
            scratch.path().to_path_buf()
        }
    };
    let logs = work.join("logs");
    std::fs::create_dir_all(&logs)?;
    println!("chaos: work directory {}", work.display());

    let cluster = broker::start(&kafka_libs, &work)?;
    let brokers = cluster.bootstrap_servers();
    println!(
        "chaos: Apache Kafka {}, brokers {} on {brokers} (logs in {})",
        unicron_bus::testing::kafka::KAFKA_VERSION,
        cluster
            .node_ids()
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
        cluster.dir().display()
    );

    let key = work.join("planner.key");
    let generated = Command::new(&unicron)
        .args(["keys", "generate", "--out"])
        .arg(&key)
        .output()?;
    anyhow::ensure!(generated.status.success(), "unicron keys generate failed");
    let public = String::from_utf8_lossy(&generated.stdout)
        .trim()
        .strip_prefix("public key: ")
        .context("unicron keys generate printed no public key")?
        .to_string();

    let sim_s = args.minutes * 60.0 * SPEED;
    let trace = work.join("trace.csv");
    let planned = write_trace(&trace, sim_s)?;
    let sim_addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let trap = Arc::new(proxy::Trap::default());
    let relay = proxy::start(sim_addr, trap.clone())?;
    let config = work.join("unicron.toml");
    std::fs::write(
        &config,
        format!(
            r#"[kafka]
brokers = "{brokers}"
# A killed member holds the group until its session times out: keep that
# short (Kafka's own floor is 6 s) and heartbeat often, so a 6-minute run
# sees many takeovers. Production keeps the services' 10 s.
session.timeout.ms = 6000
heartbeat.interval.ms = 1000
[metrics]
enabled = false
[status]
enabled = false
[planner]
key_id = "chaos"
signing_key_file = "{key}"
# The trace puts a SEV1 on one of 16 nodes every 10-20 simulated minutes,
# far above real rates; the default blast radius (one isolation an hour
# here) would refuse some, and chaos judges recovery, not that limit
# (the planner's tests do).
[planner.tuning]
max_isolations_per_hour = 100
[executor]
cluster = "sim"
state_dir = "{work}/executor"
[executor.public_keys]
chaos = "{public}"
[executor.backend]
kind = "simulator"
url = "http://{relay}/actions"
# Event time runs 30x faster than real time here, so the detector's
# 1 s of allowed lateness would be 33 ms of real skew between partitions.
# Moving a partition's leadership (the rolling restart) stalls its
# producers for up to 3 s of real time on a loaded 2-core machine: 90 s of
# event time in which the other partitions' records make a node look
# silent, where replay (event-time order) finds it alive. The detector's
# outage hold covers a broker that vanishes, not a clean leader move, so
# the scenario allows 10 s of real skew (docs/chaos.md).
[detector.tuning]
allowed_lateness_s = {lateness}
[sim]
seed = {seed}
speed = {SPEED}
trace = "{trace}"
listen = "{sim_addr}"
"#,
            key = key.display(),
            lateness = LATENESS_REAL_S * SPEED,
            work = work.display(),
            seed = args.seed,
            trace = trace.display(),
        ),
    )?;
    let config_arg = config.to_str().context("work directory is not UTF-8")?;

    let created = Command::new(&unicron)
        .args(["--config", config_arg, "topics", "create"])
        .output()?;
    anyhow::ensure!(
        created.status.success(),
        "topics create: {}",
        String::from_utf8_lossy(&created.stderr)
    );

    let service = |name: &str, sub: &[&str]| {
        let mut all = vec!["--config", config_arg];
        all.extend_from_slice(sub);
        Service::new(name, &unicron, &all, &logs)
    };
    // With --static-members each consumer has a stable group.instance.id,
    // as StatefulSet pods do (docs/operations.md).
    let member = |service: Service, id: &str| {
        if args.static_members {
            service.env("UNICRON_KAFKA__GROUP__INSTANCE__ID", id)
        } else {
            service
        }
    };
    let mut detector = member(service("detector", &["detector"]), "detector");
    let mut planners = [
        member(
            service("planner-a", &["planner"]).env(
                "UNICRON_PLANNER__STATE_DIR",
                format!("{}/planner-a", work.display()),
            ),
            "planner-a",
        ),
        member(
            service("planner-b", &["planner"]).env(
                "UNICRON_PLANNER__STATE_DIR",
                format!("{}/planner-b", work.display()),
            ),
            "planner-b",
        ),
    ];
    let mut executor = member(service("executor", &["executor"]), "executor-sim");
    let duration = format!("{}s", (args.minutes * 60.0).round() as u64);
    let summary_path = work.join("summary.json");
    let summary_arg = summary_path
        .to_str()
        .context("work directory is not UTF-8")?;
    let mut sim = service(
        "sim",
        &[
            "sim",
            "--duration",
            &duration,
            "--summary-json",
            summary_arg,
        ],
    );
    detector.start()?;
    for planner in &mut planners {
        planner.start()?;
    }
    trap.victim.store(executor.start()?, Ordering::SeqCst);
    sim.start()?;
    println!(
        "chaos: {planned} failures planned over {:.0} simulated minutes; {} planner kills at least",
        sim_s / 60.0,
        args.kills
    );

    // The schedule, in seconds from now.
    let total = args.minutes * 60.0;
    let mut rng = Rng(args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    // Kills in the first 80%; the rest of the run is for recovery. At
    // least 12 s apart: the group must settle between kills (a killed
    // member holds its partitions for its 6 s session, then the group
    // rebalances), or no planner ever owns a partition long enough to
    // decide, and the run proves nothing.
    let kill_window = total * KILL_WINDOW;
    let gap = (kill_window / f64::from(args.kills.max(1))).max(MIN_KILL_GAP_S);
    // Intervals never exceed `gap`, so the run reaches `--kills` whenever
    // the gap allows it.
    let mut next_kill = rng.between(gap * 0.5, gap);
    let traps = [total * 0.3, total * 0.5];
    let mut armed = 0;
    let started = Instant::now();
    // The broker faults run on their own thread; their lines come back
    // here to be printed in order with the driver's.
    let (said, heard) = std::sync::mpsc::channel();
    let mut faults = None;
    let mut cluster = Some(cluster);
    if !args.no_broker_faults {
        let schedule = broker::Schedule {
            kill_leader_at: total * 0.35,
            topic: KafkaConfig::default().topic("failures"),
            rolling_restart_at: total * 0.5,
        };
        faults = Some(broker::inject(
            cluster.take().expect("the cluster"),
            schedule,
            started,
            said,
        ));
    }
    let (rebalance_from, rebalance_until) = (total * 0.6, total * 0.6 + 25.0);
    // planner-a frozen (SIGSTOP) past its 6 s session: the group gives its
    // partitions to planner-b; then it resumes with what it held, a zombie
    // until it hears of the rebalance. No command may act twice.
    let (pause_from, pause_until) = (total * 0.7, total * 0.7 + PAUSE_S);
    let mut paused = false;
    let mut kills = 0u32;
    let mut crashes = Vec::new();
    let mut trapped = 0;
    while sim.running() {
        std::thread::sleep(Duration::from_millis(100));
        let now = started.elapsed().as_secs_f64();
        anyhow::ensure!(
            now < total + 180.0,
            "the simulator did not end within 3 minutes of its duration"
        );
        if !paused && now >= pause_from && now < pause_until && planners[0].running() {
            println!("chaos: pausing planner-a (SIGSTOP) for {PAUSE_S:.0} s, past its session");
            planners[0].signal("STOP");
            paused = true;
        }
        if paused && now >= pause_until {
            planners[0].signal("CONT");
            paused = false;
            println!("chaos: planner-a resumed (SIGCONT)");
        }
        if now >= next_kill && now < kill_window && !paused {
            // Either planner at random; the one that runs when the other is
            // held down or restarting. None running: try again shortly.
            let first = (rng.next() % 2) as usize;
            if let Some(which) = [first, 1 - first]
                .into_iter()
                .find(|&i| planners[i].running())
            {
                planners[which].kill9();
                kills += 1;
                std::thread::sleep(Duration::from_secs_f64(rng.between(0.2, 2.0)));
                planners[which].start()?;
                next_kill = now + rng.between(MIN_KILL_GAP_S.max(gap * 0.85), gap);
            }
        }
        if armed < traps.len() && now >= traps[armed] {
            trap.arm();
            armed += 1;
        }
        for line in heard.try_iter() {
            println!("{line}");
        }
        if now >= rebalance_from && now < rebalance_until && planners[1].running() {
            println!(
                "chaos: stopping planner-b for {:.0} s (rebalance)",
                rebalance_until - now
            );
            planners[1].stop();
        }
        if now >= rebalance_until && !planners[1].running() {
            planners[1].start()?;
        }
        // The trap kills the executor; anything else that ends is a crash.
        if !executor.running() {
            let fired = trap.fired.load(Ordering::SeqCst);
            if fired == trapped {
                crashes.push(executor.name.clone());
            }
            trapped = fired;
            executor.reap();
            trap.victim.store(executor.start()?, Ordering::SeqCst);
        }
        let in_rebalance = (rebalance_from..rebalance_until).contains(&now);
        let [a, b] = &mut planners;
        for s in [&mut detector, a, b] {
            let held_down = in_rebalance && s.name == "planner-b";
            if !held_down && !s.running() {
                crashes.push(s.name.clone());
                s.start()?;
            }
        }
    }
    sim.wait();
    // Let the last results and decisions land, then stop cleanly.
    std::thread::sleep(Duration::from_secs(10));
    trap.victim.store(0, Ordering::SeqCst);
    let [a, b] = &mut planners;
    for s in [&mut detector, a, b, &mut executor] {
        s.stop();
    }
    let executor_kills = trap.fired.load(Ordering::SeqCst);
    let (mut cluster, killed_leader, rolled) = match faults {
        Some(thread) => {
            let done = thread
                .join()
                .map_err(|_| anyhow::anyhow!("the broker fault thread panicked"))??;
            (done.cluster, done.killed_leader.is_some(), done.rolled)
        }
        None => (cluster.take().expect("the cluster"), false, 0),
    };
    for line in heard.try_iter() {
        println!("{line}");
    }
    println!(
        "chaos: {kills} planner kills, {executor_kills} executor kills after acting, leader broker killed {}, brokers rolled {rolled}",
        u8::from(killed_leader)
    );

    let summary: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&summary_path).context("the simulator wrote no summary")?,
    )?;
    let kafka = KafkaConfig::default();
    let verdict = verdict::judge(&kafka, &brokers, &summary)?;
    let report = work.join("replay.json");
    let replay = Command::new(&unicron)
        .args(["--config", config_arg, "replay", "--from-kafka", "--json"])
        .arg(&report)
        .output()?;
    let divergence = match std::fs::read(&report)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
    {
        Some(r) => {
            // What replay found first, for whoever reads a failed run.
            for part in ["decisions", "failures"] {
                let first = &r[part]["first_divergence"];
                if !first.is_null() {
                    println!("chaos: replay: first {part} divergence: {first}");
                }
                let missing = r[part]["missing_inputs"].as_u64().unwrap_or(0);
                if missing > 0 {
                    println!("chaos: replay: {missing} {part} whose inputs are not in the log");
                }
            }
            r["diverged"].as_u64().unwrap_or(u64::MAX)
        }
        None => {
            eprintln!("replay failed: {}", String::from_utf8_lossy(&replay.stderr));
            u64::MAX
        }
    };
    cluster.shutdown();
    for finding in &verdict.findings {
        println!("chaos: {finding}");
    }
    if !crashes.is_empty() {
        // Not a verdict item: a supervisor restarts them, and D, L and V
        // say whether anything was lost; but worth a look in the logs.
        println!("chaos: services that ended on their own (restarted): {crashes:?}");
    }
    println!(
        "chaos: kills={} failures={} actions={} duplicates_suppressed={} duplicate_actions={} lost={} divergence={}",
        kills + executor_kills as u32,
        verdict.failures,
        verdict.actions,
        verdict.duplicates_suppressed,
        verdict.duplicate_actions,
        verdict.lost,
        divergence
    );
    Ok(verdict.duplicate_actions == 0 && verdict.lost == 0 && divergence == 0)
}
