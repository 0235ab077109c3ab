//! Where actions are carried out: one attempt per call of a backend, and
//! the retry loop around it that turns transient trouble into a final
//! answer. Each backend is defined once, in its own module beside its
//! settings, and listed in `registry.rs`.

pub(crate) mod exec;
mod http;
mod kubernetes;
mod registry;
mod slurm;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use unicron_commands::Done;
use unicron_core::executor::{Backoff, Outcome, Part};
use unicron_core::{Command, CommandAction};

use crate::error::ExecutorError;
use crate::metrics::{BACKEND_SECONDS, RETRIES};

pub use exec::ExecSettings;
pub use http::{HttpSettings, SimulatorSettings};
pub use kubernetes::KubernetesSettings;
pub use registry::BackendSettings;
pub use slurm::SlurmSettings;

/// A kind of backend, as its settings: checked once, then built into the
/// backend the executor runs with.
pub(crate) trait BackendKind {
    /// The first setting that makes no sense, named as
    /// `executor.backend.FIELD`.
    fn validate(&self) -> Result<(), ExecutorError>;
    /// The backend in a few words, for a startup line.
    fn describe(&self) -> String;
    /// The backend of settings [`validate`](Self::validate) accepted.
    fn build(&self) -> Result<Box<dyn ActionBackend>, ExecutorError>;
}

/// One attempt at a command, in flight.
pub(crate) type Attempting<'a> = Pin<Box<dyn Future<Output = Attempt> + Send + 'a>>;

/// A built backend: it makes one attempt at a time; retries are
/// [`Backend::act`]'s.
pub(crate) trait ActionBackend: Send + Sync {
    /// Whether this backend answers `command`; most answer every one.
    fn part(&self, _command: &Command) -> Part {
        Part::Answer
    }
    /// One attempt at `command` (the first is 1).
    fn attempt<'a>(&'a self, command: &'a Command, attempt: u32) -> Attempting<'a>;
}

/// A scheduler's part where agents run the jobs (Slurm, Kubernetes): the
/// workers of a job unicron agents run (its start commands carry a
/// rendezvous) are the agents' to restart, and they answer for them; so
/// is a pause, which names no agent job apart from another: holding a job
/// its agents are stopping would end its allocation (Slurm) or delete the
/// pods the agents run in (Kubernetes). A pre-flight check is the agents'
/// alone.
pub(crate) fn beside_agents(command: &Command) -> Part {
    if command.rendezvous.is_some()
        || matches!(
            command.action,
            CommandAction::Pause | CommandAction::CheckNode
        )
    {
        Part::Skip
    } else {
        Part::Answer
    }
}

/// Bytes of a backend's error text (HTTP body, stderr) kept in a reason.
const REASON_TAIL_BYTES: usize = 512;

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// A final answer: not retried.
    Answer {
        outcome: Outcome,
        reason: Option<String>,
        duration_ms: Option<i64>,
        completed_ms: Option<i64>,
    },
    /// Trouble that may pass (backend down, 5xx, spawn failure): retried.
    Transient(String),
}

impl Attempt {
    /// A scheduler backend's answer: `Ok(Ok(what was done))`, `Ok(Err(why
    /// not))`, or an error, retried when `passing` says it may pass.
    fn from_scheduler<E: std::fmt::Display>(
        done: Result<Result<String, String>, E>,
        passing: impl Fn(&E) -> bool,
    ) -> Attempt {
        match done {
            Ok(Ok(reason)) => Attempt::Answer {
                outcome: Outcome::Succeeded,
                reason: Some(reason),
                duration_ms: None,
                completed_ms: None,
            },
            Ok(Err(reason)) => Attempt::failed(reason),
            Err(error) if passing(&error) => Attempt::Transient(error.to_string()),
            Err(error) => Attempt::failed(error.to_string()),
        }
    }

    fn failed(reason: String) -> Attempt {
        Attempt::Answer {
            outcome: Outcome::Failed,
            reason: Some(reason),
            duration_ms: None,
            completed_ms: None,
        }
    }
}

/// The configured backend.
pub struct Backend {
    inner: Box<dyn ActionBackend>,
}

impl Backend {
    /// The backend `executor.backend` describes (given as the setting or
    /// as the optional field of `ExecutorSettings`), checked; unset is an
    /// error.
    pub fn new<'a>(
        settings: impl Into<Option<&'a BackendSettings>>,
    ) -> Result<Backend, ExecutorError> {
        let Some(settings) = settings.into() else {
            return Err(ExecutorError::Config("executor.backend: required".into()));
        };
        settings.validate()?;
        Backend::checked(settings)
    }

    /// The backend of settings already validated (the executor's own, by
    /// `ExecutorSettings::build`), so they are not checked twice.
    pub(crate) fn checked(settings: &BackendSettings) -> Result<Backend, ExecutorError> {
        Ok(Backend {
            inner: settings.kind().build()?,
        })
    }

    /// Whether this backend answers `command`.
    pub fn part(&self, command: &Command) -> Part {
        self.inner.part(command)
    }

    /// Carries out `command`, retrying transient errors as `backoff` says.
    /// Dropping the future abandons the action (the request is cancelled,
    /// the process killed); the executor sends it again after a restart.
    pub async fn act(&self, command: &Command, backoff: &Backoff) -> Done {
        let started = Instant::now();
        let mut attempt = 1;
        let done = loop {
            let answer = self.inner.attempt(command, attempt).await;
            let measured_ms = started.elapsed().as_millis().min(i64::MAX as u128) as i64;
            match answer {
                Attempt::Answer {
                    outcome,
                    reason,
                    duration_ms,
                    completed_ms,
                } => {
                    break Done {
                        outcome,
                        reason,
                        duration_ms: duration_ms.unwrap_or(measured_ms),
                        completed_ms,
                    };
                }
                Attempt::Transient(why) => match backoff.delay_ms(attempt) {
                    Some(delay_ms) => {
                        tracing::warn!(command = %command.id, attempt, delay_ms, error = %why, "backend unavailable, retrying");
                        ::metrics::counter!(RETRIES.name).increment(1);
                        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                        attempt += 1;
                    }
                    None => {
                        break Done {
                            outcome: Outcome::Failed,
                            reason: Some(format!(
                                "backend unavailable after {attempt} attempts: {why}"
                            )),
                            duration_ms: measured_ms,
                            completed_ms: None,
                        };
                    }
                },
            }
        };
        ::metrics::histogram!(BACKEND_SECONDS.name).record(started.elapsed().as_secs_f64());
        done
    }
}

/// The last `REASON_TAIL_BYTES` of `text`, trimmed, cut at a character
/// boundary: the end of an error message is where the cause usually is.
fn tail(text: &str) -> &str {
    let text = text.trim();
    let mut start = text.len().saturating_sub(REASON_TAIL_BYTES);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beside_agents_their_starts_and_pauses_are_theirs() {
        let slurm = Backend::new(&BackendSettings::Slurm(SlurmSettings::default())).unwrap();
        let http = Backend::new(&BackendSettings::Http(HttpSettings {
            url: "http://127.0.0.1:1/act".into(),
            timeout_s: 1.0,
        }))
        .unwrap();
        let command = |action, rendezvous: bool| Command {
            id: "c".into(),
            cluster: "a".into(),
            decision_id: "d".into(),
            time_ms: 1,
            action,
            job: Some("gpt".into()),
            nodes: vec!["n1".into()],
            restore_from: None,
            causation: vec![],
            key_id: String::new(),
            signature: vec![],
            rendezvous: rendezvous.then(|| unicron_core::Rendezvous {
                generation: 2,
                master_addr: "n1".into(),
                master_port: 29502,
            }),
            snapshots: None,
        };
        for (action, rendezvous, part) in [
            (CommandAction::Reconfigure, true, Part::Skip),
            (CommandAction::Pause, false, Part::Skip),
            (CommandAction::IsolateNode, false, Part::Answer),
            (CommandAction::ReturnNode, false, Part::Answer),
            (CommandAction::Restart, false, Part::Answer),
            (CommandAction::CheckNode, false, Part::Skip),
        ] {
            assert_eq!(slurm.part(&command(action, rendezvous)), part, "{action:?}");
            assert_eq!(http.part(&command(action, rendezvous)), Part::Answer);
        }
    }

    #[test]
    fn tails_keep_the_end_at_a_char_boundary() {
        assert_eq!(tail("  short\n"), "short");
        let long = format!("{}é{}", "a".repeat(600), "b".repeat(510));
        let kept = tail(&long);
        assert!(kept.len() <= REASON_TAIL_BYTES);
        assert!(kept.ends_with("bbb"));
    }
}
