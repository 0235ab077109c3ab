//! The pre-flight check a `check_node` command asks for: the script beside
//! this file, run under the node's Python with a time bound. The agent
//! measures and reports; the planner judges (so replay agrees).

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::process::Command;
use unicron_core::NodeCheck;
use unicron_core::agent::CheckRole;

use crate::settings::AgentSettings;

/// The check itself: GPU tools where present, matmul, memory, all-reduce.
const SCRIPT: &str = include_str!("preflight.py");

/// What the script prints.
#[derive(Debug, Default, Deserialize)]
struct Printed {
    #[serde(default)]
    failures: Vec<String>,
    #[serde(default)]
    skipped: Vec<String>,
    matmul_gflops: Option<f64>,
    memory_gbps: Option<f64>,
    allreduce_gbps: Option<f64>,
}

/// Runs this node's part of `role` and returns what the checked node
/// reports. Anything that stops the script is a failure with its reason.
pub async fn run(settings: &AgentSettings, role: &CheckRole) -> NodeCheck {
    let started = Instant::now();
    let printed = match script(settings, role).await {
        Ok(printed) => printed,
        Err(why) => Printed {
            failures: vec![format!("check could not run: {why}")],
            ..Printed::default()
        },
    };
    NodeCheck {
        command_id: Some(role.command_id.clone()),
        duration_ms: started.elapsed().as_millis() as i64,
        failures: printed.failures,
        skipped: printed.skipped,
        matmul_gflops: printed.matmul_gflops,
        memory_gbps: printed.memory_gbps,
        allreduce_gbps: printed.allreduce_gbps,
        peer: role.peer.clone(),
    }
}

async fn script(settings: &AgentSettings, role: &CheckRole) -> Result<Printed, String> {
    let mut command = Command::new(&settings.preflight_python);
    command
        .arg("-c")
        .arg(SCRIPT)
        .arg("--seconds")
        .arg(settings.preflight_part_s.to_string())
        .arg("--pair-rank")
        .arg(role.pair_rank.to_string())
        .arg("--peer-timeout")
        .arg(settings.preflight_timeout_s.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let (Some(addr), Some(port)) = (&role.master_addr, role.master_port) {
        command
            .arg("--master-addr")
            .arg(addr)
            .arg("--master-port")
            .arg(port.to_string());
    }
    if role.pair_rank > 0 {
        command.arg("--peer-only");
    }
    let child = command
        .spawn()
        .map_err(|e| format!("{}: {e}", settings.preflight_python))?;
    let bound = Duration::from_secs_f64(settings.preflight_timeout_s);
    let output = tokio::time::timeout(bound, child.wait_with_output())
        .await
        .map_err(|_| format!("timed out after {} s", settings.preflight_timeout_s))?
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    match line {
        Some(line) => serde_json::from_str(line).map_err(|e| format!("unreadable report: {e}")),
        None => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: String = stderr.trim().chars().rev().take(300).collect();
            Err(format!(
                "exited {} with no report: {}",
                output.status,
                tail.chars().rev().collect::<String>()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian's system Python, which imports Debian's `python3-torch`.
    const PYTHON: &str = "/usr/bin/python3";

    fn settings(python: &str) -> AgentSettings {
        AgentSettings {
            preflight_python: python.into(),
            preflight_part_s: 0.2,
            preflight_timeout_s: 60.0,
            ..AgentSettings::default()
        }
    }

    fn role(pair_rank: u32, port: u16) -> CheckRole {
        CheckRole {
            command_id: "c:a:1".into(),
            node: "n1".into(),
            peer: Some("n2".into()),
            pair_rank,
            master_addr: Some("127.0.0.1".into()),
            master_port: Some(port),
        }
    }

    #[tokio::test]
    async fn a_pair_measures_matmul_memory_and_all_reduce_under_real_torch() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let settings = settings(PYTHON);
        let (checked_node, peer) = (role(0, port), role(1, port));
        let (checked, _) = tokio::join!(run(&settings, &checked_node), run(&settings, &peer));
        assert!(checked.failures.is_empty(), "{checked:#?}");
        for figure in [
            checked.matmul_gflops,
            checked.memory_gbps,
            checked.allreduce_gbps,
        ] {
            assert!(figure.is_some_and(|f| f > 0.0), "{checked:#?}");
        }
        assert_eq!(checked.command_id.as_deref(), Some("c:a:1"));
        assert_eq!(checked.peer.as_deref(), Some("n2"));
        // No NVIDIA driver on this machine: said so, not passed silently.
        assert!(
            checked.skipped.iter().any(|s| s.starts_with("gpu: ")),
            "{checked:#?}"
        );
    }

    #[tokio::test]
    async fn a_check_that_cannot_run_or_finish_fails_with_its_reason() {
        let mut lone = role(0, 1);
        lone.master_addr = None;
        let missing = run(&settings("/nonexistent/python3"), &lone).await;
        assert!(
            missing.failures[0].starts_with("check could not run: /nonexistent/python3"),
            "{missing:#?}"
        );
        // The peer never comes: the whole check's time bound ends it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let mut bounded = settings(PYTHON);
        bounded.preflight_timeout_s = 4.0;
        let waited = run(&bounded, &role(0, port)).await;
        assert_eq!(waited.failures.len(), 1, "{waited:#?}");
        assert!(
            waited.failures[0].contains("timed out after 4 s")
                || waited.failures[0].starts_with("all-reduce: could not run"),
            "{waited:#?}"
        );
    }
}
