//! Two and three agents' snapshot services on loopback, driven over their
//! real sockets: what is kept, replicated, fetched and refused, and why.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use std::os::fd::OwnedFd;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::mpsc;
use unicron_core::agent::Role;
use unicron_core::{
    ClusterEventKind, Command, CommandAction, RankSource, SnapshotPeer, SnapshotPlan,
};

use super::Snapshots;
use super::digest::of as digest_hex;
use super::fdsocket::{self, FdLines};
use super::mapped::Mapped;
use super::wire::Header;
use crate::report::{Reported, Reporter};
use crate::settings::AgentSettings;

const SECRET: &str = "0123456789abcdef0123456789abcdef-test";

struct Agent {
    service: Arc<Snapshots>,
    events: mpsc::Receiver<Reported>,
}

impl Agent {
    async fn start(dir: &Path, node: &str, secret: &str) -> Agent {
        std::fs::create_dir_all(dir).unwrap();
        let secret_file = dir.join(format!("secret-{node}"));
        std::fs::write(&secret_file, secret).unwrap();
        let settings = AgentSettings {
            cluster: "c".into(),
            node: node.into(),
            address: Some("127.0.0.1".into()),
            state_dir: dir.join(node),
            snapshot_secret_file: Some(secret_file),
            snapshot_memory_limit: 1 << 20,
            ..AgentSettings::default()
        };
        let (reporter, events) = Reporter::new(&settings);
        let service = Snapshots::start(&settings, reporter)
            .await
            .unwrap()
            .unwrap();
        Agent { service, events }
    }

    fn address(&self) -> String {
        self.service.address.clone().unwrap()
    }

    /// Log lines (source `snapshot`) and stored-snapshot reports so far.
    fn drain(&mut self) -> (Vec<String>, Vec<(i32, i64, bool)>) {
        let (mut lines, mut held) = (Vec::new(), Vec::new());
        while let Ok(record) = self.events.try_recv() {
            match record {
                Reported::Log(l) if l.source == "snapshot" => lines.push(l.line),
                Reported::Cluster(e) if e.kind == ClusterEventKind::SnapshotsStored => {
                    held.extend(e.snapshots.iter().map(|s| (s.rank, s.step, s.replica)));
                }
                _ => {}
            }
        }
        (lines, held)
    }
}

/// A start of job `j` on `nodes` at `generation`, restoring `sources` at
/// `step`, each node's replicas on the next node.
fn start(
    agents: &[(&str, &Agent)],
    nodes: &[&str],
    generation: i64,
    step: Option<i64>,
    sources: &[(i32, &str)],
) -> (Command, Vec<Role>) {
    let names: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    let plan = SnapshotPlan {
        step,
        reason: "test".into(),
        sources: sources
            .iter()
            .map(|(rank, node)| RankSource {
                rank: *rank,
                from_rank: *rank,
                node: node.to_string(),
            })
            .collect(),
        replica_holders: (0..names.len())
            .map(|i| names[(i + 1) % names.len()].clone())
            .collect(),
        peers: agents
            .iter()
            .map(|(n, a)| SnapshotPeer {
                node: n.to_string(),
                address: a.address(),
            })
            .collect(),
        interval_steps: 1,
        interval_reason: String::new(),
    };
    let command = Command {
        id: format!("c{generation}"),
        cluster: "c".into(),
        decision_id: "d".into(),
        time_ms: 0,
        action: CommandAction::Restart,
        job: Some("j".into()),
        nodes: names.clone(),
        restore_from: step.map(|_| "snapshot".into()),
        causation: Vec::new(),
        key_id: String::new(),
        signature: Vec::new(),
        rendezvous: None,
        snapshots: Some(plan.clone()),
    };
    let roles = (0..names.len())
        .map(|i| Role {
            job: "j".into(),
            node_rank: i as u32,
            nodes: names.len() as u32,
            node_names: names.clone(),
            generation,
            master_addr: "127.0.0.1".into(),
            master_port: 29500,
            restore_from: command.restore_from.clone(),
            snapshots: Some(Box::new(plan.clone())),
        })
        .collect();
    (command, roles)
}

/// A worker's connection to its agent.
struct Worker {
    stream: UnixStream,
    /// The memfd of each save, as the worker keeps its slots.
    slots: Vec<std::fs::File>,
}

/// A memfd holding `data`, made as the Python client makes its slots.
fn memfd(data: &[u8]) -> std::fs::File {
    use rustix::fs::{MemfdFlags, memfd_create};
    use std::io::Write;
    let fd = memfd_create("test-slot", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
    let mut file = std::fs::File::from(fd);
    file.write_all(data).unwrap();
    file
}

impl Worker {
    async fn connect(agent: &Agent) -> Worker {
        Worker {
            stream: UnixStream::connect(&agent.service.socket).await.unwrap(),
            slots: Vec::new(),
        }
    }

    /// Sends `header` with `fd`, and reads the answer.
    async fn exchange(
        &mut self,
        header: &Header,
        fd: Option<&OwnedFd>,
    ) -> (Header, Option<OwnedFd>) {
        fdsocket::send(&self.stream, header, fd).await.unwrap();
        let mut lines = FdLines::new(&self.stream);
        let answer = lines.header().await.unwrap();
        (answer, lines.descriptor())
    }

    async fn save(&mut self, rank: i32, step: i64, generation: i64, data: &[u8]) -> Header {
        let header = Header {
            op: "save".into(),
            job: "j".into(),
            rank,
            step,
            generation,
            len: data.len() as u64,
            slot: self.slots.len() as u64,
            slots: self.slots.len() as u64 + 1,
            ..Header::default()
        };
        let file = memfd(data);
        let fd = OwnedFd::from(file.try_clone().unwrap());
        self.slots.push(file);
        self.exchange(&header, Some(&fd)).await.0
    }

    async fn restore(&mut self, rank: i32, generation: i64) -> (Header, Vec<u8>) {
        let header = Header {
            op: "restore".into(),
            job: "j".into(),
            rank,
            generation,
            ..Header::default()
        };
        let (answer, fd) = self.exchange(&header, None).await;
        let mut data = Vec::new();
        if answer.ok {
            use std::io::{Read, Seek};
            let mut file = std::fs::File::from(fd.expect("a restore answer carries the memfd"));
            file.rewind().unwrap();
            file.read_to_end(&mut data).unwrap();
            data.truncate(answer.len as usize);
        }
        (answer, data)
    }
}

async fn until(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..100 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

fn state(step: i64) -> Vec<u8> {
    format!("state after step {step}").repeat(50).into_bytes()
}

#[tokio::test]
async fn snapshots_are_replicated_and_restored_from_memory_or_the_peer() {
    let dir = tempfile::tempdir().unwrap();
    let mut n1 = Agent::start(dir.path(), "n1", SECRET).await;
    let mut n2 = Agent::start(dir.path(), "n2", SECRET).await;
    let agents = [("n1", &n1), ("n2", &n2)];
    let (command, roles) = start(&agents, &["n1", "n2"], 1, None, &[]);
    n1.service.on_start(&roles[0], &command, 1);
    n2.service.on_start(&roles[1], &command, 1);

    let mut rank0 = Worker::connect(&n1).await;
    for step in 1..=3 {
        assert!(rank0.save(0, step, 1, &state(step)).await.ok);
    }
    until("n2 keeps the replica of step 3", || {
        n2.service.store().get("j", 0, 3).is_some()
    })
    .await;
    // Two kept per rank, on both nodes.
    assert!(n1.service.store().get("j", 0, 1).is_none());
    assert!(n1.service.store().get("j", 0, 2).is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, held1) = n1.drain();
    let (_, held2) = n2.drain();
    assert_eq!(held1, vec![(0, 1, false), (0, 2, false), (0, 3, false)]);
    assert_eq!(held2.last(), Some(&(0, 3, true)));

    // Generation 2 on n3 (which holds nothing) and n1: rank 0 on n3 comes
    // from n1, fetched at once when the command arrives.
    let n3 = Agent::start(dir.path(), "n3", SECRET).await;
    let agents = [("n1", &n1), ("n2", &n2), ("n3", &n3)];
    let (command, roles) = start(&agents, &["n3", "n1"], 2, Some(3), &[(0, "n1")]);
    n3.service.on_start(&roles[0], &command, 1);
    n1.service.on_start(&roles[1], &command, 1);
    let (answer, data) = Worker::connect(&n3).await.restore(0, 2).await;
    assert!(answer.ok, "{}", answer.reason);
    assert_eq!((answer.source.as_str(), answer.step), ("replica:n1", 3));
    assert_eq!(data, state(3));
    // A node the command sends to a peer for state it holds itself (the
    // planner had not yet heard of its copy) serves it from memory.
    let (command, roles) = start(&agents, &["n2", "n1"], 3, Some(3), &[(0, "n1")]);
    n2.service.on_start(&roles[0], &command, 1);
    let (answer, data) = Worker::connect(&n2).await.restore(0, 3).await;
    assert_eq!((answer.ok, answer.source.as_str()), (true, "memory"));
    assert_eq!(data, state(3));
    // The same from n1's own memory.
    let (command, roles) = start(&agents, &["n1", "n2"], 4, Some(3), &[(0, "n1")]);
    n1.service.on_start(&roles[0], &command, 1);
    let (answer, data) = Worker::connect(&n1).await.restore(0, 4).await;
    assert_eq!((answer.ok, answer.source.as_str()), (true, "memory"));
    assert_eq!(data, state(3));
}

#[tokio::test]
async fn torn_foreign_and_oversized_snapshots_are_refused_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let mut n1 = Agent::start(dir.path(), "n1", SECRET).await;
    let (command, roles) = start(&[("n1", &n1)], &["n1", "n2"], 4, None, &[]);
    n1.service.on_start(&roles[0], &command, 1);

    let mut worker = Worker::connect(&n1).await;
    assert!(worker.save(0, 10, 4, &state(10)).await.ok);
    let other = worker.save(0, 11, 3, &state(11)).await;
    assert!(
        !other.ok && other.reason.contains("generation 3"),
        "{}",
        other.reason
    );
    let rank = worker.save(1, 11, 4, &state(11)).await;
    assert!(!rank.ok && rank.reason.contains("does not run on this node"));
    let big = worker.save(0, 12, 4, &vec![7; 2 << 20]).await;
    assert!(!big.ok, "over the memory limit");
    let save = |step: i64, len: u64| Header {
        op: "save".into(),
        job: "j".into(),
        rank: 0,
        step,
        generation: 4,
        len,
        ..Header::default()
    };
    // No descriptor; one that is no memfd (a regular file cannot be
    // sealed); a memfd shorter than the header says.
    let (none, _) = worker.exchange(&save(13, 5), None).await;
    assert!(
        !none.ok && none.reason.contains("no descriptor"),
        "{}",
        none.reason
    );
    let file = tempfile::tempfile().unwrap();
    file.set_len(100).unwrap();
    let (plain, _) = worker
        .exchange(&save(14, 5), Some(&OwnedFd::from(file)))
        .await;
    assert!(
        !plain.ok && plain.reason.contains("sealed"),
        "{}",
        plain.reason
    );
    let short = OwnedFd::from(memfd(b"hello"));
    let (short, _) = worker.exchange(&save(15, 1000), Some(&short)).await;
    assert!(
        !short.ok
            && short
                .reason
                .contains("holds 5 bytes, the header announced 1000"),
        "{}",
        short.reason
    );
    // Sealed against shrinking once handed over: the agent's mapping
    // cannot be cut from under it.
    assert!(
        worker.slots[0].set_len(10).is_err(),
        "shrinking a held slot is refused"
    );

    tokio::time::sleep(Duration::from_millis(200)).await;
    let (lines, held) = n1.drain();
    assert_eq!(held, vec![(0, 10, false)], "only the whole one is held");
    for needle in [
        "generation 3",
        "does not run on this node",
        "snapshot_memory_limit",
        "no descriptor",
        "cannot be sealed",
        "holds 5 bytes",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(needle)),
            "{needle}: {lines:#?}"
        );
    }

    // A slot written after it was handed over is never restored.
    {
        use std::io::{Seek, Write};
        let slot = &mut worker.slots[0];
        slot.rewind().unwrap();
        slot.write_all(b"XX").unwrap();
    }
    let (command, roles) = start(&[("n1", &n1)], &["n1", "n2"], 5, Some(10), &[(0, "n1")]);
    n1.service.on_start(&roles[0], &command, 1);
    let (answer, _) = Worker::connect(&n1).await.restore(0, 5).await;
    assert!(
        !answer.ok && answer.reason.contains("altered after it was handed over"),
        "{}",
        answer.reason
    );
}

/// A worker learns which of its slots the agent no longer holds, and may
/// write those again; the ones held are never listed.
#[tokio::test]
async fn slots_are_released_once_nothing_holds_them() {
    let dir = tempfile::tempdir().unwrap();
    let n1 = Agent::start(dir.path(), "n1", SECRET).await;
    let (command, roles) = start(&[("n1", &n1)], &["n1"], 1, None, &[]);
    n1.service.on_start(&roles[0], &command, 1);
    let mut worker = Worker::connect(&n1).await;
    let mut released = Vec::new();
    for step in 1..=4 {
        let answer = worker.save(0, step, 1, &state(step)).await;
        assert!(answer.ok, "{}", answer.reason);
        released.push(answer.released);
    }
    // Reports are not out yet: the agent keeps every snapshot the planner
    // may still choose, so nothing is released within the first saves.
    assert!(
        released[0].is_empty() && released[1].is_empty(),
        "{released:?}"
    );
    // Reported within 20 ms; then only the newest two need keeping.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let answer = worker.save(0, 5, 1, &state(5)).await;
    assert!(answer.ok);
    let held: Vec<u64> = (0..5).filter(|s| !answer.released.contains(s)).collect();
    assert!(
        held.len() <= 3,
        "held {held:?}, released {:?}",
        answer.released
    );
    assert!(
        held.contains(&4),
        "the newest is held: {:?}",
        answer.released
    );
}

#[tokio::test]
async fn replicas_come_only_from_the_named_node_under_the_cluster_secret() {
    let dir = tempfile::tempdir().unwrap();
    let n1 = Agent::start(dir.path(), "n1", SECRET).await;
    let mut n2 = Agent::start(dir.path(), "n2", SECRET).await;
    let n3 = Agent::start(dir.path(), "n3", SECRET).await;
    let stranger = Agent::start(
        &dir.path().join("elsewhere"),
        "n1",
        "another-secret-another-secret-0000",
    )
    .await;
    let agents = [("n1", &n1), ("n2", &n2), ("n3", &n3)];
    // n2 keeps n1's replicas; n3 is in the job but not n2's sender.
    let (command, roles) = start(&agents, &["n1", "n2", "n3"], 1, None, &[]);
    for (agent, role) in [&n1, &n2, &n3].into_iter().zip(&roles) {
        agent.service.on_start(role, &command, 1);
    }
    let snapshot = |rank: i32, generation: i64| super::store::Snapshot {
        job: "j".into(),
        rank,
        step: 5,
        generation,
        local_world: 1,
        digest: digest_hex(&state(5)),
        data: Mapped::from_bytes(&state(5)).unwrap(),
        costs: Default::default(),
    };
    let mut conns = std::collections::BTreeMap::new();
    let to = n2.address();
    let err = super::peer::push(&n3.service, &mut conns, &to, &snapshot(2, 1))
        .await
        .unwrap_err();
    assert!(err.contains("does not name n3"), "{err}");
    let err = super::peer::push(&n1.service, &mut conns, &to, &snapshot(0, 9))
        .await
        .unwrap_err();
    assert!(err.contains("generation 9"), "{err}");
    let mut conns = std::collections::BTreeMap::new();
    let err = super::peer::push(&stranger.service, &mut conns, &to, &snapshot(0, 1))
        .await
        .unwrap_err();
    assert!(err.contains("not signed"), "{err}");
    let mut conns = std::collections::BTreeMap::new();
    super::peer::push(&n1.service, &mut conns, &to, &snapshot(0, 1))
        .await
        .unwrap();

    // A peer that disappears mid-transfer leaves nothing.
    let mut header = Header {
        op: "replica".into(),
        job: "j".into(),
        rank: 0,
        step: 6,
        generation: 1,
        local_world: 1,
        len: 1000,
        digest: digest_hex(&[0; 1000]),
        from: "n1".into(),
        ..Header::default()
    };
    header.sign(SECRET.as_bytes());
    let mut stream = TcpStream::connect(&to).await.unwrap();
    let line = serde_json::to_vec(&header).unwrap();
    stream.write_all(&line).await.unwrap();
    stream.write_all(b"\n").await.unwrap();
    stream.write_all(&[0; 300]).await.unwrap();
    drop(stream);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(n2.service.store().get("j", 0, 5).is_some());
    assert!(n2.service.store().get("j", 0, 6).is_none());
    let (lines, held) = n2.drain();
    assert_eq!(held, vec![(0, 5, true)]);
    for needle in [
        "does not name n3",
        "generation 9",
        "signature",
        "truncated: 300 of 1000",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(needle)),
            "{needle}: {lines:#?}"
        );
    }
}

#[tokio::test]
async fn a_replica_that_cannot_be_fetched_sends_the_rank_to_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut n2 = Agent::start(dir.path(), "n2", SECRET).await;
    // n1 is gone: nothing listens at the address the command names.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = gone.local_addr().unwrap().to_string();
    drop(gone);
    let (mut command, roles) = start(&[("n2", &n2)], &["n2"], 2, Some(7), &[(0, "n1")]);
    let mut role = roles[0].clone();
    for plan in [command.snapshots.as_mut(), role.snapshots.as_deref_mut()] {
        plan.unwrap().peers.push(SnapshotPeer {
            node: "n1".into(),
            address: address.clone(),
        });
    }
    n2.service.on_start(&role, &command, 1);
    let (answer, _) = Worker::connect(&n2).await.restore(0, 2).await;
    assert!(!answer.ok);
    assert_eq!(answer.source, "checkpoint");
    assert!(answer.reason.contains("after 3 tries"), "{}", answer.reason);
    let (lines, _) = n2.drain();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("resumes from the disk checkpoint, not replica:n1")),
        "{lines:#?}"
    );
}
