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
    Up(crate::up::UpArgs),
    /// Run the planner service against `kafka.brokers` (needs planner.signing_key_file).
    Planner(crate::status::StatusArgs),
    /// Run the detector service against `kafka.brokers`.
    Detector,
    /// Pass each cluster's own topics on to the shared ones, refusing records that speak
    /// for another cluster (with `kafka.cluster_topics`; docs/operations.md, "Tenants").
    Ingress,
    /// Print the Kafka ACLs each unicron principal needs as `kafka-acls.sh` lines.
    Acls(crate::acls::AclsArgs),
    /// Run the executor of `executor.cluster` against `kafka.brokers` (needs executor.cluster, .backend and .public_keys).
    Executor,
    /// Run a node agent: start and supervise the node's share of a training job's workers
    /// (torchrun's variables), report them, carry out the planner's commands for this node.
    Agent(crate::agent::AgentArgs),
    /// Watch a Slurm cluster: node state (down, not responding, drained by others, back) and
    /// job ends from scontrol/sinfo/squeue into the cluster topic, changes only.
    SlurmWatch(crate::slurm::SlurmWatchArgs),
    /// Watch a Kubernetes cluster: nodes (NotReady, cordoned or tainted by others, GPU
    /// conditions, back), container terminations and evictions, and workloads (JobSet,
    /// PyTorchJob, Job) into the cluster and logs topics (docs/kubernetes.md).
    KubeWatch(crate::kube_watch::KubeWatchArgs),
    /// Run the archiver against `kafka.brokers`: every topic to Avro files in `archiver.dir`.
    Archiver,
    /// Receive Prometheus remote write (dcgm-exporter's series) on POST /api/v1/write and
    /// publish it to the telemetry topic of `kafka.brokers` (docs/remote-write.md).
    RemoteWrite(crate::services::RemoteWriteArgs),
    #[cfg(feature = "simulator")]
    /// Run the simulated cluster against `kafka.brokers` until Ctrl-C or --duration.
    Sim {
        /// Stop after this much real time and print the summary.
        #[arg(long, value_parser = crate::up::parse_duration, value_name = "DURATION")]
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
        /// Instead: group the error-marked lines no rule takes by template and print one
        /// JSON object per template, most frequent first (docs/detector.md).
        #[arg(long, conflicts_with = "explain")]
        templates: bool,
        /// With --templates: read the log lines of an archive directory
        /// (docs/archive.md) instead of stdin, by cluster, with nodes, jobs and times.
        #[arg(long, value_name = "DIR", requires = "templates")]
        from_archive: Option<PathBuf>,
    },
    /// Learn the detector's second tier from a corpus of labelled lines
    /// (`kind<TAB>source<TAB>line`) and write the model (docs/detector.md).
    TrainClassifier {
        /// The corpus, e.g. crates/core/tests/corpus/log_lines.tsv.
        #[arg(long, value_name = "FILE")]
        corpus: PathBuf,
        /// Where to write the model, e.g. crates/core/rules/learned_model.json.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Re-derive every failure, decision and command from the recorded inputs and compare
    /// (exit 0 only when nothing diverged); with --policy or --what-if-config, show what
    /// another policy or configuration would have done.
    Replay(crate::replay::ReplayArgs),
    /// The causal chain of one command: source records, failure, decision, command, results.
    Explain(crate::explain::ExplainArgs),
    /// Each job's wall time by cause: productive, snapshot, detection, recovery, work redone,
    /// waiting for nodes; from the log, as the status page shows it.
    Goodput(crate::goodput::GoodputArgs),
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

#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// Print every topic of the topology as a table.
    List,
    /// Create missing topics on a Kafka cluster; existing ones are reported.
    Create {
        /// Bootstrap servers; defaults to `kafka.brokers` of the configuration.
        #[arg(long, value_name = "HOST:PORT")]
        brokers: Option<String>,
        /// Also (or, with --only-clusters, only) this cluster's own topics
        /// (`kafka.cluster_topics`); repeat for several.
        #[arg(long = "cluster", value_name = "ID")]
        clusters: Vec<String>,
        /// Create only the clusters' own topics, not the shared ones.
        #[arg(long, requires = "clusters")]
        only_clusters: bool,
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

/// Runs `command`; `config_given`: the configuration came from `--config`.
pub async fn run(command: Command, config: Config, config_given: bool) -> anyhow::Result<()> {
    match command {
        Command::Topics {
            command: TopicsCommand::List,
        } => crate::topics::list(&config),
        Command::Topics {
            command:
                TopicsCommand::Create {
                    brokers,
                    clusters,
                    only_clusters,
                },
        } => crate::topics::create(&config, brokers, &clusters, only_clusters).await,
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
        Command::Ingress => crate::services::ingress(&config).await,
        Command::Acls(args) => crate::acls::run(&config, &args),
        Command::Executor => crate::services::executor(&config).await,
        Command::Archiver => crate::services::archiver(&config).await,
        Command::RemoteWrite(args) => crate::services::remote_write(&config, &args).await,
        Command::Agent(args) => crate::agent::run(&config, &args).await,
        Command::SlurmWatch(args) => crate::slurm::run(&config, &args).await,
        Command::KubeWatch(args) => crate::kube_watch::run(&config, &args).await,
        #[cfg(feature = "simulator")]
        Command::Sim {
            duration,
            summary_json,
        } => crate::services::sim(&config, duration, summary_json).await,
        Command::Classify {
            rules,
            explain,
            templates,
            from_archive,
        } => crate::classify::run(&config, rules, explain, templates, from_archive),
        Command::TrainClassifier { corpus, out } => crate::classify::train(&corpus, &out),
        Command::Replay(args) => crate::replay::run(&config, config_given, args),
        #[cfg(feature = "simulator")]
        Command::Evaluate(args) => crate::evaluate::run(args),
        Command::Explain(args) => crate::explain::run(&config, args),
        Command::Goodput(args) => crate::goodput::run(&config, args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "simulator")]
    #[test]
    fn durations_parse_with_units() {
        use crate::up::parse_duration;
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
