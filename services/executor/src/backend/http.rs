//! The HTTP backend: `POST` an [`ActionRequest`] as JSON, read an
//! [`ActionResponse`]. Also the simulator's backend.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::HeaderValue;
use unicron_core::Command;
use unicron_core::executor::{ActionRequest, ActionResponse};

use serde::{Deserialize, Serialize};

use super::{ActionBackend, Attempt, Attempting, BackendKind, tail};
use crate::check::{config, seconds};
use crate::error::ExecutorError;

/// Request timeout of the HTTP and simulator backends, seconds.
const DEFAULT_TIMEOUT_S: f64 = 30.0;

/// `kind = "http"`: `POST url` with the JSON contract of
/// `docs/executor.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    pub url: String,
    #[serde(default = "default_timeout_s")]
    pub timeout_s: f64,
}

/// `kind = "simulator"`: the HTTP backend pointed at `unicron-simulator`
/// (`unicron sim`); `unicron up` sets it for its own simulator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulatorSettings {
    pub url: String,
}

fn default_timeout_s() -> f64 {
    DEFAULT_TIMEOUT_S
}

impl BackendKind for HttpSettings {
    fn validate(&self) -> Result<(), ExecutorError> {
        http_url(&self.url)?;
        seconds("executor.backend.timeout_s", self.timeout_s)
    }

    fn describe(&self) -> String {
        format!("http {}", self.url)
    }

    fn build(&self) -> Result<Box<dyn ActionBackend>, ExecutorError> {
        let timeout = Duration::from_secs_f64(self.timeout_s);
        Ok(Box::new(HttpBackend::new(&self.url, timeout)?))
    }
}

impl BackendKind for SimulatorSettings {
    fn validate(&self) -> Result<(), ExecutorError> {
        http_url(&self.url)
    }

    fn describe(&self) -> String {
        format!("simulator {}", self.url)
    }

    fn build(&self) -> Result<Box<dyn ActionBackend>, ExecutorError> {
        let timeout = Duration::from_secs_f64(DEFAULT_TIMEOUT_S);
        Ok(Box::new(HttpBackend::new(&self.url, timeout)?))
    }
}

fn http_url(url: &str) -> Result<(), ExecutorError> {
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => Ok(()),
        Ok(parsed) => Err(config(format!(
            "executor.backend.url: scheme `{}` is not http or https",
            parsed.scheme()
        ))),
        Err(e) => Err(config(format!("executor.backend.url: `{url}`: {e}"))),
    }
}

impl ActionBackend for HttpBackend {
    fn attempt<'a>(&'a self, command: &'a Command, attempt: u32) -> Attempting<'a> {
        Box::pin(HttpBackend::attempt(self, command, attempt))
    }
}

/// Header carrying the command id: backends act once per value.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

pub struct HttpBackend {
    client: reqwest::Client,
    url: reqwest::Url,
    timeout: Duration,
}

impl HttpBackend {
    pub fn new(url: &str, timeout: Duration) -> Result<HttpBackend, ExecutorError> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| ExecutorError::Config(format!("executor.backend.url: `{url}`: {e}")))?;
        let client = reqwest::Client::builder()
            .timeout(timeout)
            // A redirected POST may become a GET: an answer, not a detour.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ExecutorError::Config(format!("executor.backend: http client: {e}")))?;
        Ok(HttpBackend {
            client,
            url,
            timeout,
        })
    }

    pub(crate) async fn attempt(&self, command: &Command, attempt: u32) -> Attempt {
        let Ok(key) = HeaderValue::from_str(&command.id) else {
            return Attempt::failed(format!(
                "command id `{}` cannot be sent as an HTTP header",
                command.id.escape_debug()
            ));
        };
        let sent = self
            .client
            .post(self.url.clone())
            .header(IDEMPOTENCY_KEY, key)
            .json(&ActionRequest::new(command, attempt))
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => return Attempt::Transient(self.describe(&e)),
        };
        let status = response.status();
        let body = match response.text().await {
            Ok(body) => body,
            Err(e) => return Attempt::Transient(self.describe(&e)),
        };
        answer(status, &body)
    }

    fn describe(&self, error: &reqwest::Error) -> String {
        if error.is_timeout() {
            return format!(
                "no answer from {} within {}s",
                self.url,
                self.timeout.as_secs_f64()
            );
        }
        // reqwest's own text is generic; the cause is down the chain.
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}

/// What a status and body mean (the contract in `docs/executor.md`).
fn answer(status: StatusCode, body: &str) -> Attempt {
    if status.is_success() {
        return match serde_json::from_str::<ActionResponse>(body) {
            Ok(response) => Attempt::Answer {
                outcome: response.status,
                reason: response.reason,
                duration_ms: response.duration_ms,
                completed_ms: response.completed_ms,
            },
            Err(e) => Attempt::failed(format!(
                "backend answered HTTP {} with an unreadable body ({e}): {}",
                status.as_u16(),
                tail(body)
            )),
        };
    }
    let text = format!("HTTP {}: {}", status.as_u16(), tail(body));
    let transient = status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS;
    if transient {
        Attempt::Transient(text)
    } else {
        Attempt::failed(format!("backend refused: {text}"))
    }
}

#[cfg(test)]
mod tests {
    use unicron_core::executor::Outcome;

    use super::*;

    #[test]
    fn statuses_map_to_answers_failures_and_retries() {
        assert_eq!(
            answer(
                StatusCode::OK,
                r#"{"status":"succeeded","duration_ms":1200}"#
            ),
            Attempt::Answer {
                outcome: Outcome::Succeeded,
                reason: None,
                duration_ms: Some(1200),
                completed_ms: None
            }
        );
        assert_eq!(
            answer(StatusCode::BAD_REQUEST, "no such job\n"),
            Attempt::failed("backend refused: HTTP 400: no such job".into())
        );
        assert!(matches!(
            answer(StatusCode::SERVICE_UNAVAILABLE, ""),
            Attempt::Transient(t) if t == "HTTP 503: "
        ));
        assert!(matches!(
            answer(StatusCode::TOO_MANY_REQUESTS, "slow down"),
            Attempt::Transient(_)
        ));
        assert!(matches!(
            answer(StatusCode::OK, "ok"),
            Attempt::Answer { outcome: Outcome::Failed, reason: Some(r), .. } if r.contains("unreadable body")
        ));
        assert!(matches!(
            answer(StatusCode::FOUND, ""),
            Attempt::Answer {
                outcome: Outcome::Failed,
                ..
            }
        ));
    }
}
