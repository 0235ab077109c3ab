//! `unicron slurm-watch`: one per Slurm cluster. Publishes what Slurm
//! says about nodes and jobs to the cluster topic; the planner takes a
//! node Slurm holds dead or someone else drained out of its plans.

use anyhow::Context;
use clap::Args;

use crate::config::Config;
use crate::services::Stop;
use crate::usage::UsageError;

#[derive(Debug, Args)]
pub struct SlurmWatchArgs {
    /// Bootstrap servers; default kafka.brokers.
    #[arg(long)]
    brokers: Option<String>,
    /// The unicron cluster this Slurm cluster is; default slurm.cluster.
    #[arg(long)]
    cluster: Option<String>,
    /// Seconds between polls; default slurm.poll_interval_s (30).
    #[arg(long, value_name = "SECONDS")]
    interval_s: Option<f64>,
}

pub async fn run(config: &Config, args: &SlurmWatchArgs) -> anyhow::Result<()> {
    let stop = Stop::listen()?;
    let mut settings = config.slurm.clone();
    if let Some(cluster) = &args.cluster {
        settings.cluster = cluster.clone();
    }
    if let Some(interval) = args.interval_s {
        settings.poll_interval_s = interval;
    }
    settings
        .validate()
        .map_err(|e| UsageError(format!("config: {e}")))?;
    let brokers = crate::services::brokers(config, &args.brokers)?;
    println!(
        "slurm-watch: cluster {} every {}s on {brokers}",
        settings.cluster, settings.poll_interval_s
    );
    let _metrics = crate::services::serve_metrics(config, false).await?;
    unicron_slurm::run_poller(&settings, &config.kafka, &brokers, stop.signalled())
        .await
        .context("slurm-watch")
}
