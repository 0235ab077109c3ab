//! `unicron kube-watch`: one per Kubernetes cluster. Publishes what the API
//! server says about nodes, pods and training workloads to the cluster and
//! logs topics; the planner takes a node Kubernetes holds NotReady or
//! someone else cordoned out of its plans, the detector classifies
//! container terminations and GPU node conditions.

use anyhow::Context;
use clap::Args;

use crate::config::Config;
use crate::services::Stop;
use crate::usage::UsageError;

#[derive(Debug, Args)]
pub struct KubeWatchArgs {
    /// Bootstrap servers; default kafka.brokers.
    #[arg(long)]
    brokers: Option<String>,
    /// The unicron cluster this Kubernetes cluster is; default kubernetes.cluster.
    #[arg(long)]
    cluster: Option<String>,
    /// A kubeconfig file; default kubernetes.kubeconfig, else KUBECONFIG or in-cluster.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<std::path::PathBuf>,
}

pub async fn run(config: &Config, args: &KubeWatchArgs) -> anyhow::Result<()> {
    let stop = Stop::listen()?;
    let mut settings = config.kubernetes.clone();
    if let Some(cluster) = &args.cluster {
        settings.cluster = cluster.clone();
    }
    if let Some(path) = &args.kubeconfig {
        settings.kubeconfig = Some(path.clone());
    }
    settings
        .validate()
        .map_err(|e| UsageError(format!("config: {e}")))?;
    let brokers = crate::services::brokers(config, &args.brokers)?;
    println!(
        "kube-watch: cluster {}, namespaces {} on {brokers}",
        settings.cluster,
        settings.namespaces.join(",")
    );
    let _metrics = crate::services::serve_metrics(config, false).await?;
    unicron_kubernetes::run_watcher(&settings, &config.kafka, &brokers, stop.signalled())
        .await
        .context("kube-watch")
}
