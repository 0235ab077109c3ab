//! Running the services of the other crates from the binary: `unicron
//! planner` and `unicron detector` for deployments, and the helpers `unicron up` uses.

use std::net::SocketAddr;

use anyhow::{Context, bail};
#[cfg(feature = "simulator")]
use unicron_core::signing::CommandSigner;

use crate::config::Config;
use crate::usage::UsageError;

/// Ctrl-C (SIGINT) or SIGTERM, which Kubernetes, Docker and systemd send
/// to stop a service: either one shuts the service down cleanly. Signals
/// are caught from [`Stop::listen`] on, so listen before announcing that
/// the service runs; one that comes later is never missed.
pub struct Stop {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Stop {
    pub fn listen() -> anyhow::Result<Stop> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Stop {
                interrupt: signal(SignalKind::interrupt()).context("catching SIGINT")?,
                terminate: signal(SignalKind::terminate()).context("catching SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Stop {})
    }

    /// Completes at the first SIGINT or SIGTERM: a service's shutdown.
    pub async fn signalled(mut self) {
        self.wait().await
    }

    /// Until the first SIGINT or SIGTERM (cancel-safe).
    pub async fn wait(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// What every deployed service command starts with: signals caught
/// (before anything is announced) and `kafka.brokers`, which it requires.
fn deployed(config: &Config, command: &str) -> anyhow::Result<(Stop, String)> {
    let stop = Stop::listen()?;
    let Some(brokers) = config.kafka.brokers.clone() else {
        bail!(
            "kafka.brokers: required for `unicron {command}` (`unicron up` runs the loop on an embedded broker)"
        );
    };
    Ok((stop, brokers))
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `metrics.listen` unless
/// disabled; the endpoint lives as long as the returned value. With
/// `may_move` (a local demo), a busy built-in default port gives way to a
/// free one; a configured address stays strict.
/// `--brokers`, else `kafka.brokers`: where a watcher publishes.
pub fn brokers(config: &Config, given: &Option<String>) -> Result<String, UsageError> {
    given
        .clone()
        .or_else(|| config.kafka.brokers.clone())
        .ok_or_else(|| UsageError("--brokers: required (or kafka.brokers)".into()))
}

pub async fn serve_metrics(
    config: &Config,
    may_move: bool,
) -> anyhow::Result<Option<unicron_bus::metrics::MetricsServer>> {
    if !config.metrics.enabled {
        return Ok(None);
    }
    let default = crate::config::MetricsConfig::default().listen;
    let (listen, moved) = listen_or_free(
        config.metrics.listen,
        may_move && config.metrics.listen == default,
    );
    // A taken or invalid address is the operator's to fix: exit 2.
    let server = unicron_bus::metrics::serve(listen)
        .await
        .map_err(|e| crate::usage::UsageError(format!("metrics.listen: {e}")))?;
    println!(
        "metrics: http://{}/metrics{}",
        server.addr,
        moved_note(moved)
    );
    Ok(Some(server))
}

/// Starts the status page if `args` and `[status]` ask for it; `may_move`
/// as for [`serve_metrics`], and only when no address was given. The
/// explain index goes under `run_dir` (a run's state directory) unless
/// `status.index_dir` is set.
pub async fn serve_status(
    config: &Config,
    args: &crate::status::StatusArgs,
    brokers: &str,
    may_move: bool,
    run_dir: Option<&std::path::Path>,
) -> anyhow::Result<Option<crate::status::StatusServer>> {
    let Some(listen) = args.listen(&config.status) else {
        return Ok(None);
    };
    let default = crate::config::StatusConfig::default().listen;
    let (listen, moved) = listen_or_free(
        listen,
        may_move && args.status.is_none() && listen == default,
    );
    let index_dir = match run_dir {
        Some(dir)
            if config.status.index_dir == crate::config::StatusConfig::default().index_dir =>
        {
            dir.join("status")
        }
        _ => config.status.index_dir.clone(),
    };
    let gate = unicron_access::Gate::load("status.tokens", &config.status.tokens, listen)
        .map_err(|e| crate::usage::UsageError(e.to_string()))?;
    // Said on the line an operator reads first: who can open the page.
    let access = if gate.is_open() {
        "no tokens: loopback only".to_string()
    } else {
        format!("{} tokens", gate.len())
    };
    let server = crate::status::start(
        listen,
        gate,
        &config.kafka,
        brokers,
        config.planner.tuning.clone(),
        &index_dir,
    )
    .await?;
    let note = match moved {
        Some(port) => format!("port {port} is in use; {access}"),
        None => access,
    };
    println!("status: http://{}/ ({note})", server.addr);
    Ok(Some(server))
}

/// `addr`, or, when `may_move` and another program holds it, a free port
/// on the same interface (the port that was taken comes back too).
fn listen_or_free(addr: SocketAddr, may_move: bool) -> (SocketAddr, Option<u16>) {
    if !may_move {
        return (addr, None);
    }
    match std::net::TcpListener::bind(addr) {
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            (SocketAddr::new(addr.ip(), 0), Some(addr.port()))
        }
        // Free (released again at once), or an error the real bind reports.
        _ => (addr, None),
    }
}

fn moved_note(moved: Option<u16>) -> String {
    moved.map_or(String::new(), |port| format!(" (port {port} is in use)"))
}

/// `unicron remote-write`'s flags, over `[remote_write]`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RemoteWriteArgs {
    /// Listen on this address (default `remote_write.listen`, 127.0.0.1:9201).
    // A string, parsed by the command: a bad one is then one line, exit 2.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
}

/// `unicron planner`: the planner against an existing Kafka, until Ctrl-C.
pub async fn planner(config: &Config, status: &crate::status::StatusArgs) -> anyhow::Result<()> {
    let (stop, brokers) = deployed(config, "planner")?;
    let signer = config
        .planner
        .signer()
        .map_err(|e| crate::usage::UsageError(format!("config: {e}")))?;
    println!(
        "planner: group {} on {brokers}, key {}",
        config.planner.group_id, config.planner.key_id
    );
    let _metrics = serve_metrics(config, false).await?;
    let _status = serve_status(config, status, &brokers, false, None).await?;
    unicron_planner::run(
        &config.kafka,
        &brokers,
        &config.planner,
        signer,
        stop.signalled(),
    )
    .await
    .context("planner")
}

/// `unicron detector`: the detector against an existing Kafka, until Ctrl-C.
pub async fn detector(config: &Config) -> anyhow::Result<()> {
    let (stop, brokers) = deployed(config, "detector")?;
    let detector = config
        .detector
        .build()
        .map_err(|e| crate::usage::UsageError(format!("config: {e}")))?;
    println!(
        "detector: group {} on {brokers}, {} external input(s)",
        config.detector.group_id,
        config.detector.inputs.len()
    );
    let _metrics = serve_metrics(config, false).await?;
    unicron_detector::run(&config.kafka, &brokers, detector, stop.signalled())
        .await
        .context("detector")
}

/// `unicron ingress`: clusters' own topics into the shared ones, until Ctrl-C.
pub async fn ingress(config: &Config) -> anyhow::Result<()> {
    let (stop, brokers) = deployed(config, "ingress")?;
    config
        .ingress
        .validate()
        .map_err(|e| crate::usage::UsageError(format!("config: {e}")))?;
    if !config.kafka.cluster_topics {
        return Err(crate::usage::UsageError(
            "config: kafka.cluster_topics: must be true for `unicron ingress` (clusters' own topics are what it reads)".into(),
        )
        .into());
    }
    println!(
        "ingress: group {} on {brokers}, clusters' own topics {}in.<cluster>",
        config.ingress.group_id, config.kafka.topic_prefix
    );
    let _metrics = serve_metrics(config, false).await?;
    unicron_ingress::run(&config.kafka, &brokers, &config.ingress, stop.signalled())
        .await
        .context("ingress")
}

#[cfg(feature = "simulator")]
/// The configured signer, or a fresh development key when none is
/// configured (embedded mode only; the caller says so on its output).
pub fn signer_or_dev_key(config: &Config) -> anyhow::Result<(CommandSigner, bool)> {
    if config.planner.signing_key_file.is_some() {
        return Ok((config.planner.signer()?, false));
    }
    let seed = random_seed()?;
    Ok((CommandSigner::from_seed("dev", seed), true))
}

/// 32 bytes from the operating system's random source, for a new key.
pub fn random_seed() -> anyhow::Result<[u8; 32]> {
    use std::io::Read;
    let mut seed = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut seed))
        .context("reading /dev/urandom for a signing key")?;
    Ok(seed)
}

/// `unicron executor`: one cluster's executor against an existing Kafka.
pub async fn executor(config: &Config) -> anyhow::Result<()> {
    let (stop, brokers) = deployed(config, "executor")?;
    // A setting the executor cannot start without is the operator's to fix.
    let executor = config
        .executor
        .build()
        .map_err(|e| crate::usage::UsageError(format!("config: {e}")))?;
    println!(
        "executor: cluster {} as {}, group {} on {brokers}",
        config.executor.cluster,
        config.executor.name,
        config.executor.group()
    );
    let _metrics = serve_metrics(config, false).await?;
    unicron_executor::run(&config.kafka, &brokers, executor, stop.signalled())
        .await
        .context("executor")
}

#[cfg(feature = "simulator")]
/// `unicron sim`: the simulated cluster against an existing Kafka, for
/// trying deployed services; prints the ground truth at the end.
pub async fn sim(
    config: &Config,
    duration: Option<std::time::Duration>,
    summary_json: Option<std::path::PathBuf>,
) -> anyhow::Result<()> {
    let (mut stop, brokers) = deployed(config, "sim")?;
    let _metrics = serve_metrics(config, false).await?;
    let sim_config = config.sim.clone();
    let end_s = duration.map(|d| d.as_secs_f64() * sim_config.speed);
    let running = unicron_simulator::start(
        &config.kafka,
        &brokers,
        sim_config.clone(),
        end_s,
        Vec::new(),
    )
    .await
    .context("simulator")?;
    println!(
        "sim: cluster {}, {} nodes, {} jobs, seed {}, speed {}x, actions at http://{}/actions, on {brokers}",
        sim_config.cluster,
        sim_config.nodes,
        sim_config.jobs,
        sim_config.seed,
        sim_config.speed,
        running.addr
    );
    tokio::select! {
        () = running.ended(), if end_s.is_some() => {}
        () = stop.wait() => {}
    }
    let summary = running.stop().await.context("simulator")?;
    print!("{}", summary.table());
    if let Some(path) = summary_json {
        std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `unicron archiver`: every topic into the Avro archive, until Ctrl-C.
pub async fn archiver(config: &Config) -> anyhow::Result<()> {
    let (stop, brokers) = deployed(config, "archiver")?;
    println!(
        "archiver: group {} on {brokers} into {}",
        config.archiver.group_id,
        config.archiver.dir.display()
    );
    let _metrics = serve_metrics(config, false).await?;
    unicron_archiver::run(&config.kafka, &brokers, &config.archiver, stop.signalled())
        .await
        .context("archiver")
}

/// `unicron remote-write`: Prometheus remote write into the telemetry
/// topic, until Ctrl-C.
pub async fn remote_write(config: &Config, args: &RemoteWriteArgs) -> anyhow::Result<()> {
    let (stop, brokers) = deployed(config, "remote-write")?;
    let mut settings = config.remote_write.clone();
    let what = match &args.listen {
        Some(text) => {
            settings.listen = parse_listen(text)?;
            "--listen"
        }
        None => "remote_write.listen",
    };
    let receiver = unicron_remote_write::Receiver::bind(&config.kafka, &brokers, &settings)
        .await
        .map_err(|e| match e {
            // A taken or unusable address is the operator's to fix: exit 2.
            unicron_remote_write::RemoteWriteError::Listen { .. } => {
                anyhow::Error::new(crate::usage::UsageError(format!("{what}: {e}")))
            }
            other => anyhow::Error::new(other).context("remote-write"),
        })?;
    println!(
        "remote-write: http://{}{} into {} on {brokers}",
        receiver.local_addr(),
        unicron_remote_write::PATH,
        receiver.telemetry_topic()
    );
    let _metrics = serve_metrics(config, false).await?;
    receiver
        .serve(stop.signalled())
        .await
        .context("remote-write")
}

/// `HOST:PORT` of `--listen`, a name resolved to its first address.
fn parse_listen(text: &str) -> anyhow::Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let usage = |why: String| crate::usage::UsageError(format!("--listen `{text}`: {why}"));
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let mut found = text
        .to_socket_addrs()
        .map_err(|e| usage(format!("not an address HOST:PORT ({e})")))?;
    Ok(found
        .next()
        .ok_or_else(|| usage("resolves to no address".into()))?)
}
