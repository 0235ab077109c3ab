//! `unicron topics list|create`.

use anyhow::{Context, bail};
use unicron_bus::admin::ensure_topics;
use unicron_codec::Topology;

use crate::config::Config;

pub fn list(config: &Config) -> anyhow::Result<()> {
    print!(
        "{}",
        Topology::builtin().render_table(&config.kafka.topic_prefix)
    );
    Ok(())
}

pub async fn create(
    config: &Config,
    brokers: Option<String>,
    clusters: &[String],
    only_clusters: bool,
) -> anyhow::Result<()> {
    let Some(brokers) = brokers.or_else(|| config.kafka.brokers.clone()) else {
        bail!("--brokers: required (or set kafka.brokers in the configuration)");
    };
    if !clusters.is_empty() && !config.kafka.cluster_topics {
        bail!("--cluster: clusters have topics of their own only with kafka.cluster_topics = true");
    }
    let mut topologies = Vec::new();
    if !only_clusters {
        topologies.push(Topology::builtin());
    }
    for cluster in clusters {
        if let Err(why) = unicron_codec::check_cluster_id(cluster) {
            bail!("--cluster: {why}");
        }
        topologies.push(Topology::builtin().of_cluster(cluster));
    }
    let mut reports = Vec::new();
    for topology in &topologies {
        reports.extend(
            ensure_topics(&config.kafka, &brokers, topology)
                .await
                .with_context(|| format!("creating topics on {brokers}"))?,
        );
    }
    for report in reports {
        println!(
            "{:<8} {} ({} partitions, {} replicas)",
            report.status, report.name, report.partitions, report.replicas
        );
    }
    Ok(())
}
