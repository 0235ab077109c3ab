//! The exec backend: runs a program per attempt with the command in its
//! arguments (templates) and environment. No shell is involved, so values
//! cannot be interpreted as shell syntax unless the operator asks for a
//! shell (`sh -c`), where `$UNICRON_*` is the safe way in.

use std::process::Stdio;
use std::time::Duration;

use unicron_core::Command;
use unicron_core::executor::Outcome;

use serde::{Deserialize, Serialize};

use super::{ActionBackend, Attempt, Attempting, BackendKind, tail};
use crate::check::{config, seconds};
use crate::error::ExecutorError;

/// The names an exec backend's arguments may hold as `{name}`, each also
/// passed as `UNICRON_<NAME>`.
pub const PLACEHOLDERS: [&str; 8] = [
    "command_id",
    "cluster",
    "action",
    "job",
    "nodes",
    "restore_from",
    "decision_id",
    "time_ms",
];

/// `kind = "exec"`: runs `program` with templated `args` (no shell), once
/// per attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecSettings {
    pub program: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default = "default_timeout_s")]
    pub timeout_s: f64,
}

fn default_timeout_s() -> f64 {
    300.0
}

impl BackendKind for ExecSettings {
    fn validate(&self) -> Result<(), ExecutorError> {
        if self.program.is_empty() {
            return Err(config("executor.backend.program: must not be empty"));
        }
        for (i, arg) in self.args.iter().enumerate() {
            if let Some(name) = unknown_placeholder(arg) {
                return Err(config(format!(
                    "executor.backend.args[{i}]: unknown placeholder {{{name}}} (known: {})",
                    PLACEHOLDERS.join(" ")
                )));
            }
        }
        seconds("executor.backend.timeout_s", self.timeout_s)
    }

    fn describe(&self) -> String {
        format!("exec {}", self.program)
    }

    fn build(&self) -> Result<Box<dyn ActionBackend>, ExecutorError> {
        Ok(Box::new(ExecBackend::new(
            &self.program,
            &self.args,
            Duration::from_secs_f64(self.timeout_s),
        )))
    }
}

/// The first `{name}` in `arg` that is not a known placeholder.
fn unknown_placeholder(arg: &str) -> Option<&str> {
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after.find('}')?;
        let name = &after[..close];
        if !PLACEHOLDERS.contains(&name) {
            return Some(name);
        }
        rest = &after[close + 1..];
    }
    None
}

impl ActionBackend for ExecBackend {
    fn attempt<'a>(&'a self, command: &'a Command, attempt: u32) -> Attempting<'a> {
        Box::pin(ExecBackend::attempt(self, command, attempt))
    }
}

pub struct ExecBackend {
    program: String,
    args: Vec<String>,
    timeout: Duration,
}

impl ExecBackend {
    pub fn new(program: &str, args: &[String], timeout: Duration) -> ExecBackend {
        ExecBackend {
            program: program.to_string(),
            args: args.to_vec(),
            timeout,
        }
    }

    pub(crate) async fn attempt(&self, command: &Command, attempt: u32) -> Attempt {
        let values = values(command);
        let mut process = tokio::process::Command::new(&self.program);
        process
            .args(self.args.iter().map(|arg| render(arg, &values)))
            .envs(
                values
                    .iter()
                    .map(|(name, value)| (format!("UNICRON_{}", name.to_uppercase()), value)),
            )
            .env("UNICRON_ATTEMPT", attempt.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // A timed-out or abandoned attempt must not keep acting.
            .kill_on_drop(true);
        let child = match process.spawn() {
            Ok(child) => child,
            Err(e) => return Attempt::Transient(format!("cannot start `{}`: {e}", self.program)),
        };
        let output = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => {
                return Attempt::Transient(format!("waiting for `{}`: {e}", self.program));
            }
            Err(_) => {
                return Attempt::failed(format!("timed out after {}s", self.timeout.as_secs_f64()));
            }
        };
        if output.status.success() {
            return Attempt::Answer {
                outcome: Outcome::Succeeded,
                reason: None,
                duration_ms: None,
                completed_ms: None,
            };
        }
        let how = match output.status.code() {
            Some(code) => format!("exit code {code}"),
            None => signal(&output.status),
        };
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stderr = tail(&stderr);
        Attempt::failed(if stderr.is_empty() {
            format!("`{}` failed: {how}", self.program)
        } else {
            format!("`{}` failed: {how}: {stderr}", self.program)
        })
    }
}

#[cfg(unix)]
fn signal(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(signal) => format!("killed by signal {signal}"),
        None => format!("{status}"),
    }
}

#[cfg(not(unix))]
fn signal(status: &std::process::ExitStatus) -> String {
    format!("{status}")
}

/// The value of every placeholder for `command`; absent fields are empty.
fn values(command: &Command) -> [(&'static str, String); 8] {
    [
        ("command_id", command.id.clone()),
        ("cluster", command.cluster.clone()),
        ("action", command.action.symbol().to_string()),
        ("job", command.job.clone().unwrap_or_default()),
        ("nodes", command.nodes.join(",")),
        (
            "restore_from",
            command.restore_from.clone().unwrap_or_default(),
        ),
        ("decision_id", command.decision_id.clone()),
        ("time_ms", command.time_ms.to_string()),
    ]
}

/// `template` with each known `{name}` replaced; anything else is kept as
/// written (settings validation rejects unknown names).
fn render(template: &str, values: &[(&'static str, String)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open..];
        let known = after.find('}').and_then(|close| {
            let name = &after[1..close];
            values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, value)| (value, close))
        });
        match known {
            Some((value, close)) => {
                out.push_str(value);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use unicron_core::CommandAction;

    use super::*;

    fn command() -> Command {
        Command {
            id: "cmd-1".into(),
            cluster: "a".into(),
            decision_id: "d-1".into(),
            time_ms: 42,
            action: CommandAction::IsolateNode,
            job: None,
            nodes: vec!["n1".into(), "n2".into()],
            restore_from: None,
            causation: vec![],
            key_id: "k".into(),
            signature: vec![],
            rendezvous: None,
            snapshots: None,
        }
    }

    #[test]
    fn templates_are_filled_per_argument() {
        let values = values(&command());
        assert_eq!(
            render("--nodes={nodes} {action}@{time_ms}", &values),
            "--nodes=n1,n2 isolate_node@42"
        );
        assert_eq!(render("{job}", &values), "");
        assert_eq!(render("{x} {{cluster}} {", &values), "{x} {a} {");
        assert!(
            PLACEHOLDERS
                .iter()
                .all(|p| values.iter().any(|(n, _)| n == p))
        );
    }

    #[tokio::test]
    async fn exit_codes_stderr_and_timeouts_become_answers() {
        let sh = |script: &str, timeout_ms| {
            ExecBackend::new(
                "sh",
                &["-c".into(), script.into(), "sh".into(), "{action}".into()],
                Duration::from_millis(timeout_ms),
            )
        };
        let ok = sh(
            r#"test "$1" = isolate_node && test "$UNICRON_NODES" = n1,n2 && test "$UNICRON_ATTEMPT" = 2"#,
            5_000,
        );
        assert!(matches!(
            ok.attempt(&command(), 2).await,
            Attempt::Answer {
                outcome: Outcome::Succeeded,
                ..
            }
        ));
        let failed = sh("echo oops >&2; exit 3", 5_000)
            .attempt(&command(), 1)
            .await;
        assert_eq!(
            failed,
            Attempt::failed("`sh` failed: exit code 3: oops".into())
        );
        let slow = sh("sleep 5", 100).attempt(&command(), 1).await;
        assert_eq!(slow, Attempt::failed("timed out after 0.1s".into()));
        let missing = ExecBackend::new("/nonexistent/act", &[], Duration::from_secs(1))
            .attempt(&command(), 1)
            .await;
        assert!(matches!(missing, Attempt::Transient(t) if t.contains("cannot start")));
    }
}
