use thiserror::Error;

/// What went wrong talking to the API server. Every variant names the verb
/// and the resource, so a command's failed result says what was refused.
#[derive(Debug, Error)]
pub enum KubeError {
    /// A kubeconfig that cannot be read, or no way to reach a cluster.
    #[error("kubernetes: {0}")]
    Config(String),
    /// The API server did not answer (connection refused, reset, TLS).
    #[error("{verb} {resource}: API server unreachable: {message}")]
    Unreachable {
        verb: String,
        resource: String,
        message: String,
    },
    /// No answer within the call's timeout.
    #[error("{verb} {resource}: no answer within {seconds} s")]
    Timeout {
        verb: String,
        resource: String,
        seconds: f64,
    },
    /// RBAC said no: final, never retried.
    #[error("{verb} {resource}: forbidden: {message}")]
    Forbidden {
        verb: String,
        resource: String,
        message: String,
    },
    /// Any other answer of the API server.
    #[error("{verb} {resource}: {code} {reason}: {message}")]
    Api {
        verb: String,
        resource: String,
        code: u16,
        reason: String,
        message: String,
    },
}

impl KubeError {
    /// Trouble that may pass (unreachable, timeout, 5xx, 429, and a 409 that
    /// outlasted the fresh reads of one attempt): retried by the executor's
    /// backoff. A 403, a 404 or a 422 is final.
    pub fn passing(&self) -> bool {
        match self {
            KubeError::Unreachable { .. } | KubeError::Timeout { .. } => true,
            KubeError::Api { code, .. } => matches!(code, 409 | 429) || *code >= 500,
            KubeError::Forbidden { .. } | KubeError::Config(_) => false,
        }
    }

    /// The HTTP status the API server answered with, if it answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            KubeError::Forbidden { .. } => Some(403),
            KubeError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub(crate) fn from_kube(verb: &str, resource: &str, error: kube::Error) -> KubeError {
        let (verb, resource) = (verb.to_string(), resource.to_string());
        match error {
            kube::Error::Api(status) if status.code == 403 => KubeError::Forbidden {
                verb,
                resource,
                message: status.message,
            },
            kube::Error::Api(status) => KubeError::Api {
                verb,
                resource,
                code: status.code,
                reason: status.reason,
                message: status.message,
            },
            other => KubeError::Unreachable {
                verb,
                resource,
                message: other.to_string(),
            },
        }
    }
}
