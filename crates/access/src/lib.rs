//! Who may use unicron's web surfaces (the status page, the remote-write
//! receiver): bearer tokens read from files, each granting every cluster or
//! a list of them. A surface with no tokens is open, and only allowed on a
//! loopback address: anything that can reach it can then read every
//! cluster's state or write any cluster's telemetry.
//!
//! A request presents its token as `Authorization: Bearer TOKEN` (curl,
//! Prometheus' `authorization` block) or as the password of HTTP Basic
//! (a browser's own prompt; the user name is ignored), so the status page
//! needs no login form. Tokens are kept as SHA-256 digests and compared in
//! constant time.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Shortest token accepted: guessing 16 random characters over the network
/// is out of reach; shorter ones are usually placeholders.
pub const MIN_TOKEN_LEN: usize = 16;

/// The realm a 401 names in `WWW-Authenticate`, so a browser prompts.
pub const REALM: &str = "unicron";

/// One token as configured (`[[status.tokens]]`, `[[remote_write.tokens]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Who holds it, for logs and metrics (never the token itself).
    pub name: String,
    /// A file holding the token on its first line (surrounding whitespace
    /// is ignored), readable by the service only.
    pub token_file: PathBuf,
    /// The clusters it grants; empty grants every cluster.
    #[serde(default)]
    pub clusters: Vec<String>,
}

/// What a token lets its holder see or write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every cluster, present and future.
    All,
    /// These clusters only.
    Clusters(BTreeSet<String>),
}

impl Scope {
    /// Whether `cluster` is within the scope.
    pub fn allows(&self, cluster: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Clusters(c) => c.contains(cluster),
        }
    }

    /// The one cluster of a scope of exactly one, which a writer's records
    /// are bound to.
    pub fn single(&self) -> Option<&str> {
        match self {
            Scope::Clusters(c) if c.len() == 1 => c.first().map(String::as_str),
            _ => None,
        }
    }
}

/// Whom a request was let in as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The token's `name`, or `loopback` on an open surface.
    pub name: String,
    pub scope: Scope,
}

/// Why a request was refused (answered 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("no credentials: send `Authorization: Bearer TOKEN`")]
    Missing,
    #[error(
        "credentials not understood: use `Bearer TOKEN` or HTTP Basic with the token as password"
    )]
    Malformed,
    #[error("unknown token")]
    Unknown,
}

impl Denied {
    /// A short label for metrics.
    pub fn reason(self) -> &'static str {
        match self {
            Denied::Missing => "missing",
            Denied::Malformed => "malformed",
            Denied::Unknown => "unknown_token",
        }
    }
}

/// A setting that cannot be used, naming its field.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct AccessError {
    pub field: String,
    pub reason: String,
}

/// The tokens of one surface.
#[derive(Debug, Clone)]
pub struct Gate {
    tokens: Vec<([u8; 32], Grant)>,
    open: Grant,
}

impl Gate {
    /// Reads `tokens` (configured as `field`, e.g. `status.tokens`) for a
    /// surface listening on `listen`. No tokens is allowed on loopback
    /// only; a token that is missing, short or used twice is an error.
    pub fn load(
        field: &str,
        tokens: &[TokenConfig],
        listen: SocketAddr,
    ) -> Result<Gate, AccessError> {
        if tokens.is_empty() && !listen.ip().is_loopback() {
            return Err(AccessError {
                field: field.to_string(),
                reason: format!(
                    "required when listening on {listen}, which is not a loopback address (add a token, or listen on 127.0.0.1)"
                ),
            });
        }
        let mut loaded: Vec<([u8; 32], Grant)> = Vec::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            let at = |key: &str| format!("{field}[{i}].{key}");
            if t.name.trim().is_empty() {
                return Err(AccessError {
                    field: at("name"),
                    reason: "must not be empty".into(),
                });
            }
            let token = read_token(&t.token_file).map_err(|reason| AccessError {
                field: at("token_file"),
                reason,
            })?;
            let digest = digest(token.as_bytes());
            if loaded.iter().any(|(d, _)| bool::from(d.ct_eq(&digest))) {
                return Err(AccessError {
                    field: at("token_file"),
                    reason: "the same token as an earlier entry: each holder needs its own".into(),
                });
            }
            if let Some(c) = t.clusters.iter().find(|c| c.trim().is_empty()) {
                return Err(AccessError {
                    field: at("clusters"),
                    reason: format!("{c:?} is not a cluster name"),
                });
            }
            let scope = if t.clusters.is_empty() {
                Scope::All
            } else {
                Scope::Clusters(t.clusters.iter().cloned().collect())
            };
            loaded.push((
                digest,
                Grant {
                    name: t.name.clone(),
                    scope,
                },
            ));
        }
        Ok(Gate {
            tokens: loaded,
            open: Grant {
                name: "loopback".into(),
                scope: Scope::All,
            },
        })
    }

    /// A gate with no tokens, for a surface on loopback.
    pub fn open() -> Gate {
        Gate {
            tokens: Vec::new(),
            open: Grant {
                name: "loopback".into(),
                scope: Scope::All,
            },
        }
    }

    /// Whether the surface asks for no credentials.
    pub fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// How many tokens it knows.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether it knows no token (then it is open).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The grant of a request's `Authorization` header value.
    pub fn check(&self, authorization: Option<&str>) -> Result<&Grant, Denied> {
        if self.tokens.is_empty() {
            return Ok(&self.open);
        }
        let presented = presented_token(authorization.ok_or(Denied::Missing)?)?;
        let digest = digest(presented.as_bytes());
        // Every entry is compared, so the time taken says nothing of which.
        let mut found = None;
        for (d, grant) in &self.tokens {
            if bool::from(d.ct_eq(&digest)) {
                found = Some(grant);
            }
        }
        found.ok_or(Denied::Unknown)
    }
}

/// The token of a `Bearer` or `Basic` header value.
fn presented_token(value: &str) -> Result<String, Denied> {
    let value = value.trim();
    let (scheme, rest) = value.split_once(' ').ok_or(Denied::Malformed)?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") && !rest.is_empty() {
        return Ok(rest.to_string());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .map_err(|_| Denied::Malformed)?;
        let text = String::from_utf8(decoded).map_err(|_| Denied::Malformed)?;
        let (_, password) = text.split_once(':').ok_or(Denied::Malformed)?;
        if !password.is_empty() {
            return Ok(password.to_string());
        }
    }
    Err(Denied::Malformed)
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// The token in `path`: its first line, trimmed, long enough.
fn read_token(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.starts_with("REPLACE_WITH") {
        return Err(format!(
            "{}: still the deployment template's placeholder; put a token there (`openssl rand -hex 32`)",
            path.display()
        ));
    }
    if token.len() < MIN_TOKEN_LEN {
        return Err(format!(
            "{}: the token must be at least {MIN_TOKEN_LEN} characters on the first line (it is {})",
            path.display(),
            token.len()
        ));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(dir: &Path, file: &str, text: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn config(name: &str, file: PathBuf, clusters: &[&str]) -> TokenConfig {
        TokenConfig {
            name: name.into(),
            token_file: file,
            clusters: clusters.iter().map(|c| c.to_string()).collect(),
        }
    }

    const PUBLIC: &str = "0.0.0.0:8080";
    const LOOPBACK: &str = "127.0.0.1:8080";

    #[test]
    fn tokens_grant_their_clusters_by_bearer_or_basic() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = [
            config(
                "ops",
                token(dir.path(), "ops", "ops-token-0123456789\n"),
                &[],
            ),
            config(
                "team-a",
                token(dir.path(), "a", "  a-token-0123456789  \n# note\n"),
                &["a"],
            ),
        ];
        let gate = Gate::load("status.tokens", &tokens, PUBLIC.parse().unwrap()).unwrap();
        assert!(!gate.is_open());
        let ops = gate.check(Some("Bearer ops-token-0123456789")).unwrap();
        assert_eq!((ops.name.as_str(), &ops.scope), ("ops", &Scope::All));
        let basic = base64::engine::general_purpose::STANDARD.encode("anyone:a-token-0123456789");
        let a = gate.check(Some(&format!("Basic {basic}"))).unwrap();
        assert_eq!(a.name, "team-a");
        assert!(a.scope.allows("a") && !a.scope.allows("b"));
        assert_eq!(a.scope.single(), Some("a"));
        assert_eq!(gate.check(None), Err(Denied::Missing));
        assert_eq!(
            gate.check(Some("Bearer ops-token-012345678")),
            Err(Denied::Unknown)
        );
        assert_eq!(gate.check(Some("Token x")), Err(Denied::Malformed));
        assert_eq!(gate.check(Some("Basic !!!")), Err(Denied::Malformed));
    }

    #[test]
    fn no_tokens_is_open_on_loopback_and_an_error_elsewhere() {
        let open = Gate::load("status.tokens", &[], LOOPBACK.parse().unwrap()).unwrap();
        assert!(open.is_open());
        assert_eq!(open.check(None).unwrap().scope, Scope::All);
        let err = Gate::load("status.tokens", &[], PUBLIC.parse().unwrap()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("status.tokens: required when listening on 0.0.0.0:8080"),
            "{err}"
        );
        let v6 = Gate::load("remote_write.tokens", &[], "[::1]:9201".parse().unwrap());
        assert!(v6.unwrap().is_open());
    }

    #[test]
    fn bad_token_files_name_their_entry() {
        let dir = tempfile::tempdir().unwrap();
        let short = [config("x", token(dir.path(), "s", "short"), &[])];
        let err = Gate::load("status.tokens", &short, PUBLIC.parse().unwrap()).unwrap_err();
        assert!(
            err.to_string().starts_with("status.tokens[0].token_file: "),
            "{err}"
        );
        assert!(err.to_string().contains("at least 16"), "{err}");
        let missing = [config("x", dir.path().join("nope"), &[])];
        let err = Gate::load("status.tokens", &missing, PUBLIC.parse().unwrap()).unwrap_err();
        assert!(err.to_string().contains("cannot read"), "{err}");
        let same = token(dir.path(), "t", "the-same-token-0123");
        let twice = [config("x", same.clone(), &[]), config("y", same, &["a"])];
        let err = Gate::load("status.tokens", &twice, PUBLIC.parse().unwrap()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("status.tokens[1].token_file: the same token"),
            "{err}"
        );
        let template = [config(
            "x",
            token(dir.path(), "p", "REPLACE_WITH_A_TOKEN\n"),
            &[],
        )];
        let err = Gate::load("status.tokens", &template, PUBLIC.parse().unwrap()).unwrap_err();
        assert!(err.to_string().contains("placeholder"), "{err}");
        let nameless = [config(
            " ",
            token(dir.path(), "n", "nameless-token-0123"),
            &[],
        )];
        let err = Gate::load("status.tokens", &nameless, PUBLIC.parse().unwrap()).unwrap_err();
        assert_eq!(err.field, "status.tokens[0].name");
    }
}
