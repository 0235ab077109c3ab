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

pub async fn create(config: &Config, brokers: Option<String>) -> anyhow::Result<()> {
    let Some(brokers) = brokers.or_else(|| config.kafka.brokers.clone()) else {
        bail!("--brokers: required (or set kafka.brokers in the configuration)");
    };
    let reports = ensure_topics(&config.kafka, &brokers, &Topology::builtin())
        .await
        .with_context(|| format!("creating topics on {brokers}"))?;
    for report in reports {
        println!(
            "{:<8} {} ({} partitions, {} replicas)",
            report.status, report.name, report.partitions, report.replicas
        );
    }
    Ok(())
}
