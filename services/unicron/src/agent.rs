//! `unicron agent`: one per node. The command line shapes one job (its
//! program after `--`); a config file's `[agent]` section may declare more
//! (`[[agent.jobs]]`), so a re-plan can move this node between jobs.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use unicron_agent::{AgentSettings, JobSettings, PodStep, SlurmStep};

use crate::config::Config;
use crate::services::Stop;
use crate::usage::UsageError;

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Bootstrap servers; default kafka.brokers (e.g. the `brokers` file of an `unicron up --no-sim` run).
    #[arg(long)]
    brokers: Option<String>,
    /// Planner public key file: `KEY_ID HEX` (or only HEX, key id `dev`), as `unicron up` writes to planner.pub.
    #[arg(long, value_name = "FILE")]
    planner_key: Option<PathBuf>,
    #[arg(long)]
    cluster: Option<String>,
    /// This node's name.
    #[arg(long)]
    node: Option<String>,
    /// Where other nodes reach this one (MASTER_ADDR when it has rank 0); default the node name.
    #[arg(long)]
    address: Option<String>,
    /// The job the program after `--` belongs to; under Slurm default the Slurm job's name.
    #[arg(long)]
    job: Option<String>,
    #[arg(long, default_value_t = 1)]
    nproc_per_node: u32,
    #[arg(long, default_value_t = 1)]
    min_nodes: u32,
    /// Default: --min-nodes, or under Slurm the nodes of the allocation.
    #[arg(long)]
    max_nodes: Option<u32>,
    /// Priority weight of the job in the planner's objective.
    #[arg(long, default_value_t = 1.0)]
    weight: f64,
    #[arg(long, value_name = "DIR")]
    workdir: Option<PathBuf>,
    /// Progress regex with a named group `iteration` (and optionally `ms`); repeatable.
    #[arg(long, value_name = "REGEX")]
    progress_pattern: Vec<String>,
    /// Base of the job's master ports.
    #[arg(long, default_value_t = 29500)]
    master_port: u16,
    /// Restarts after failures the job may have in all.
    #[arg(long)]
    restart_budget: Option<u32>,
    /// Kernel log to follow: /dev/kmsg or a file.
    #[arg(long, value_name = "PATH")]
    kernel_log: Option<PathBuf>,
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Detect and report; act on no command.
    #[arg(long)]
    observe_only: bool,
    /// Seconds between SIGTERM and SIGKILL when stopping workers.
    #[arg(long, value_name = "SECONDS")]
    stop_grace_s: Option<f64>,
    /// The cluster's shared secret for snapshot replicas (at least 32 bytes); without it snapshots stay on this node.
    #[arg(long, value_name = "FILE")]
    snapshot_secret: Option<PathBuf>,
    /// The job's program and arguments.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// The `[agent]` settings with the command line's overrides.
fn settings(
    config: &Config,
    args: &AgentArgs,
    slurm: Option<&SlurmStep>,
    pod: Option<&PodStep>,
) -> anyhow::Result<AgentSettings> {
    let mut s = config.agent.clone();
    // In a pod, the downward API and the workload's labels and variables
    // name the node, the address and the job; the executor isolates nodes
    // through the API server, and the pod ends when its job has.
    if let Some(pod) = pod {
        if s.node.is_empty()
            && let Some(node) = &pod.node
        {
            s.node = node.clone();
        }
        if s.address.is_none() {
            s.address = pod.address.clone();
        }
        s.scheduler_isolates = true;
        s.exit_when_done = true;
    }
    // Under srun, Slurm's environment names the node, the cluster and the
    // job; an executor drains nodes in Slurm, so isolation is its to answer.
    if let Some(step) = slurm {
        let fill = |target: &mut String, value: &Option<String>| {
            if target.is_empty()
                && let Some(v) = value
            {
                *target = v.clone();
            }
        };
        fill(&mut s.node, &step.node);
        fill(&mut s.cluster, &step.cluster);
        s.scheduler_isolates = true;
        s.exit_when_done = true;
    }
    let job = args
        .job
        .clone()
        .or_else(|| slurm.and_then(|step| step.job_name.clone()))
        .or_else(|| pod.and_then(|p| p.job.clone()));
    let allocation = slurm
        .map(|step| step.nodes.len() as u32)
        .or_else(|| pod.and_then(|p| p.nodes))
        .unwrap_or(0);
    let nproc_per_node = pod
        .and_then(|p| p.nproc_per_node)
        .filter(|_| args.nproc_per_node == 1)
        .unwrap_or(args.nproc_per_node);
    let set = |target: &mut String, value: &Option<String>| {
        if let Some(v) = value {
            *target = v.clone();
        }
    };
    set(&mut s.cluster, &args.cluster);
    set(&mut s.node, &args.node);
    if args.address.is_some() {
        s.address = args.address.clone();
    }
    if let Some(path) = &args.planner_key {
        let (id, key) = read_key(path)?;
        s.public_keys.insert(id, key);
    }
    if let Some(path) = &args.kernel_log {
        s.kernel_log = Some(path.clone());
    }
    if let Some(dir) = &args.state_dir {
        s.state_dir = dir.clone();
    } else if s.state_dir == AgentSettings::default().state_dir && !s.node.is_empty() {
        s.state_dir = PathBuf::from(format!("unicron-agent-{}", s.node));
    }
    if let Some(grace) = args.stop_grace_s {
        s.stop_grace_s = grace;
    }
    s.observe_only |= args.observe_only;
    if let Some(path) = &args.snapshot_secret {
        s.snapshot_secret_file = Some(path.clone());
    }
    match (&job, args.command.is_empty()) {
        (Some(id), false) => {
            s.jobs.retain(|j| &j.id != id);
            s.jobs.push(JobSettings {
                id: id.clone(),
                command: args.command.clone(),
                nproc_per_node,
                min_nodes: args.min_nodes,
                // Under Slurm: at most the allocation's nodes; in a pod, the
                // workload's pods.
                max_nodes: args.max_nodes.unwrap_or(allocation.max(args.min_nodes)),
                weight: args.weight,
                progress_patterns: args.progress_pattern.clone(),
                workdir: args.workdir.clone(),
                master_port_base: args.master_port,
                restart_budget: args.restart_budget,
                ..JobSettings::default()
            });
        }
        (Some(_), true) => {
            return Err(UsageError("--job: give the job's program after `--`".into()).into());
        }
        (None, false) => {
            return Err(UsageError("--job: required with a program after `--`".into()).into());
        }
        (None, true) => {}
    }
    s.validate()
        .map_err(|e| UsageError(format!("config: {e}")))?;
    Ok(s)
}

/// A key file: `KEY_ID HEX`, or `HEX` for the key id `dev`.
fn read_key(path: &Path) -> anyhow::Result<(String, String)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("--planner-key {}: {e}", path.display())))?;
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        [key] => Ok(("dev".into(), key.to_string())),
        [id, key] => Ok((id.to_string(), key.to_string())),
        _ => Err(UsageError(format!(
            "--planner-key {}: expected `KEY_ID HEX` or `HEX`",
            path.display()
        ))
        .into()),
    }
}

pub async fn run(config: &Config, args: &AgentArgs) -> anyhow::Result<()> {
    let stop = Stop::listen()?;
    let slurm = SlurmStep::from_env(|name| std::env::var(name).ok())
        .map_err(|e| UsageError(format!("Slurm environment: {e}")))?;
    let labels_file = std::env::var("UNICRON_POD_LABELS")
        .unwrap_or_else(|_| unicron_agent::LABELS_FILE.to_string());
    let labels = std::fs::read_to_string(&labels_file).ok();
    let pod = PodStep::from_env(|name| std::env::var(name).ok(), labels.as_deref())
        .map_err(|e| UsageError(format!("pod environment: {e}")))?;
    let settings = settings(config, args, slurm.as_ref(), pod.as_ref())?;
    let Some(brokers) = args
        .brokers
        .clone()
        .or_else(|| config.kafka.brokers.clone())
    else {
        return Err(UsageError(
            "--brokers: required (or kafka.brokers); `unicron up --no-sim` writes its broker address to brokers in its run directory".into(),
        )
        .into());
    };
    println!(
        "agent: node {} of cluster {}, jobs {}, on {brokers}{}",
        settings.node,
        settings.cluster,
        settings
            .jobs
            .iter()
            .map(|j| j.id.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        if settings.observe_only {
            " (observe only)"
        } else {
            ""
        }
    );
    if let Some(step) = &slurm {
        println!(
            "agent: in Slurm job {} (allocation {}); isolation is the executor's to answer",
            step.job_id,
            step.nodes.join(",")
        );
    }
    let _metrics = crate::services::serve_metrics(config, false).await?;
    unicron_agent::run(&config.kafka, &brokers, settings, stop.signalled())
        .await
        .map_err(|e| match e {
            unicron_agent::AgentError::Config(text) => UsageError(format!("config: {text}")).into(),
            other => anyhow::Error::new(other),
        })
        .context("agent")
}
