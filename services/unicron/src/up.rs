//! `unicron up`: the whole self-healing loop on one machine. It hosts the
//! embedded broker (or connects to `--brokers`), creates the topics, and
//! runs detector, planner, executor and the simulated cluster together,
//! with a live progress line and a summary at the end.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use unicron_bus::EmbeddedBroker;
use unicron_bus::admin::{TopicReport, TopicStatus, ensure_topics};
use unicron_codec::Topology;
use unicron_executor::{BackendSettings, ExecutorSettings, SimulatorSettings};
use unicron_simulator::config::DEMO_MTBF_S;
use unicron_simulator::{Arrivals, SimConfig, Summary};

use crate::config::Config;
use crate::service_set::{ServiceSet, StopOrder};

/// Partitions of an external input topic `up` creates on its embedded
/// broker, so a second detector instance would have some to take.
const INPUT_PARTITIONS: i32 = 3;

/// Real time the services get, after the simulation ends, to finish what
/// is in flight before the summary is taken.
const SETTLE: Duration = Duration::from_secs(2);

/// How long each service gets to stop once told to.
const STOP_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Use this Kafka instead of the embedded broker.
    #[arg(long, value_name = "HOST:PORT")]
    pub brokers: Option<String>,
    /// Stop after this long (e.g. 90s, 10m, 2h) of real time instead of at Ctrl-C.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Option<Duration>,
    /// Write the end-of-run summary as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub summary_json: Option<PathBuf>,
    /// Run the services without the simulator (external producers feed them).
    #[arg(long)]
    pub no_sim: bool,
    /// Simulated nodes (8 GPUs each by default); overrides sim.nodes.
    #[arg(long, value_name = "N")]
    pub sim_nodes: Option<u32>,
    /// Simulated training jobs; overrides sim.jobs.
    #[arg(long, value_name = "N")]
    pub sim_jobs: Option<u32>,
    /// Simulated seconds per real second; overrides sim.speed.
    #[arg(long, value_name = "X")]
    pub speed: Option<f64>,
    /// Seed of the simulation: the same seed gives the same run; overrides sim.seed.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Inject failures from this CSV (time_s,node,kind) instead of the taxonomy mix, or replay
    /// a day of a real trace (tools/traces/infinitehbd/fault_trace.json).
    #[arg(long, value_name = "FILE", conflicts_with = "paper_rate")]
    pub trace: Option<PathBuf>,
    /// The day of a real --trace to replay, from 0 (default: its busiest); overrides
    /// sim.trace_day.
    #[arg(long, value_name = "N", requires = "trace")]
    pub trace_day: Option<u32>,
    /// Inject random failures at the paper setting's rate (one per 256
    /// GPU-hours, assumed) instead of the demonstration's failure every four
    /// simulated minutes (30x that rate on 128 GPUs).
    #[arg(long)]
    pub paper_rate: bool,
    /// Service logs on the terminal instead of the run directory's unicron.log.
    #[arg(short, long)]
    pub verbose: bool,
    /// Archive every topic into this directory (default: a new run-<time>
    /// directory under `archiver.dir` on the embedded broker).
    #[arg(long, value_name = "DIR", conflicts_with = "no_archive")]
    pub archive: Option<PathBuf>,
    /// Do not run the archiver.
    #[arg(long)]
    pub no_archive: bool,
    #[command(flatten)]
    pub status: crate::status::StatusArgs,
}

pub async fn run(config: &Config, args: UpArgs) -> anyhow::Result<()> {
    let mut topology = Topology::builtin();
    let prefix = &config.kafka.topic_prefix;
    let brokers = args
        .brokers
        .clone()
        .or_else(|| config.kafka.brokers.clone());
    let sim_config = sim_config(config, &args)?;
    let config = &with_isolation_limit(config, sim_config.as_ref());
    // With clusters' own topics, the simulated cluster's and the
    // executor's are made with the rest, and the ingress runs.
    if config.kafka.cluster_topics {
        let mut clusters = vec![config.executor.cluster.clone()];
        clusters.extend(sim_config.as_ref().map(|s| s.cluster.clone()));
        clusters.retain(|c| !c.is_empty());
        clusters.dedup();
        for cluster in clusters {
            unicron_codec::check_cluster_id(&cluster)
                .map_err(|why| crate::usage::UsageError(format!("config: cluster {why}")))?;
            topology
                .topics
                .extend(Topology::builtin().of_cluster(&cluster).topics);
        }
    }
    let mut signals = crate::services::Stop::listen()?;
    let run_dir = run_dir(config, &args, brokers.is_none());
    std::fs::create_dir_all(&run_dir)
        .with_context(|| format!("creating the run directory {}", run_dir.display()))?;
    write_run_tuning(config, &run_dir)?;
    let log_file = run_dir.join("unicron.log");
    if !args.verbose {
        crate::logging::write_to_file(&log_file)
            .with_context(|| format!("opening {}", log_file.display()))?;
    }
    if config.metrics.enabled {
        // Before any service starts: what is recorded earlier is lost.
        unicron_bus::metrics::install()?;
    }

    // Kept alive until the end of the run; dropping it stops the broker.
    let mut _embedded = None;
    let (bootstrap, reports): (String, Vec<TopicReport>) = match brokers {
        Some(brokers) => {
            // Unreachable brokers are a bad argument: one line, exit 2.
            let named = if args.brokers.is_some() {
                "--brokers"
            } else {
                "kafka.brokers"
            };
            let reports = ensure_topics(&config.kafka, &brokers, &topology)
                .await
                .map_err(|e| {
                    crate::usage::UsageError(format!(
                        "{named} {brokers}: cannot create unicron's topics there: {}",
                        crate::one_line(&anyhow::Error::from(e))
                    ))
                })?;
            (brokers, reports)
        }
        None => {
            let broker = EmbeddedBroker::start(config.embedded.brokers)
                .context("starting the embedded broker")?;
            let reports = broker.ensure_topics(&topology, prefix)?;
            // The detector's external inputs too: this broker is unicron's
            // own, and a topic created after the detector joined would be
            // read only after a rebalance, which the embedded broker holds
            // for the session timeout less a second. On a shared Kafka the
            // input topics belong to the pipeline; the detector joins them
            // within `new_topic_check_s` of their creation.
            for input in &config.detector.inputs {
                broker.create_topic(&input.topic, INPUT_PARTITIONS)?;
            }
            let bootstrap = broker.bootstrap_servers().to_string();
            _embedded = Some(broker);
            (bootstrap, reports)
        }
    };
    // First line of output, for other tools (kcat -b ...) to connect.
    println!("broker: {bootstrap}");
    let created = reports
        .iter()
        .filter(|r| r.status == TopicStatus::Created)
        .count();
    println!(
        "topics: {} ({} created, {} existed)",
        reports.len(),
        created,
        reports.len() - created
    );

    let scratch = tempfile::Builder::new().prefix("unicron-up-").tempdir()?;
    let mut services = ServiceSet::default();

    // Planner, on a state directory of this run unless one is configured.
    let (signer, dev_key) = crate::services::signer_or_dev_key(config)?;
    let mut planner_settings = config.planner.clone();
    if planner_settings.state_dir == unicron_planner::PlannerSettings::default().state_dir {
        planner_settings.state_dir = scratch.path().join("planner");
    }
    let public = hex::encode(signer.verifying_key().to_bytes());
    let key_id = signer.key_id.clone();
    // What an agent needs to join this run: `unicron agent --brokers
    // "$(cat RUN/brokers)" --planner-key RUN/planner.pub ...`.
    for (name, text) in [
        ("brokers", format!("{bootstrap}\n")),
        ("planner.pub", format!("{key_id} {public}\n")),
    ] {
        let path = run_dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let (kafka, at) = (config.kafka.clone(), bootstrap.clone());
    services.spawn("planner", StopOrder::WithTheRest, |shutdown| async move {
        Ok(unicron_planner::run(&kafka, &at, &planner_settings, signer, shutdown.wait()).await?)
    });
    println!(
        "planner: policy {}, isolations at most {} an hour per cluster, signing key {}{}",
        config.planner.tuning.policy.as_str(),
        config
            .planner
            .tuning
            .max_isolations_per_hour
            .map_or("2% of the nodes".to_string(), |n| n.to_string()),
        public,
        if dev_key {
            " (development key generated for this run)"
        } else {
            ""
        }
    );

    if config.kafka.cluster_topics {
        let (kafka, at, settings) = (
            config.kafka.clone(),
            bootstrap.clone(),
            config.ingress.clone(),
        );
        services.spawn("ingress", StopOrder::WithTheRest, |shutdown| async move {
            Ok(unicron_ingress::run(&kafka, &at, &settings, shutdown.wait()).await?)
        });
        println!("ingress: clusters' own topics {prefix}in.<cluster> into the shared ones");
    }

    let detector = config.detector.build()?;
    let rule_count = detector.rules().len();
    let (kafka, at) = (config.kafka.clone(), bootstrap.clone());
    services.spawn("detector", StopOrder::WithTheRest, |shutdown| async move {
        Ok(unicron_detector::run(&kafka, &at, detector, shutdown.wait()).await?)
    });
    println!(
        "detector: {} rules{}",
        rule_count,
        config
            .detector
            .inputs
            .iter()
            .map(|i| format!(", {} ({})", i.topic, i.format.name()))
            .collect::<String>()
    );

    // The simulated cluster, then its executor pointed at it.
    let sim = match &sim_config {
        Some(sim_config) => {
            let end_s = args.duration.map(|d| d.as_secs_f64() * sim_config.speed);
            let sim = unicron_simulator::start(
                &config.kafka,
                &bootstrap,
                sim_config.clone(),
                end_s,
                vec![unicron_detector::SERVICE],
            )
            .await
            .context("simulator")?;
            Some(sim)
        }
        None => None,
    };
    let mut executor_settings = config.executor.clone();
    if executor_settings.state_dir == ExecutorSettings::default().state_dir {
        executor_settings.state_dir = scratch.path().join("executor");
    }
    executor_settings
        .public_keys
        .entry(key_id.clone())
        .or_insert(public.clone());
    // Acting for its own simulator: that cluster, and its address unless
    // another backend is configured.
    if let (Some(sim), Some(sim_config)) = (&sim, &sim_config) {
        executor_settings.cluster = sim_config.cluster.clone();
        if matches!(
            executor_settings.backend,
            None | Some(BackendSettings::Simulator(_))
        ) {
            executor_settings.backend = Some(BackendSettings::Simulator(SimulatorSettings {
                url: format!("http://{}/actions", sim.addr),
            }));
        }
    }
    if executor_settings.backend.is_some() {
        let executor = executor_settings.build().context("executor")?;
        println!(
            "executor: cluster {}, backend {}",
            executor_settings.cluster,
            executor.describe()
        );
        let (kafka, at) = (config.kafka.clone(), bootstrap.clone());
        services.spawn("executor", StopOrder::WithTheRest, |shutdown| async move {
            Ok(unicron_executor::run(&kafka, &at, executor, shutdown.wait()).await?)
        });
    } else {
        println!("executor: not started (no simulator; set executor.cluster and executor.backend)");
        println!(
            "agents: unicron agent --brokers {bootstrap} --planner-key {} ... (docs/agent.md)",
            run_dir.join("planner.pub").display()
        );
    }
    // A Slurm cluster's node state, when one is configured.
    if !config.slurm.cluster.is_empty() {
        config
            .slurm
            .validate()
            .map_err(|e| crate::usage::UsageError(format!("config: {e}")))?;
        println!(
            "slurm-watch: cluster {} every {}s",
            config.slurm.cluster, config.slurm.poll_interval_s
        );
        let (kafka, at, settings) = (
            config.kafka.clone(),
            bootstrap.clone(),
            config.slurm.clone(),
        );
        services.spawn(
            "slurm-watch",
            StopOrder::WithTheRest,
            |shutdown| async move {
                Ok(unicron_slurm::run_poller(&settings, &kafka, &at, shutdown.wait()).await?)
            },
        );
    }
    // A Kubernetes cluster's nodes, pods and workloads, when one is configured.
    if !config.kubernetes.cluster.is_empty() {
        config
            .kubernetes
            .validate()
            .map_err(|e| crate::usage::UsageError(format!("config: {e}")))?;
        println!(
            "kube-watch: cluster {}, namespaces {}",
            config.kubernetes.cluster,
            config.kubernetes.namespaces.join(",")
        );
        let (kafka, at, settings) = (
            config.kafka.clone(),
            bootstrap.clone(),
            config.kubernetes.clone(),
        );
        services.spawn(
            "kube-watch",
            StopOrder::WithTheRest,
            |shutdown| async move {
                Ok(
                    unicron_kubernetes::run_watcher(&settings, &kafka, &at, shutdown.wait())
                        .await?,
                )
            },
        );
    }
    if let (Some(sim), Some(c)) = (&sim, &sim_config) {
        println!(
            "sim: cluster {}, {} nodes x {} GPUs, {} jobs, seed {}, speed {}x, actions at http://{}/actions",
            c.cluster, c.nodes, c.gpus_per_node, c.jobs, c.seed, c.speed, sim.addr
        );
        println!(
            "sim: failures {}",
            c.trace_label().unwrap_or_else(|| {
                unicron_simulator::truth::rate_label(c.rate_vs_paper(), c.arrivals)
            })
        );
    }

    // The archiver: last to stop, so it has every record of the run (it
    // reads to the ends the partitions have when it is stopped).
    if !args.no_archive {
        let mut settings = config.archiver.clone();
        settings.dir = run_dir.clone();
        settings.validate().context("archiver")?;
        let (kafka, at) = (config.kafka.clone(), bootstrap.clone());
        services.spawn("archiver", StopOrder::Last, |shutdown| async move {
            Ok(unicron_archiver::run(&kafka, &at, &settings, shutdown.wait()).await?)
        });
        println!("archive: {}", run_dir.display());
    }

    let _metrics = crate::services::serve_metrics(config, true).await?;
    let status =
        crate::services::serve_status(config, &args.status, &bootstrap, true, Some(scratch.path()))
            .await?;
    if args.verbose {
        println!("logs: on this terminal");
    } else {
        println!("logs: {} (-v to show them here)", log_file.display());
    }
    std::io::stdout().flush().ok();

    let rate = sim_config.as_ref().map(SimConfig::rate_vs_paper);
    let outcome = crate::up_progress::watch(
        args.duration,
        sim.as_ref(),
        rate,
        &mut services,
        &mut signals,
    )
    .await;
    if outcome.is_ok()
        && let Some(sim) = &sim
        && sim.progress().ended
    {
        tokio::time::sleep(SETTLE).await;
    }
    let summary = match sim {
        Some(sim) => Some(sim.stop().await.context("simulator")?),
        None => None,
    };
    services.stop(STOP_GRACE).await?;
    if let Some(status) = status {
        status.stop().await;
    }
    outcome?;
    if let Some(summary) = summary {
        print!("{}", summary.table());
        if let Some(path) = &args.summary_json {
            write_summary(path, &summary)?;
            println!("summary written to {}", path.display());
        }
    }
    println!("stopped");
    Ok(())
}

/// The configuration of a run on the simulator: unless set, its isolation
/// limit is 2% of the nodes scaled by the simulated failure rate, so it
/// bounds the same share of failures as on a real cluster (16 nodes at 30x
/// the paper's rate would otherwise allow one isolation an hour; a real
/// trace's day folded onto the nodes scales it as much).
fn with_isolation_limit(config: &Config, sim: Option<&SimConfig>) -> Config {
    let mut config = config.clone();
    if let Some(sim) = sim
        && config.planner.tuning.max_isolations_per_hour.is_none()
    {
        let nodes = sim.nodes as f64 * sim.rate_vs_paper().max(sim.trace_fold());
        let limit = (nodes * unicron_core::planner::DEFAULT_ISOLATION_SHARE).ceil();
        config.planner.tuning.max_isolations_per_hour = Some(limit.max(1.0) as u32);
    }
    config
}

/// The run's planner and detector tuning, as `replay.toml` in its run
/// directory: `unicron replay --from-archive DIR` decides with it.
fn write_run_tuning(config: &Config, run_dir: &std::path::Path) -> anyhow::Result<()> {
    let mut planner = toml::Table::new();
    planner.insert(
        "tuning".into(),
        toml::Value::try_from(&config.planner.tuning)?,
    );
    let mut detector = toml::Table::new();
    detector.insert(
        "tuning".into(),
        toml::Value::try_from(&config.detector.tuning)?,
    );
    let mut table = toml::Table::new();
    table.insert("planner".into(), planner.into());
    table.insert("detector".into(), detector.into());
    let path = run_dir.join(crate::replay::RUN_TUNING);
    let text = format!(
        "# The tuning this run decided with; `unicron replay --from-archive` uses it\n# unless --config is given.\n{}",
        toml::to_string(&table)?
    );
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

/// The simulator's settings with the command line's overrides, or `None`
/// with `--no-sim`.
fn sim_config(config: &Config, args: &UpArgs) -> anyhow::Result<Option<SimConfig>> {
    if args.no_sim {
        return Ok(None);
    }
    let mut sim = config.sim.clone();
    if let Some(n) = args.sim_nodes {
        sim.nodes = n;
    }
    if let Some(n) = args.sim_jobs {
        sim.jobs = n;
    }
    if let Some(speed) = args.speed {
        sim.speed = speed;
    }
    if let Some(seed) = args.seed {
        sim.seed = seed;
    }
    if let Some(trace) = &args.trace {
        sim.trace = Some(trace.clone());
    }
    if let Some(day) = args.trace_day {
        sim.trace_day = Some(day);
    }
    if args.paper_rate {
        sim.mtbf_s = None;
        sim.arrivals = Arrivals::Poisson;
    } else if sim.trace.is_none() && sim.mtbf_s.is_none() {
        // The demonstration: every kind of recovery within the first minute.
        sim.mtbf_s = Some(DEMO_MTBF_S);
        sim.arrivals = Arrivals::Demo;
    }
    if sim.listen == SimConfig::default().listen {
        // A free port: several runs on one machine must not collide.
        sim.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    }
    sim.validate()
        .map_err(|e| crate::usage::UsageError(e.replace("sim.nodes", "--sim-nodes / sim.nodes")))?;
    sim.load_trace().map_err(crate::usage::UsageError)?;
    Ok(Some(sim))
}

/// Where a run keeps its log and, unless `--no-archive`, its archive:
/// `--archive DIR`; else a new `run-<time>` under `archiver.dir` on the
/// embedded broker (its offsets start at 0 each run); else `archiver.dir`.
fn run_dir(config: &Config, args: &UpArgs, embedded: bool) -> PathBuf {
    match &args.archive {
        Some(dir) => dir.clone(),
        None if embedded => {
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            config.archiver.dir.join(format!("run-{stamp}"))
        }
        None => config.archiver.dir.clone(),
    }
}

fn write_summary(path: &std::path::Path, summary: &Summary) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(summary).expect("summary serialises");
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// `90`, `90s`, `10m` or `2h`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like 90s, 10m or 2h"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("`{text}`: unit must be s, m or h")),
    };
    Ok(Duration::from_secs(seconds))
}
