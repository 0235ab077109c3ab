//! One poller per cluster: reads Slurm's node and job state at a coarse
//! interval (`scontrol show nodes`, `squeue` are the controller's heaviest
//! calls) and publishes what changed to the cluster topic, keyed by
//! cluster. A failed poll publishes nothing and changes nothing: Slurm's
//! state is unknown then, never healthy.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use unicron_bus::Producer;
use unicron_codec::{AvroCodec, KafkaConfig, Topic, Topics};
use unicron_core::ClusterEvent;

use crate::cli::Slurm;
use crate::error::SlurmError;
use crate::json::JobView;
use crate::metrics::{METRICS, POLLS};
use crate::watch::{self, Change, Condition};

/// The `[slurm]` section: the poller, and the calls the executor's Slurm
/// backend makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PollerSettings {
    /// The unicron cluster this Slurm cluster is. Required.
    pub cluster: String,
    /// Seconds between polls.
    pub poll_interval_s: f64,
    /// Seconds a Slurm command may take before it counts as failed.
    pub timeout_s: f64,
    /// Directory of Slurm's commands; unset: `PATH`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bin_dir: Option<PathBuf>,
    /// slurm.conf for Slurm's commands (`SLURM_CONF`); unset: theirs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conf: Option<PathBuf>,
}

impl Default for PollerSettings {
    fn default() -> Self {
        PollerSettings {
            cluster: String::new(),
            poll_interval_s: 30.0,
            timeout_s: 10.0,
            bin_dir: None,
            conf: None,
        }
    }
}

impl PollerSettings {
    /// The first setting that makes no sense, naming its field.
    pub fn validate(&self) -> Result<(), String> {
        if self.cluster.is_empty() {
            return Err(
                "slurm.cluster: required (the unicron cluster this Slurm cluster is)".into(),
            );
        }
        for (field, value) in [
            ("slurm.poll_interval_s", self.poll_interval_s),
            ("slurm.timeout_s", self.timeout_s),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(format!(
                    "{field}: must be a positive number of seconds, got {value}"
                ));
            }
        }
        Ok(())
    }
}

/// What the poller remembers between polls.
#[derive(Debug, Default, Clone)]
struct Seen {
    nodes: Option<BTreeMap<String, Condition>>,
    jobs: Option<BTreeMap<u64, JobView>>,
}

/// Polls until `stop` completes.
pub async fn run_poller(
    settings: &PollerSettings,
    kafka: &KafkaConfig,
    brokers: &str,
    stop: impl Future<Output = ()>,
) -> Result<(), SlurmError> {
    unicron_bus::metrics::describe_all(METRICS);
    let slurm = Slurm::new(
        settings.bin_dir.clone(),
        settings.conf.clone(),
        Duration::from_secs_f64(settings.timeout_s),
    );
    let producer = Producer::new(kafka, brokers).map_err(|e| SlurmError::Failed {
        command: "kafka producer".into(),
        status: "not created".into(),
        message: e.to_string(),
    })?;
    unicron_bus::admin::ensure_cluster_topics(kafka, brokers, &settings.cluster)
        .await
        .map_err(|e| SlurmError::Failed {
            command: "kafka topics of the cluster".into(),
            status: "not created".into(),
            message: e.to_string(),
        })?;
    let topics = Topics::bound(kafka, &settings.cluster);
    let topic = topics.name(Topic::Cluster).to_string();
    let key = topics.key_str(Topic::Cluster, &settings.cluster);
    let codec = AvroCodec::<ClusterEvent>::default();
    let mut seen = Seen::default();
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(settings.poll_interval_s));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = ticks.tick() => {}
        }
        let (changes, now) = poll(&slurm, &seen).await;
        let mut delivered = true;
        for change in changes {
            let event = event(&settings.cluster, &change);
            tracing::info!(kind = ?change.kind, subject = %change.subject, reason = %change.reason, "slurm");
            if let Err(error) = producer.send(&topic, &key, &event, &codec).await {
                tracing::warn!(%error, "cluster event not delivered; the next poll reports it again");
                delivered = false;
                break;
            }
        }
        // Only what reached the topic counts as seen.
        if delivered {
            seen = now;
        }
    }
}

/// One poll: the changes since `seen`, and what is seen now. A failed
/// call keeps what was seen before, so nothing is taken for healthy.
async fn poll(slurm: &Slurm, seen: &Seen) -> (Vec<Change>, Seen) {
    let mut changes = Vec::new();
    let mut now = seen.clone();
    match slurm.nodes().await {
        Ok(nodes) => {
            let conditions = watch::conditions(&nodes);
            changes.extend(watch::node_changes(seen.nodes.as_ref(), &conditions));
            now.nodes = Some(conditions);
            outcome("nodes", true);
        }
        Err(error) => {
            tracing::warn!(%error, "Slurm's node state unknown");
            outcome("nodes", false);
        }
    }
    match slurm.jobs().await {
        Ok(jobs) => {
            let running = watch::running(&jobs);
            if let Some(before) = &seen.jobs {
                changes.extend(
                    watch::job_changes(before, &running, &jobs)
                        .into_iter()
                        .filter(|c| !c.subject.is_empty()),
                );
            }
            now.jobs = Some(running);
            outcome("jobs", true);
        }
        Err(error) => {
            tracing::warn!(%error, "Slurm's jobs unknown");
            outcome("jobs", false);
        }
    }
    (changes, now)
}

fn outcome(what: &'static str, ok: bool) {
    ::metrics::counter!(POLLS.name, "what" => what, "ok" => ok.to_string()).increment(1);
}

/// The cluster event for `change`, at this host's time.
pub fn event(cluster: &str, change: &Change) -> ClusterEvent {
    let time_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    change.event(cluster, time_ms, "slurm")
}
