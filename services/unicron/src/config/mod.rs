//! The configuration file (`--config FILE`, TOML) with environment overrides.
//!
//! Precedence: built-in defaults < file < environment. Environment keys are
//! `UNICRON_<SECTION>__<KEY>` (double underscore between levels), e.g.
//! `UNICRON_KAFKA__BROKERS=k1:9092` or `UNICRON_METRICS__LISTEN=0.0.0.0:9898`.
//! See `deploy/config/unicron.toml` for every key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};
use unicron_archiver::ArchiverSettings;
use unicron_codec::KafkaConfig;
use unicron_detector::DetectorSettings;
use unicron_executor::ExecutorSettings;
use unicron_planner::PlannerSettings;
use unicron_remote_write::RemoteWriteSettings;
#[cfg(feature = "simulator")]
use unicron_simulator::SimConfig;

/// The whole configuration of the `unicron` binary.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub metrics: MetricsConfig,
    pub embedded: EmbeddedConfig,
    pub planner: PlannerSettings,
    pub detector: DetectorSettings,
    /// `unicron ingress`: clusters' own topics into the shared ones
    /// (`kafka.cluster_topics`).
    pub ingress: unicron_ingress::IngressSettings,
    pub executor: ExecutorSettings,
    pub agent: unicron_agent::AgentSettings,
    /// `unicron slurm-watch`: Slurm's node and job state into the cluster topic.
    pub slurm: unicron_slurm::PollerSettings,
    /// `unicron kube-watch`: Kubernetes' nodes, pods and workloads into the
    /// cluster and logs topics.
    pub kubernetes: unicron_kubernetes::WatchSettings,
    /// Only in a binary with the simulator; without it `[sim]` is an unknown section.
    #[cfg(feature = "simulator")]
    pub sim: SimConfig,
    pub archiver: ArchiverSettings,
    pub status: StatusConfig,
    /// `unicron remote-write`: a Prometheus remote-write receiver.
    pub remote_write: RemoteWriteSettings,
}

/// `[metrics]`: where the Prometheus endpoint listens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Address of `GET /metrics` and `GET /healthz`; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Serve the endpoint at all.
    pub enabled: bool,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9898)),
            enabled: true,
        }
    }
}

/// `[embedded]`: the in-process broker used when `kafka.brokers` is unset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmbeddedConfig {
    /// Number of mock brokers.
    pub brokers: i32,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig { brokers: 1 }
    }
}

/// A configuration error, in one line that names the field.
#[derive(Debug, thiserror::Error)]
#[error("config: {0}")]
pub struct ConfigError(String);

impl Config {
    /// Loads defaults, then `file` (if given), then the environment.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.is_file() {
                return Err(ConfigError(format!("{}: no such file", path.display())));
            }
            figment = figment.merge(Toml::file(path));
        }
        let sections: Vec<String> = Config::sections()
            .into_iter()
            .map(|section| format!("{section}__"))
            .collect();
        figment = figment.merge(
            Env::prefixed("UNICRON_")
                .filter(move |key| {
                    let key = key.as_str().to_ascii_lowercase();
                    sections.iter().any(|s| key.starts_with(s.as_str()))
                })
                .split("__"),
        );
        let config: Config = figment.extract().map_err(one_line)?;
        config.validate()?;
        Ok(config)
    }

    /// The top-level sections (`kafka`, `agent`, ...), read from the
    /// configuration's own fields, so every section the file knows the
    /// environment overrides too and no list is kept by hand.
    pub fn sections() -> Vec<String> {
        match toml::Value::try_from(Config::default()) {
            Ok(toml::Value::Table(table)) => table.keys().cloned().collect(),
            _ => unreachable!("the default configuration serialises to a table"),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field: &str, why: &str| Err(ConfigError(format!("{field}: {why}")));
        if self
            .kafka
            .brokers
            .as_deref()
            .is_some_and(|b| b.trim().is_empty())
        {
            return bad(
                "kafka.brokers",
                "empty; leave it unset for the embedded broker",
            );
        }
        if self.kafka.max_record_bytes == 0 {
            return bad("kafka.max_record_bytes", "must be positive");
        }
        if let Err((field, why)) = self.kafka.check_replication() {
            return bad(field, &why);
        }
        let topology = unicron_codec::Topology::builtin();
        for (topic, &ms) in &self.kafka.retention_ms {
            let field = format!("kafka.retention_ms.{topic}");
            if topology.get(topic).is_none() {
                return bad(&field, "no such topic in topology/topics.toml");
            }
            if let Err(why) = unicron_codec::check_retention_ms(ms) {
                return bad(&field, why);
            }
        }
        if !(1..=16).contains(&self.embedded.brokers) {
            return bad("embedded.brokers", "must be between 1 and 16");
        }
        self.detector
            .validate()
            .map_err(|e| ConfigError(e.to_string()))?;
        if let Err((field, why)) = self.planner.tuning.check() {
            return bad(&format!("planner.tuning.{field}"), &why);
        }
        // What is set must make sense; what an executor needs (cluster,
        // backend, keys) is checked when one starts, as services sharing the
        // file need none of it and `unicron up` supplies some.
        self.executor
            .check_given()
            .map_err(|e| ConfigError(e.to_string()))?;
        #[cfg(feature = "simulator")]
        self.sim.validate().map_err(ConfigError)?;
        self.archiver
            .validate()
            .map_err(|e| ConfigError(e.to_string()))?;
        self.remote_write
            .validate()
            .map_err(|e| ConfigError(e.to_string()))?;
        Ok(())
    }
}

/// figment's message names the key path; keep the first error, on one line.
fn one_line(error: figment::Error) -> ConfigError {
    let first = error
        .into_iter()
        .next()
        .expect("an error has at least one entry");
    let mut text = first.to_string();
    if !first.path.is_empty() && !text.contains(&first.path.join(".")) {
        text = format!("{}: {text}", first.path.join("."));
    }
    ConfigError(text.replace('\n', " "))
}

/// `[status]`: the status page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatusConfig {
    /// Address of the page and its API; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Serve the page at all (`unicron up` and `unicron planner`).
    pub enabled: bool,
    /// RocksDB directory of the explain index, a cache of the log emptied
    /// when the page starts. `unicron up` uses its run's state directory
    /// unless this is set.
    pub index_dir: PathBuf,
    /// Who may read the page and its API (`[[status.tokens]]`); a token
    /// with `clusters` sees those clusters only. Required unless `listen`
    /// is a loopback address.
    pub tokens: Vec<unicron_access::TokenConfig>,
}

impl Default for StatusConfig {
    fn default() -> Self {
        StatusConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            enabled: true,
            index_dir: PathBuf::from("unicron-state/status"),
            tokens: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests;
