//! The chaos scenario as a test (docs/chaos.md): the driver runs unicron's
//! services as separate processes on a three-broker Apache Kafka cluster
//! and kills them, and the brokers, while they work. It is part of the
//! Apache Kafka group: `cargo test --workspace --test apache_kafka` runs it
//! with the other tests on Kafka, and builds both binaries it needs.
//!
//! `./dev test` fetches Kafka's jars and sets `UNICRON_KAFKA_LIBS`; under
//! CI missing jars fail the test, elsewhere it is skipped with a message.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `unicron` binary of this build: the driver's sibling in the target
/// directory. Cargo builds it when the workspace's tests are built
/// (`--workspace`), not for this package alone.
fn unicron() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_unicron-chaos")).with_file_name("unicron");
    assert!(
        path.is_file(),
        "{} is missing: run with `cargo test --workspace --test apache_kafka`",
        path.display()
    );
    path
}

/// The scenario at its required size: 20 planner SIGKILLs, the
/// executor killed between acting and publishing (twice), the broker that
/// leads the planner's first input partition SIGKILLed and restarted, a
/// rolling restart of all three brokers, and one planner stopped so its
/// partitions move. Judged by the simulator's ground truth and by replay.
#[test]
fn chaos_on_kafka_loses_nothing_and_does_nothing_twice() {
    let Some(libs) = unicron_bus::testing::kafka::kafka_or_skip() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_unicron-chaos"))
        .arg("--unicron")
        .arg(unicron())
        .arg("--kafka-libs")
        .arg(&libs)
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
        stdout.contains("leader broker killed 1, brokers rolled 3"),
        "the brokers' faults did not all happen:\n{stdout}"
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let planner_kills =
        planner_kills(&stdout).unwrap_or_else(|| panic!("no planner kill count:\n{stdout}"));
    assert!(
        planner_kills >= 20,
        "{planner_kills} planner kills:\n{stdout}"
    );
    assert!(field("kills") >= planner_kills, "{last}");
    assert!(field("failures") >= 3, "{last}");
    assert_eq!(field("duplicate_actions"), 0, "{stdout}");
    assert_eq!(field("lost"), 0, "{stdout}");
    assert_eq!(field("divergence"), 0, "{stdout}");
}

/// N of the driver's `chaos: N planner kills, M executor kills after
/// acting, ...` line.
fn planner_kills(stdout: &str) -> Option<u64> {
    let line = stdout
        .lines()
        .find(|l| l.contains(" executor kills after acting"))?;
    let (n, _) = line
        .strip_prefix("chaos: ")?
        .split_once(" planner kills,")?;
    n.parse().ok()
}

#[test]
fn the_planner_kill_count_is_read_from_its_own_line() {
    let stdout = "chaos: 10 failures planned over 180 simulated minutes; 20 planner kills at least\n\
                  chaos: kill -9 broker 2 (127.0.0.1:40001), leader of unicron.failures[0]\n\
                  chaos: 21 planner kills, 2 executor kills after acting, leader broker killed 1, brokers rolled 3\n";
    assert_eq!(planner_kills(stdout), Some(21));
    assert_eq!(planner_kills("chaos: 20 planner kills at least\n"), None);
}
