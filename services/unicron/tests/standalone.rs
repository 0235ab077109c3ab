//! The standalone-broker group: unicron's services as separate processes
//! on tansu (a Kafka-protocol broker, not the embedded one), SIGKILLed
//! while they work (`unicron-chaos`, docs/chaos.md).
//!
//! Not yet part of the default run: `.ci/run` does not install tansu yet,
//! and the broker-restart step fails on tansu 0.6.0 (docs/chaos.md,
//! "Status"). Run it with `cargo test -p unicron --test standalone --
//! --ignored` once tansu is installed.

use std::process::Command;

#[test]
#[ignore = "needs tansu; the broker restart is open (docs/chaos.md, Status)"]
fn standalone_chaos_loses_nothing_and_does_nothing_twice() {
    let tansu = ["/var/cache/unicron-tools/bin/tansu"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .chain(std::env::var_os("TANSU").map(Into::into))
        .find(|p| p.is_file());
    let tansu = tansu.expect("no tansu: set TANSU or install it (docs/chaos.md)");
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_unicron-chaos"))
        .arg("--unicron")
        .arg(env!("CARGO_BIN_EXE_unicron"))
        .arg("--tansu")
        .arg(&tansu)
        .arg("--work-dir")
        .arg(work.path())
        .args(["--minutes", "6", "--kills", "20", "--seed", "7"])
        .arg("--no-broker-restart")
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
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(field("kills") >= 20, "{last}");
    assert!(field("failures") >= 3, "{last}");
    assert_eq!(field("duplicate_actions"), 0, "{stdout}");
    assert_eq!(field("lost"), 0, "{stdout}");
    assert_eq!(field("divergence"), 0, "{stdout}");
}
