//! `unicron replay` of an archive recorded by commit bf74118
//! (`tests/fixtures/upgrade-bf74118`, made as its README says): the current
//! binary re-derives the old run's decisions and failures with no
//! divergence. The workspace test `upgrade_bf74118` compares the decisions
//! byte for byte and checks the old state dirs.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/upgrade-bf74118")
}

/// `unicron [--config FILE] replay --from-archive` of the old archive: its
/// exit status, stdout and JSON report.
fn replay(config: Option<&Path>) -> (bool, String, serde_json::Value) {
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("report.json");
    let mut command = Command::new(env!("CARGO_BIN_EXE_unicron"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("UNICRON_") {
            command.env_remove(key);
        }
    }
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let out = command
        .env_remove("RUST_LOG")
        .current_dir(tmp.path())
        .arg("replay")
        .arg("--from-archive")
        .arg(fixture().join("archive"))
        .arg("--json")
        .arg(&report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = std::fs::read(&report).unwrap_or_else(|e| {
        panic!(
            "no report ({e}): {}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (
        out.status.success(),
        stdout,
        serde_json::from_slice(&json).unwrap(),
    )
}

fn count(report: &serde_json::Value, stream: &str, field: &str) -> u64 {
    report[stream][field].as_u64().unwrap()
}

#[test]
fn replay_of_an_archive_recorded_by_bf74118_finds_no_divergence() {
    // With the detector thresholds the old run had, everything matches.
    let (ok, stdout, report) = replay(Some(&fixture().join("detector-bf74118.toml")));
    assert!(ok, "{stdout}");
    // The numbers of the recorded run (README).
    assert_eq!(count(&report, "decisions", "compared"), 44, "{stdout}");
    assert_eq!(count(&report, "decisions", "identical"), 44, "{stdout}");
    assert_eq!(count(&report, "decisions", "missing_inputs"), 0, "{stdout}");
    assert_eq!(count(&report, "failures", "compared"), 5, "{stdout}");
    assert_eq!(count(&report, "failures", "identical"), 5, "{stdout}");
    assert_eq!(report["diverged"], 0, "{stdout}");
    assert_eq!(report["undecodable_records"], 0, "{stdout}");
}

#[test]
fn decisions_of_bf74118_replay_the_same_under_the_current_defaults() {
    // The detector's defaults changed since (its re-derived failures differ:
    // 5 s heartbeats miss the current 3 s deadline); of the planner's, only
    // the hourly isolation limit is new, and its decisions follow the
    // recorded failures.
    let tmp = tempfile::tempdir().unwrap();
    let no_limit = tmp.path().join("no-limit.toml");
    std::fs::write(
        &no_limit,
        "[planner.tuning]\nmax_isolations_per_hour = 1000\n",
    )
    .unwrap();
    let (_, stdout, report) = replay(Some(&no_limit));
    assert_eq!(count(&report, "decisions", "compared"), 44, "{stdout}");
    assert_eq!(count(&report, "decisions", "identical"), 44, "{stdout}");
    assert_eq!(count(&report, "decisions", "diverged"), 0, "{stdout}");
    // With the limit (1 node an hour for 16 nodes), the old run's second
    // isolation within the hour is refused: replay shows where.
    let (ok, stdout, report) = replay(None);
    assert!(!ok);
    assert!(count(&report, "decisions", "diverged") > 0, "{stdout}");
    assert!(stdout.contains("the limit is 1"), "{stdout}");
}
