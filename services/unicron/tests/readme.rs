//! The README's two commands, as a newcomer runs them: the run command is
//! read from README.md and run (with the built binary in place of its
//! cargo prefix, and a one-minute duration), so the README cannot drift
//! from the code; its output must be the quiet demo the README promises.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use unicron_core::{FailureKind, Severity};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The shell lines of the fenced blocks under the README's "The two
/// commands" heading, in order.
fn two_commands() -> Vec<String> {
    let readme = read("README.md");
    let section = readme
        .split("\n## The two commands")
        .nth(1)
        .expect("README.md has a `## The two commands` section");
    let section = section.split("\n## ").next().unwrap();
    let mut lines = Vec::new();
    let mut fenced = false;
    for line in section.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if fenced && !line.trim().is_empty() {
            lines.push(line.trim().to_string());
        }
    }
    lines
}

/// What `./dev up ARGS` runs: `cargo run --release --locked -- up ARGS`.
const RUN_PREFIX: &str = "./dev up";
const CARGO_RUN_UP: &str = "exec cargo run --release --locked -- up \"$@\"";

#[test]
fn the_readme_names_the_run_and_test_commands_that_ci_and_dev_run() {
    let commands = two_commands();
    assert_eq!(commands, ["./dev up", "./dev test"], "README.md");
    let dev = read("dev");
    assert!(
        dev.contains(CARGO_RUN_UP),
        "dev no longer runs `{CARGO_RUN_UP}`"
    );
    assert!(
        dev.contains("cargo test --workspace --locked"),
        "dev test no longer runs the whole suite"
    );
    let ci = read(".ci/run");
    let last = ci.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert_eq!(
        last, "exec ./dev test",
        ".ci/run must run the README's test command"
    );
}

/// The README's run command for a minute: no set-up, failures of every
/// severity injected, detected and healed, and nothing on the terminal but
/// the run's own lines (no WARN or ERROR, nothing on stderr).
#[test]
fn the_readme_run_command_shows_every_severity_healed_quietly() {
    let line = two_commands()
        .into_iter()
        .find(|l| l.starts_with(RUN_PREFIX))
        .expect("a run command in README.md");
    let extra: Vec<&str> = line[RUN_PREFIX.len()..].split_whitespace().collect();
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("summary.json");
    // A fresh directory as the working directory, the default ports and
    // archive location: as a newcomer's first run (a taken port moves).
    let out = Command::new(env!("CARGO_BIN_EXE_unicron"))
        .arg("up")
        .args(&extra)
        .args(["--duration", "60s", "--summary-json"])
        .arg(&summary)
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stderr, "", "a clean run prints nothing on stderr");
    for word in ["WARN", "ERROR", "panicked"] {
        assert!(!stdout.contains(word), "{word} on the terminal:\n{stdout}");
    }
    assert!(
        stdout.contains("failures random, at 30x the paper setting's rate"),
        "{stdout}"
    );
    assert!(stdout.contains("| 30x paper rate"), "{stdout}");
    assert!(stdout.trim_end().ends_with("stopped"), "{stdout}");
    let log = stdout
        .lines()
        .find_map(|l| l.strip_prefix("logs: "))
        .and_then(|l| l.strip_suffix(" (-v to show them here)"))
        .unwrap_or_else(|| panic!("no `logs:` line:\n{stdout}"));
    let log = dir.path().join(log);
    assert!(log.is_file(), "{}", log.display());
    assert!(
        log.starts_with(dir.path().join("unicron-archive")),
        "{}",
        log.display()
    );

    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["arrivals"], "demo", "{s:#}");
    assert_eq!(s["failure_rate_vs_paper"], 30.0, "{s:#}");
    for severity in [Severity::Sev1, Severity::Sev2, Severity::Sev3] {
        let healed = s["faults"].as_array().unwrap().iter().any(|f| {
            let kind: FailureKind = serde_json::from_value(f["kind"].clone()).unwrap();
            unicron_simulator::faults::needs(kind) == severity
                && f["detected_ms"].is_i64()
                && f["resolved_ms"].is_i64()
        });
        assert!(
            healed,
            "no {severity} failure injected, detected and healed:\n{stdout}"
        );
    }
    assert_eq!(s["failed_actions"], 0, "{s:#}");
    assert_eq!(s["false_detections"], 0, "{s:#}");
}

/// `up --brokers` at an address where nothing listens: one line naming the
/// flag and the address, exit 2, well before the 10 s the wait allows.
#[test]
fn up_with_unreachable_brokers_says_so_in_one_line_and_exits_2() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap().to_string();
    drop(free);
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_unicron"))
        .args(["up", "--no-sim", "--no-archive", "--brokers", &addr])
        .current_dir(dir.path())
        .env("UNICRON_METRICS__LISTEN", "127.0.0.1:0")
        .env("UNICRON_STATUS__LISTEN", "127.0.0.1:0")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("still running after 10 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!("error: --brokers {addr}: ")),
        "{stderr}"
    );
}

/// A local demo does not stop because a default port is taken: it moves
/// to a free one and says so. A port the operator chose stays strict.
#[test]
fn busy_default_ports_move_and_chosen_ones_fail_in_one_line() {
    // Hold the defaults if free; if another program holds them, the same
    // holds for this test.
    let _status = std::net::TcpListener::bind("127.0.0.1:8080");
    let _metrics = std::net::TcpListener::bind("127.0.0.1:9898");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_unicron"))
        .args(["up", "--no-sim", "--no-archive", "--duration", "2s"])
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metrics = stdout.lines().find(|l| l.starts_with("metrics: ")).unwrap();
    assert!(
        metrics.ends_with("/metrics (port 9898 is in use)"),
        "{metrics}"
    );
    assert!(!metrics.contains(":9898/"), "{metrics}");
    let status = stdout.lines().find(|l| l.starts_with("status: ")).unwrap();
    assert!(
        status.ends_with("/ (port 8080 is in use; no tokens: loopback only)"),
        "{status}"
    );

    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let chosen = held.local_addr().unwrap().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_unicron"))
        .args(["up", "--no-sim", "--no-archive", "--duration", "2s"])
        .args(["--status", &chosen])
        .current_dir(dir.path())
        .env("UNICRON_METRICS__LISTEN", "127.0.0.1:0")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!("error: status.listen: cannot listen on {chosen}")),
        "{stderr}"
    );
}
