//! Command-line surface. Each subcommand's work is in its own module.

use std::path::PathBuf;
#[cfg(feature = "simulator")]
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::config::Config;

/// unicron: a self-healing control plane for LLM training clusters.
#[derive(Debug, Parser)]
#[command(name = "unicron", version, about)]
pub struct Cli {
    /// Configuration file (TOML); `UNICRON_<SECTION>__<KEY>` variables override it.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect or create unicron's Kafka topics.
    Topics {
        #[command(subcommand)]
        command: TopicsCommand,
    },
    /// Make or inspect a planner signing key (see docs/operations.md for rotation).
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    #[cfg(feature = "simulator")]
    /// Run the whole loop on one machine: broker (embedded unless --brokers), topics, simulator, detector, planner, executor.
    Up(UpArgs),
    /// Run the planner service against `kafka.brokers` (needs planner.signing_key_file).
    Planner(StatusArgs),
    /// Run the detector service against `kafka.brokers`.
    Detector,
    /// Run the executor of `executor.cluster` against `kafka.brokers` (needs executor.cluster, .backend and .public_keys).
    Executor,
    /// Run a node agent: start and supervise the node's share of a training job's workers
    /// (torchrun's variables), report them, carry out the planner's commands for this node.
    Agent(crate::agent::AgentArgs),
    /// Watch a Slurm cluster: node state (down, not responding, drained by others, back) and
    /// job ends from scontrol/sinfo/squeue into the cluster topic, changes only.
    SlurmWatch(crate::slurm::SlurmWatchArgs),
    /// Run the archiver against `kafka.brokers`: every topic to Avro files in `archiver.dir`.
    Archiver,
    /// Receive Prometheus remote write (dcgm-exporter's series) on POST /api/v1/write and
    /// publish it to the telemetry topic of `kafka.brokers` (docs/remote-write.md).
    RemoteWrite(RemoteWriteArgs),
    #[cfg(feature = "simulator")]
    /// Run the simulated cluster against `kafka.brokers` until Ctrl-C or --duration.
    Sim {
        /// Stop after this much real time and print the summary.
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        duration: Option<Duration>,
        /// Write the ground-truth summary as JSON to this file at the end.
        #[arg(long, value_name = "FILE")]
        summary_json: Option<PathBuf>,
    },
    /// Classify log lines from stdin with the detector's rules: one JSON object per line.
    Classify {
        /// Rules layered over the built-ins; defaults to `detector.rules_file`.
        #[arg(long, value_name = "FILE")]
        rules: Option<PathBuf>,
        /// Say why: the keyword that let the rule be tried, the text it matched,
        /// the Xid code, and the rules tried before it (nothing for a benign line).
        #[arg(long)]
        explain: bool,
    },
    /// Re-derive every failure, decision and command from the recorded inputs and compare
    /// (exit 0 only when nothing diverged); with --policy or --what-if-config, show what
    /// another policy or configuration would have done.
    Replay(crate::replay::ReplayArgs),
    /// The causal chain of one command: source records, failure, decision, command, results.
    Explain(crate::explain::ExplainArgs),
    #[cfg(feature = "simulator")]
    /// Compare recovery policies under the same failures in the offline loop; print the table,
    /// write it and a plot into docs/EVALUATION.md.
    Evaluate(crate::evaluate::EvaluateArgs),
    /// Solve one allocation problem (JSON in, JSON out), for what-if questions.
    Plan {
        /// The problem: {"gpus", "unit", "d_running_s", "jobs": [...]}; see docs/planner.md.
        #[arg(long, value_name = "FILE")]
        input: PathBuf,
    },
}

/// Bad input from the operator (a file, a flag): exit code 2, one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// Print every topic of the topology as a table.
    List,
    /// Create missing topics on a Kafka cluster; existing ones are reported.
    Create {
        /// Bootstrap servers; defaults to `kafka.brokers` of the configuration.
        #[arg(long, value_name = "HOST:PORT")]
        brokers: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Write a new signing key (64 hex digits, mode 0600) and print its public key.
    Generate {
        /// Where to write the key; an existing file is never overwritten.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Print the public key of a signing key file, for `executor.public_keys`.
    Public {
        /// The signing key file (`planner.signing_key_file`).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
    },
}

/// `unicron remote-write`'s flags, over `[remote_write]`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RemoteWriteArgs {
    /// Listen on this address (default `remote_write.listen`, 127.0.0.1:9201).
    // A string, parsed by the command: a bad one is then one line, exit 2.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
}

/// Where the status page listens, overriding `[status]`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StatusArgs {
    /// Serve the status page on this address (default `status.listen`, 127.0.0.1:8080).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "no_status")]
    pub status: Option<std::net::SocketAddr>,
    /// Do not serve the status page.
    #[arg(long)]
    pub no_status: bool,
}

impl StatusArgs {
    /// The address to serve the page on, if any.
    pub fn listen(&self, config: &crate::config::StatusConfig) -> Option<std::net::SocketAddr> {
        if self.no_status || (!config.enabled && self.status.is_none()) {
            None
        } else {
            Some(self.status.unwrap_or(config.listen))
        }
    }
}

#[cfg(feature = "simulator")]
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
    /// Inject failures from this CSV (time_s,node,kind) instead of the taxonomy mix.
    #[arg(long, value_name = "FILE", conflicts_with = "paper_rate")]
    pub trace: Option<PathBuf>,
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
    pub status: StatusArgs,
}

#[cfg(feature = "simulator")]
/// `90`, `90s`, `10m` or `2h`.
fn parse_duration(text: &str) -> Result<Duration, String> {
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

/// Runs `command`; `config_given`: the configuration came from `--config`.
pub async fn run(command: Command, config: Config, config_given: bool) -> anyhow::Result<()> {
    match command {
        Command::Topics {
            command: TopicsCommand::List,
        } => crate::topics::list(&config),
        Command::Topics {
            command: TopicsCommand::Create { brokers },
        } => crate::topics::create(&config, brokers).await,
        Command::Keys {
            command: KeysCommand::Generate { out },
        } => crate::keys::generate(&out),
        Command::Keys {
            command: KeysCommand::Public { key },
        } => crate::keys::public(&key),
        #[cfg(feature = "simulator")]
        Command::Up(args) => crate::up::run(&config, args).await,
        Command::Plan { input } => crate::plan::run(&input),
        Command::Planner(status) => crate::services::planner(&config, &status).await,
        Command::Detector => crate::services::detector(&config).await,
        Command::Executor => crate::services::executor(&config).await,
        Command::Archiver => crate::services::archiver(&config).await,
        Command::RemoteWrite(args) => crate::services::remote_write(&config, &args).await,
        Command::Agent(args) => crate::agent::run(&config, &args).await,
        Command::SlurmWatch(args) => crate::slurm::run(&config, &args).await,
        #[cfg(feature = "simulator")]
        Command::Sim {
            duration,
            summary_json,
        } => crate::services::sim(&config, duration, summary_json).await,
        Command::Classify { rules, explain } => crate::classify::run(&config, rules, explain),
        Command::Replay(args) => crate::replay::run(&config, config_given, args),
        #[cfg(feature = "simulator")]
        Command::Evaluate(args) => crate::evaluate::run(args),
        Command::Explain(args) => crate::explain::run(&config, args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "simulator")]
    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").unwrap_err().contains("unit"));
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
