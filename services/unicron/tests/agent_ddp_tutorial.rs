//! A DDP script no one here wrote: PyTorch's own tutorial
//! (examples/ddp-tutorial, from pytorch/examples, with the client's lines
//! added) under two `unicron agent`s with replicas on. A worker killed with
//! SIGKILL: both ranks resume from their agents' memory at the epoch after
//! the newest one both saved, not from the tutorial's `snapshot.pt`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Running, need_torch, now_ms, read, signal, stop_and_replay, up_no_sim, wait_for};
use unicron_core::{ClusterEvent, ClusterEventKind, Command as Cmd, CommandAction, FailureEvent};

const PYTHON: &str = "/usr/bin/python3";

/// Epochs each rank's output reports, newest last, with "Resuming" lines.
fn lines(dir: &Path, node: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(format!("{node}.out")))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// [`wait_for`], failing with the agents' last lines, so a timeout says
/// where the restart stopped.
fn wait_showing<T>(
    dir: &Path,
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        if start.elapsed() > within {
            let tail = |name: &str| {
                let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
                let last: Vec<&str> = text.lines().rev().take(20).collect();
                last.into_iter().rev().collect::<Vec<_>>().join("\n")
            };
            let logs: Vec<String> = ["d1.err", "d2.err", "d1.out", "d2.out"]
                .iter()
                .map(|name| format!("--- {name}\n{}", tail(name)))
                .collect();
            panic!("timed out waiting for {what}\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn newest_epoch(lines: &[String]) -> Option<i64> {
    lines.iter().rev().find_map(|l| {
        l.split("] Epoch ")
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

#[test]
fn a_public_ddp_script_resumes_from_memory_after_a_kill() {
    need_torch();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = repo.join("examples/ddp-tutorial/multinode.py");
    let client = repo.join("clients/python");
    let (up, brokers) = up_no_sim(dir, None);
    std::fs::write(dir.join("secret"), "a-cluster-secret-of-32-bytes-or-more\n").unwrap();
    // Upstream arguments: total epochs, save every N epochs (to snapshot.pt).
    let command = vec![
        PYTHON.to_string(),
        script.display().to_string(),
        "100000".into(),
        "1000".into(),
    ];
    let config = format!(
        "[metrics]\nenabled = false\n\n[agent]\ncluster = \"ddp\"\naddress = \"127.0.0.1\"\nstop_grace_s = 2.0\nsnapshot_secret_file = {:?}\n\n[[agent.jobs]]\nid = \"tutorial\"\nmin_nodes = 2\nmax_nodes = 2\nmaster_port_base = 31600\nworkdir = {:?}\ncommand = {command:?}\n\n[agent.jobs.env]\nPYTHONPATH = {:?}\n",
        dir.join("secret").display().to_string(),
        dir.display().to_string(),
        client.display().to_string(),
    );
    std::fs::write(dir.join("agent.toml"), config).unwrap();
    let exe = env!("CARGO_BIN_EXE_unicron");
    let mut agents = Vec::new();
    for node in ["d1", "d2"] {
        let log = |ext: &str| std::fs::File::create(dir.join(format!("{node}.{ext}"))).unwrap();
        let child = Command::new(exe)
            .arg("--config")
            .arg(dir.join("agent.toml"))
            .args([
                "agent",
                "--brokers",
                &brokers,
                "--node",
                node,
                "--planner-key",
            ])
            .arg(dir.join("run/planner.pub"))
            .arg("--state-dir")
            .arg(dir.join(format!("state-{node}")))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log("out"))
            .stderr(log("err"))
            .spawn()
            .unwrap();
        agents.push(Running(child));
    }
    wait_for("the tutorial at epoch 20", Duration::from_secs(120), || {
        (newest_epoch(&lines(dir, "d1"))? >= 20).then_some(())
    });
    let pid: i32 = std::fs::read_to_string(dir.join("d2.err"))
        .unwrap()
        .lines()
        .rev()
        .find(|l| l.contains("worker started"))
        .and_then(|l| {
            l.split("pid=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .expect("d2 started a worker");
    // The tutorial's own disk snapshot (written at epoch 0, then every
    // 1000 epochs) goes first: nothing can resume from disk.
    std::fs::remove_file(dir.join("snapshot.pt")).unwrap();
    let t = now_ms();
    signal(pid, "KILL");
    let before = newest_epoch(&lines(dir, "d1")).unwrap();

    let resumed = wait_showing(dir, "both ranks resumed", Duration::from_secs(120), || {
        // A rank the agent sent to the disk checkpoint never resumes here
        // (the tutorial's snapshot.pt is gone): say why at once.
        for node in ["d1", "d2"] {
            let err = std::fs::read_to_string(dir.join(format!("{node}.err"))).unwrap_or_default();
            if let Some(line) = err
                .lines()
                .find(|l| l.contains("resumes from the disk checkpoint"))
            {
                panic!("{node}: {line}");
            }
        }
        let found: Vec<String> = ["d1", "d2"]
            .iter()
            .filter_map(|n| {
                lines(dir, n)
                    .into_iter()
                    .find(|l| l.starts_with("Resuming training from"))
            })
            .collect();
        (found.len() == 2).then_some(found)
    });
    let failures: Vec<FailureEvent> = read(&brokers, "unicron.failures");
    assert_eq!(failures.len(), 1, "{failures:#?}");
    let restart: Vec<Cmd> = read::<Cmd>(&brokers, "unicron.commands")
        .into_iter()
        .filter(|c| c.causation.first() == Some(&failures[0].id))
        .collect();
    assert_eq!(restart.len(), 1);
    assert_eq!(restart[0].action, CommandAction::Restart);
    let step = restart[0]
        .snapshots
        .as_ref()
        .and_then(|p| p.step)
        .expect("the restart resumes from a snapshot");
    for line in &resumed {
        assert_eq!(
            line,
            &format!("Resuming training from memory at Epoch {}", step + 1),
            "{resumed:?}"
        );
    }
    // Epoch `before` had started, so `before - 1` was done: at most that
    // one is done again (its snapshot may still have been on its way).
    assert!(
        before - (step + 1) <= 1,
        "resumed at epoch {}, epoch {before} had started",
        step + 1
    );
    let reports: Vec<ClusterEvent> = read::<ClusterEvent>(&brokers, "unicron.cluster")
        .into_iter()
        .filter(|e| e.kind == ClusterEventKind::JobRestored)
        .collect();
    wait_for("two restore reports", Duration::from_secs(30), || {
        let n = read::<ClusterEvent>(&brokers, "unicron.cluster")
            .into_iter()
            .filter(|e| e.kind == ClusterEventKind::JobRestored)
            .count();
        (n >= 2).then_some(())
    });
    println!(
        "killed at epoch {before} ({} ms ago), resumed both ranks at epoch {} from memory; {} restore reports at first look",
        now_ms() - t,
        step + 1,
        reports.len()
    );
    drop(agents);
    stop_and_replay(up, dir, None);
}
