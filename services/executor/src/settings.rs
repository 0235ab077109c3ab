use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use unicron_core::executor::{Backoff, Gate};

use crate::backend::{Backend, BackendSettings};
use crate::check::config;
use crate::error::ExecutorError;

/// An executor ready to run: its settings, checked once, with the gate
/// and the backend they describe ([`ExecutorSettings::build`]).
pub struct ExecutorService {
    pub(crate) settings: ExecutorSettings,
    pub(crate) gate: Gate,
    pub(crate) backend: Backend,
}

impl ExecutorService {
    pub fn settings(&self) -> &ExecutorSettings {
        &self.settings
    }

    /// The backend in a few words, for a startup line.
    pub fn describe(&self) -> String {
        self.settings
            .backend
            .as_ref()
            .map(BackendSettings::describe)
            .unwrap_or_default()
    }
}

/// The `[executor]` section of the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorSettings {
    /// The cluster this executor acts for: records keyed with another
    /// cluster are skipped, commands signed for another are rejected.
    /// Required: empty (the default) fails validation, so no executor acts
    /// for a cluster it was not told about.
    pub cluster: String,
    /// Executor id written into every result.
    pub name: String,
    /// Consumer group; `None` means `unicron-executor.{cluster}`.
    pub group_id: Option<String>,
    /// RocksDB directory: dedupe table, gate watermark, offsets, outbox.
    pub state_dir: PathBuf,
    /// fsync every commit (survives power loss, not only kill -9).
    pub sync_writes: bool,
    /// Trusted planner keys: key id → Ed25519 public key as 64 hex digits.
    /// Several at once allow key rotation.
    pub public_keys: BTreeMap<String, String>,
    /// A command older than the newest verified one by more than this
    /// (event time, seconds) is rejected as expired.
    pub command_ttl_s: f64,
    /// Retries of transient backend errors.
    pub backoff: Backoff,
    /// Where actions are carried out. Required: there is no default, so
    /// an executor never sends real actions to an address it was not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendSettings>,
}

impl Default for ExecutorSettings {
    fn default() -> Self {
        ExecutorSettings {
            cluster: String::new(),
            name: "executor".to_string(),
            group_id: None,
            state_dir: PathBuf::from("unicron-state/executor"),
            sync_writes: false,
            public_keys: BTreeMap::new(),
            command_ttl_s: 3600.0,
            backoff: Backoff::default(),
            backend: None,
        }
    }
}

impl ExecutorSettings {
    /// The consumer group: each cluster's executor has its own and reads
    /// every partition of the commands topic.
    pub fn group(&self) -> String {
        self.group_id
            .clone()
            .unwrap_or_else(|| format!("unicron-executor.{}", self.cluster))
    }

    /// The gate for this cluster, trusting `public_keys`.
    fn gate(&self) -> Result<Gate, ExecutorError> {
        unicron_commands::gate(
            "executor",
            &self.cluster,
            &self.public_keys,
            self.command_ttl_s,
        )
        .map_err(|e| config(e.to_string()))
    }

    /// The settings checked once and built into what the executor runs
    /// with: the gate (keys parsed) and the backend. An error names the
    /// first setting that is missing or makes no sense.
    pub fn build(&self) -> Result<ExecutorService, ExecutorError> {
        self.check_required()?;
        let gate = self.check_given()?;
        let backend = match &self.backend {
            Some(backend) => Backend::checked(backend)?,
            None => return Err(config("executor.backend: required")),
        };
        Ok(ExecutorService {
            settings: self.clone(),
            gate,
            backend,
        })
    }

    fn check_required(&self) -> Result<(), ExecutorError> {
        if self.cluster.is_empty() {
            return Err(config(
                "executor.cluster: required (the cluster this executor acts for)",
            ));
        }
        if self.backend.is_none() {
            return Err(config(format!(
                "executor.backend: required (kind = one of {}; docs/executor.md)",
                BackendSettings::KINDS.join(", ")
            )));
        }
        if self.public_keys.is_empty() {
            return Err(config(
                "executor.public_keys: at least one planner key is needed (key id = 64 hex digits)",
            ));
        }
        Ok(())
    }

    /// The settings given make sense, and the gate they give; cluster,
    /// backend and keys may be missing. For a configuration that other
    /// services share, where each executor adds its own.
    pub fn check_given(&self) -> Result<Gate, ExecutorError> {
        if self.name.is_empty() {
            return Err(config("executor.name: must not be empty"));
        }
        if self.group_id.as_deref() == Some("") {
            return Err(config("executor.group_id: must not be empty"));
        }
        let gate = self.gate()?;
        if self.backoff.max_attempts == 0 {
            return Err(config("executor.backoff.max_attempts: must be at least 1"));
        }
        if self.backoff.initial_ms > self.backoff.max_ms {
            return Err(config(format!(
                "executor.backoff.initial_ms: {} is above max_ms {}",
                self.backoff.initial_ms, self.backoff.max_ms
            )));
        }
        if let Some(backend) = &self.backend {
            backend.validate()?;
        }
        Ok(gate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{ExecSettings, HttpSettings, SimulatorSettings};

    use unicron_core::signing::CommandSigner;

    fn key() -> String {
        hex::encode(
            CommandSigner::from_seed("k1", [3; 32])
                .verifying_key()
                .as_bytes(),
        )
    }

    fn valid() -> ExecutorSettings {
        let mut settings = ExecutorSettings {
            cluster: "a".into(),
            backend: Some(BackendSettings::Http(HttpSettings {
                url: "https://ops.example/act".into(),
                timeout_s: 30.0,
            })),
            ..ExecutorSettings::default()
        };
        settings.public_keys.insert("k1".into(), key());
        settings
    }

    fn error(settings: &ExecutorSettings) -> String {
        settings.build().err().unwrap().to_string()
    }

    #[test]
    fn cluster_and_backend_have_no_default() {
        let mut settings = ExecutorSettings::default();
        settings.public_keys.insert("k1".into(), key());
        settings.check_given().unwrap();
        assert_eq!(
            error(&settings),
            "executor.cluster: required (the cluster this executor acts for)"
        );
        settings.cluster = "a".into();
        assert!(
            error(&settings).starts_with("executor.backend: required"),
            "{}",
            error(&settings)
        );
        // The simulator is chosen, never assumed, and names its address.
        assert!(toml::from_str::<BackendSettings>("kind = \"simulator\"").is_err());
        settings.backend = Some(
            toml::from_str("kind = \"simulator\"\nurl = \"http://127.0.0.1:8090/actions\"")
                .unwrap(),
        );
        settings.build().unwrap();
        assert_eq!(settings.group(), "unicron-executor.a");
        assert_eq!(settings.gate().unwrap().cluster(), "a");
    }

    #[test]
    fn backends_parse_from_toml() {
        let settings: ExecutorSettings = toml::from_str(&format!(
            r#"
            cluster = "a"
            public_keys = {{ k1 = "{}" }}
            backend = {{ kind = "exec", program = "/bin/act", args = ["{{action}}", "--nodes={{nodes}}"] }}
            "#,
            key()
        ))
        .unwrap();
        settings.build().unwrap();
        assert!(
            matches!(&settings.backend, Some(BackendSettings::Exec(e)) if e.timeout_s == 300.0)
        );
        let http: BackendSettings = toml::from_str(
            r#"kind = "http"
url = "https://ops.example/act""#,
        )
        .unwrap();
        assert_eq!(
            http,
            BackendSettings::Http(HttpSettings {
                url: "https://ops.example/act".into(),
                timeout_s: 30.0
            })
        );
        assert!(
            toml::from_str::<BackendSettings>("kind = \"http\"\nurl = \"x\"\nretries = 3").is_err()
        );
    }

    #[test]
    fn errors_name_the_field() {
        let mut s = valid();
        s.public_keys.insert("k2".into(), "abc".into());
        assert_eq!(error(&s), "executor.public_keys.k2: not 64 hex digits");

        let mut s = valid();
        s.public_keys.clear();
        assert!(error(&s).starts_with("executor.public_keys: "));

        let mut s = valid();
        s.command_ttl_s = 0.0;
        assert!(
            error(&s).starts_with("executor.command_ttl_s: "),
            "{}",
            error(&s)
        );

        let mut s = valid();
        s.backend = Some(BackendSettings::Http(HttpSettings {
            url: "not a url".into(),
            timeout_s: 1.0,
        }));
        assert!(
            error(&s).starts_with("executor.backend.url: "),
            "{}",
            error(&s)
        );

        let mut s = valid();
        s.backend = Some(BackendSettings::Simulator(SimulatorSettings {
            url: "ftp://h/x".into(),
        }));
        assert!(error(&s).contains("not http or https"), "{}", error(&s));

        let mut s = valid();
        s.backend = Some(BackendSettings::Exec(ExecSettings {
            program: "act".into(),
            args: vec!["{job}".into(), "{jobs}".into()],
            timeout_s: 1.0,
        }));
        assert!(
            error(&s).starts_with("executor.backend.args[1]: unknown placeholder {jobs}"),
            "{}",
            error(&s)
        );

        let mut s = valid();
        s.backoff.max_attempts = 0;
        assert!(error(&s).starts_with("executor.backoff.max_attempts"));
    }
}
