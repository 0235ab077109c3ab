//! The configuration file (`--config FILE`, TOML) with environment overrides.
//!
//! Precedence: built-in defaults < file < environment. Environment keys are
//! `UNICRON_<SECTION>__<KEY>` (double underscore between levels), e.g.
//! `UNICRON_KAFKA__BROKERS=k1:9092` or `UNICRON_METRICS__LISTEN=0.0.0.0:9898`.
//! See `deploy/config/unicron.toml` for every key.

use std::net::SocketAddr;
use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};
use unicron_archiver::ArchiverSettings;
use unicron_bus::KafkaConfig;
use unicron_detector::DetectorSettings;
use unicron_executor::ExecutorSettings;
use unicron_planner::PlannerSettings;
use unicron_simulator::SimConfig;

pub use crate::status::StatusConfig;

/// Sections whose keys the environment may override.
const ENV_SECTIONS: [&str; 9] = [
    "archiver__",
    "kafka__",
    "metrics__",
    "embedded__",
    "planner__",
    "detector__",
    "executor__",
    "sim__",
    "status__",
];

/// The whole configuration of the `unicron` binary.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub metrics: MetricsConfig,
    pub embedded: EmbeddedConfig,
    pub planner: PlannerSettings,
    pub detector: DetectorSettings,
    pub executor: ExecutorSettings,
    pub sim: SimConfig,
    pub archiver: ArchiverSettings,
    pub status: StatusConfig,
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
        figment = figment.merge(
            Env::prefixed("UNICRON_")
                .filter(|key| {
                    let key = key.as_str().to_ascii_lowercase();
                    ENV_SECTIONS.iter().any(|s| key.starts_with(s))
                })
                .split("__"),
        );
        let config: Config = figment.extract().map_err(one_line)?;
        config.validate()?;
        Ok(config)
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
        if !(1..=16).contains(&self.embedded.brokers) {
            return bad("embedded.brokers", "must be between 1 and 16");
        }
        self.detector
            .validate()
            .map_err(|e| ConfigError(e.to_string()))?;
        // `unicron up` supplies the planner's key itself; with keys given,
        // the whole section must make sense.
        if !self.executor.public_keys.is_empty() {
            self.executor
                .validate()
                .map_err(|e| ConfigError(e.to_string()))?;
        }
        self.sim.validate().map_err(ConfigError)?;
        self.archiver
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

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment::Jail's closure signature
mod tests {
    use super::*;

    /// Config tests read the process environment, which the env test
    /// changes; Jail serialises them.
    pub(super) fn jailed<T>(f: impl FnOnce() -> T) -> T {
        let mut out = None;
        figment::Jail::expect_with(|_| {
            out = Some(f());
            Ok(())
        });
        out.unwrap()
    }

    fn load_text(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unicron.toml");
        std::fs::write(&path, text).unwrap();
        jailed(|| Config::load(Some(&path)))
    }

    #[test]
    fn defaults_without_a_file() {
        let config = jailed(|| Config::load(None)).unwrap();
        assert_eq!(config.kafka.topic_prefix, "unicron.");
        assert!(config.kafka.brokers.is_none());
    }

    #[test]
    fn file_values_and_passthrough_properties_load() {
        let config = load_text(
            "[kafka]\nbrokers = \"k1:9092\"\nsecurity.protocol = \"SSL\"\n[metrics]\nlisten = \"0.0.0.0:9000\"\n",
        )
        .unwrap();
        assert_eq!(config.kafka.brokers.as_deref(), Some("k1:9092"));
        assert_eq!(config.metrics.listen.port(), 9000);
        assert_eq!(
            config.kafka.librdkafka_properties(),
            vec![("security.protocol".to_string(), "SSL".to_string())]
        );
    }

    #[test]
    fn errors_name_the_field_on_one_line() {
        let err = load_text("[metrics]\nlisten = \"not an address\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("metrics.listen"), "{err}");
        assert!(!err.contains('\n'));

        let err = load_text("[metrcs]\nlisten = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("metrcs"), "{err}");

        let err = load_text("[kafka]\nmax_record_bytes = 0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "config: kafka.max_record_bytes: must be positive");

        let err = load_text("[embedded]\nbrokers = \"three\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("embedded.brokers"), "{err}");

        let err = load_text("[detector.tuning]\nhang_factor = 0.0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config: detector.tuning.hang_factor: must be a positive number, got 0"
        );

        let err = load_text("[[detector.inputs]]\ntopic = \"otel\"\nformat = \"otlp_json\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("config: detector.inputs[0].signal:"),
            "{err}"
        );

        let err = load_text("[[detector.inputs]]\ntopic = \"x\"\nformat = \"syslog\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("format") && !err.contains('\n'), "{err}");

        let err = load_text("[sim]\nspeed = 0.0\n").unwrap_err().to_string();
        assert_eq!(err, "config: sim.speed: must be a positive number, got 0");

        let err = load_text("[sim]\nnodes = 2\njobs = 4\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("config: sim.jobs: 4 jobs need"), "{err}");

        let err = load_text("[executor.public_keys]\nk1 = \"abc\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("executor.public_keys.k1"), "{err}");

        let err = load_text("[executor.backend]\nkind = \"carrier-pigeon\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("executor.backend") && !err.contains('\n'),
            "{err}"
        );

        let err = jailed(|| Config::load(Some(Path::new("/nonexistent/unicron.toml"))))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "config: /nonexistent/unicron.toml: no such file");
    }
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment::Jail's closure signature
mod env_tests {
    use super::*;

    #[test]
    fn environment_overrides_file_and_names_bad_fields() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("u.toml", "[kafka]\nbrokers = \"file:1\"\n")?;
            jail.set_env("UNICRON_KAFKA__BROKERS", "env:2");
            jail.set_env("UNICRON_KAFKA__SASL__USERNAME", "svc");
            jail.set_env("UNICRON_LOG", "ignored: not a config section");
            let config = Config::load(Some(Path::new("u.toml"))).unwrap();
            assert_eq!(config.kafka.brokers.as_deref(), Some("env:2"));
            assert_eq!(
                config.kafka.librdkafka_properties(),
                vec![("sasl.username".to_string(), "svc".to_string())]
            );
            jail.set_env("UNICRON_METRICS__ENABLED", "maybe");
            let err = Config::load(Some(Path::new("u.toml")))
                .unwrap_err()
                .to_string();
            assert!(err.contains("metrics.enabled"), "{err}");
            Ok(())
        });
    }
}

#[cfg(test)]
mod example_tests {
    use super::*;

    /// The shipped example documents the defaults; keep the two in step.
    #[test]
    fn example_config_loads_and_equals_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/config/unicron.toml");
        let loaded = super::tests::jailed(|| Config::load(Some(&path))).unwrap();
        assert_eq!(loaded, Config::default());
    }
}
