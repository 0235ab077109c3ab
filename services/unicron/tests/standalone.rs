//! The standalone-broker group: unicron's services as separate processes
//! on tansu 0.6.0 (a Kafka-protocol broker, not the embedded one), killed
//! while they work (`unicron-chaos`, docs/chaos.md).
//!
//! `.ci/run` installs tansu and sets `TANSU`; under CI a missing tansu
//! fails the test, elsewhere it is skipped with a message. Run the group
//! alone with `cargo test -p unicron --test standalone`.

use std::path::PathBuf;
use std::process::Command;

/// tansu: `$TANSU`, or where `.ci/run` installs it.
fn tansu() -> Option<PathBuf> {
    std::env::var_os("TANSU")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from("/var/cache/unicron-tools/bin/tansu")])
        .find(|p| p.is_file())
}

/// The scenario at its required size: 20 planner SIGKILLs, the
/// executor killed between acting and publishing (twice), the broker
/// killed and restarted mid-run, and one planner stopped so its partitions
/// move. Judged by the simulator's ground truth and by replay.
#[test]
fn standalone_chaos_loses_nothing_and_does_nothing_twice() {
    let Some(tansu) = tansu() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but tansu is missing: .ci/run installs it"
        );
        eprintln!("skipped: no tansu (set TANSU; it is required when CI is set)");
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_unicron-chaos"))
        .arg("--unicron")
        .arg(env!("CARGO_BIN_EXE_unicron"))
        .arg("--tansu")
        .arg(&tansu)
        .arg("--work-dir")
        .arg(work.path())
        .args(["--minutes", "6", "--kills", "20", "--seed", "7"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stdout.lines().last().unwrap_or_default();
    let field = |name: &str| -> u64 {
        last.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in `{last}`:\n{stdout}\n{stderr}"))
    };
    assert!(last.starts_with("chaos: kills="), "{stdout}\n{stderr}");
    if !out.status.success() {
        for log in std::fs::read_dir(work.path().join("logs"))
            .unwrap()
            .flatten()
        {
            let text = std::fs::read_to_string(log.path()).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            eprintln!("--- {}", log.path().display());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
    assert!(
        stdout.contains("broker restarted 1"),
        "the broker was not restarted:\n{stdout}"
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let planner_kills: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("chaos: ")?.split_once(" planner kills"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no planner kill count:\n{stdout}"));
    assert!(planner_kills >= 20, "{planner_kills} planner kills:\n{stdout}");
    assert!(field("kills") >= planner_kills, "{last}");
    assert!(field("failures") >= 3, "{last}");
    assert_eq!(field("duplicate_actions"), 0, "{stdout}");
    assert_eq!(field("lost"), 0, "{stdout}");
    assert_eq!(field("divergence"), 0, "{stdout}");
}
