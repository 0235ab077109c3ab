//! One connection to an API server, and every call through it bounded by
//! a timeout and mapped to a [`KubeError`] that names verb and resource.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::KubeError;

/// Where the API server is and how long a call may take; the executor's
/// Kubernetes backend and `kube-watch` share it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSettings {
    /// A kubeconfig file; unset: `KUBECONFIG`, `~/.kube/config`, or the
    /// pod's service account when running in a cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context; unset: its current context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Namespaces whose workloads unicron watches and acts on. Nodes are
    /// cluster-wide.
    pub namespaces: Vec<String>,
    /// Seconds each API call may take.
    pub timeout_s: f64,
}

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            kubeconfig: None,
            context: None,
            namespaces: vec!["default".to_string()],
            timeout_s: 10.0,
        }
    }
}

impl ApiSettings {
    /// The first setting that makes no sense, named under `section`.
    pub fn validate(&self, section: &str) -> Result<(), String> {
        if !(self.timeout_s.is_finite() && self.timeout_s > 0.0 && self.timeout_s < 1e6) {
            return Err(format!(
                "{section}.timeout_s: must be a positive number of seconds, got {}",
                self.timeout_s
            ));
        }
        if self.namespaces.is_empty() {
            return Err(format!(
                "{section}.namespaces: at least one namespace (the workloads' namespaces)"
            ));
        }
        if let Some(bad) = self.namespaces.iter().find(|n| !is_dns_label(n)) {
            return Err(format!(
                "{section}.namespaces: `{bad}` is not a namespace name (lower-case letters, digits and '-', at most 63)"
            ));
        }
        Ok(())
    }
}

fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// A client of one API server with the call timeout of its settings.
#[derive(Clone)]
pub struct Kube {
    pub client: kube::Client,
    pub namespaces: Vec<String>,
    pub(crate) timeout: Duration,
}

impl Kube {
    /// Connects as `settings` say. Nothing is sent yet: an unreachable API
    /// server shows at the first call.
    pub async fn connect(settings: &ApiSettings) -> Result<Kube, KubeError> {
        let options = kube::config::KubeConfigOptions {
            context: settings.context.clone(),
            ..Default::default()
        };
        let mut config = match &settings.kubeconfig {
            Some(path) => {
                let file = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                    KubeError::Config(format!("kubeconfig {}: {e}", path.display()))
                })?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| KubeError::Config(format!("kubeconfig {}: {e}", path.display())))?
            }
            None if settings.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| KubeError::Config(e.to_string()))?,
            None => kube::Config::infer()
                .await
                .map_err(|e| KubeError::Config(e.to_string()))?,
        };
        let timeout = Duration::from_secs_f64(settings.timeout_s);
        config.connect_timeout = Some(timeout);
        // No read timeout: a watch is quiet for minutes; each call has
        // its own bound (`call`).
        config.write_timeout = Some(timeout);
        let client =
            kube::Client::try_from(config).map_err(|e| KubeError::Config(e.to_string()))?;
        Ok(Kube {
            client,
            namespaces: settings.namespaces.clone(),
            timeout,
        })
    }

    /// Runs one API call with the timeout; errors name `verb` and `resource`.
    pub async fn call<T>(
        &self,
        verb: &str,
        resource: &str,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, KubeError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(KubeError::from_kube(verb, resource, error)),
            Err(_) => Err(KubeError::Timeout {
                verb: verb.to_string(),
                resource: resource.to_string(),
                seconds: self.timeout.as_secs_f64(),
            }),
        }
    }
}
