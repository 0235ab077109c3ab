//! unicron against a real Slurm (Debian's slurm-wlm and munge): a
//! controller and three `slurmd -N nX` daemons on this machine, one node
//! each, on loopback. A real `sbatch --no-kill` job runs the example
//! PyTorch job under `unicron agent` (one agent per node as a job step);
//! `unicron up --no-sim` runs broker, detector, planner, the executor with
//! the Slurm backend, and the Slurm poller.
//!
//! 1. An ECC Xid line in n2's kernel log: n2 is drained in Slurm with
//!    unicron's reason, released from the job's allocation, and the job
//!    goes on training on n1 and n3.
//! 2. n3's slurmd and agent killed: the node loss is detected from missing
//!    heartbeats within seconds; Slurm's own verdict (NOT_RESPONDING/DOWN,
//!    about SlurmdTimeout later) arrives as a cluster event and causes no
//!    second action.
//!
//! The job finishes on n1, and replay of the run finds no divergence.

mod common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Running, need_torch, now_ms, read, signal, stop_and_replay, up_no_sim, wait_for};
use unicron_core::{
    AgentEvent, AgentEventKind, ClusterEvent, ClusterEventKind, Command as Cmd, CommandAction,
    Decision, FailureEvent, FailureKind, WorkerChange,
};
use unicron_slurm::json::{JobView, NodeView, parse_jobs, parse_nodes};

const PYTHON: &str = "/usr/bin/python3";
const CLUSTER: &str = "unicrontest";
const JOB: &str = "gpt";
const STEPS: u32 = 400;
const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Slurm marks a silent slurmd NOT_RESPONDING, then DOWN, after this.
const SLURMD_TIMEOUT_S: u32 = 10;

/// Seconds a job credential lives; a requeued job waits that long in
/// `BeginTime`. Slurm's default is 120; the tests use 10 (the bench both).
fn cred_expire_s() -> u32 {
    std::env::var("UNICRON_SLURM_CRED_EXPIRE_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

/// One Slurm cluster at a time: both tests train on this machine's cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A scratch directory; with UNICRON_KEEP_TEST_DIR set it is kept, to
/// read the daemons' and agents' logs after a failure.
struct TestDir(#[allow(dead_code)] Option<tempfile::TempDir>, PathBuf);

impl TestDir {
    fn new() -> TestDir {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().to_path_buf();
        eprintln!("test directory: {}", path.display());
        if std::env::var_os("UNICRON_KEEP_TEST_DIR").is_some() {
            let _ = tmp.keep();
            TestDir(None, path)
        } else {
            TestDir(Some(tmp), path)
        }
    }

    fn path(&self) -> &Path {
        &self.1
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn output(program: &str, args: &[&str]) -> String {
    String::from_utf8_lossy(&Command::new(program).args(args).output().unwrap().stdout)
        .trim()
        .to_string()
}

/// munged, slurmctld and one slurmd per node, in `dir`, stopped on drop.
struct SlurmCluster {
    dir: PathBuf,
    conf: PathBuf,
    munged: Option<Running>,
    slurmctld: Option<Running>,
    slurmd: BTreeMap<String, Running>,
}

impl SlurmCluster {
    fn start(dir: &Path) -> SlurmCluster {
        for program in ["munged", "slurmctld", "slurmd", "sbatch", "scontrol"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {program}")])
                .output()
                .is_ok_and(|o| o.status.success());
            assert!(
                found,
                "{program} not found: Debian's slurm-wlm and munge are needed (.ci/run installs them)"
            );
        }
        let dir = dir.join("slurm");
        for sub in ["munge", "state", "log", "spool"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.join("munge"), std::fs::Permissions::from_mode(0o700))
                .unwrap();
        }
        let key = dir.join("munge/munge.key");
        let mut bytes = vec![0u8; 1024];
        {
            use std::io::Read;
            std::fs::File::open("/dev/urandom")
                .unwrap()
                .read_exact(&mut bytes)
                .unwrap();
        }
        std::fs::write(&key, &bytes).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let socket = dir.join("munge/munge.sock");
        let munge = |name: &str| dir.join("munge").join(name);
        let log = |name: &str| std::fs::File::create(dir.join("log").join(name)).unwrap();
        let munged = Running(
            Command::new("munged")
                .args(["--force", "--foreground"])
                .arg(format!("--socket={}", socket.display()))
                .arg(format!("--key-file={}", key.display()))
                .arg(format!("--log-file={}", munge("munged.log").display()))
                .arg(format!("--pid-file={}", munge("munged.pid").display()))
                .arg(format!("--seed-file={}", munge("munged.seed").display()))
                .stdin(Stdio::null())
                .stdout(log("munged.out"))
                .stderr(log("munged.err"))
                .spawn()
                .expect("munged"),
        );
        wait_for("munged's socket", Duration::from_secs(10), || {
            socket.exists().then_some(())
        });

        let host = output("hostname", &[]);
        let user = output("id", &["-un"]);
        let d = dir.display();
        let mut conf = format!(
            "ClusterName={CLUSTER}\n\
             SlurmctldHost={host}\n\
             SlurmctldPort={}\n\
             SlurmUser={user}\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={},cred_expire={}\n\
             CredType=cred/munge\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool/%n\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd-%n.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             ReturnToService=2\n\
             JobRequeue=1\n\
             SlurmdTimeout={SLURMD_TIMEOUT_S}\n\
             KillWait=2\n\
             MpiDefault=none\n\
             MailProg=/bin/true\n",
            free_port(),
            socket.display(),
            cred_expire_s(),
        );
        for node in NODES {
            conf += &format!(
                "NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={} CPUs=2 RealMemory=1000\n",
                free_port()
            );
        }
        conf += "PartitionName=train Nodes=n[1-3] Default=YES State=UP OverSubscribe=YES\n";
        let conf_path = dir.join("slurm.conf");
        std::fs::write(&conf_path, conf).unwrap();

        let slurmctld = Running(
            Command::new("slurmctld")
                .args(["-D", "-i", "-f"])
                .arg(&conf_path)
                .stdin(Stdio::null())
                .stdout(log("slurmctld.out"))
                .stderr(log("slurmctld.err"))
                .spawn()
                .expect("slurmctld"),
        );
        let mut cluster = SlurmCluster {
            dir: dir.clone(),
            conf: conf_path,
            munged: Some(munged),
            slurmctld: Some(slurmctld),
            slurmd: BTreeMap::new(),
        };
        for node in NODES {
            cluster.start_slurmd(node);
        }
        wait_for("three idle Slurm nodes", Duration::from_secs(60), || {
            let nodes = cluster.nodes().ok()?;
            (nodes.len() == 3 && nodes.iter().all(|n| n.states.contains("IDLE"))).then_some(())
        });
        cluster
    }

    fn start_slurmd(&mut self, node: &str) {
        std::fs::create_dir_all(self.dir.join("spool").join(node)).unwrap();
        let log = |name: String| std::fs::File::create(self.dir.join("log").join(name)).unwrap();
        let child = Command::new("slurmd")
            .args(["-D", "-N", node, "-f"])
            .arg(&self.conf)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(log(format!("slurmd-{node}.out")))
            .stderr(log(format!("slurmd-{node}.err")))
            .spawn()
            .expect("slurmd");
        self.slurmd.insert(node.to_string(), Running(child));
    }

    /// A Slurm client command with this cluster's configuration.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", &self.conf);
        command
    }

    fn json(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let out = self
            .command(program)
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Slurm 22.05 lists nodes with `sinfo --json`.
    fn nodes(&self) -> Result<Vec<NodeView>, String> {
        parse_nodes(&self.json("sinfo", &["--json"])?)
    }

    fn node(&self, name: &str) -> NodeView {
        self.nodes()
            .unwrap()
            .into_iter()
            .find(|n| n.name == name)
            .unwrap()
    }

    fn job(&self, id: u64) -> Option<JobView> {
        parse_jobs(&self.json("squeue", &["--json"]).ok()?)
            .ok()?
            .into_iter()
            .find(|j| j.id == id)
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        // Jobs first, so no step outlives its slurmd; then the daemons;
        // then whatever a dead slurmd left running (slurmstepd, srun,
        // agents, workers: all carry this cluster's SLURM_CONF).
        // Without a controller Slurm's clients retry for minutes: skip.
        if self.slurmctld.is_some() {
            let _ = self
                .command("scancel")
                .arg("--full")
                .arg("--partition=train")
                .status();
            for _ in 0..20 {
                if self
                    .json("squeue", &["-h"])
                    .is_ok_and(|out| out.trim().is_empty())
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        self.slurmd.clear();
        self.slurmctld.take();
        self.munged.take();
        let marker = format!("SLURM_CONF={}", self.conf.display());
        for pid in pids_where("environ", &marker) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// The event time a fault was injected at, and the failure it caused.
fn failure_after(brokers: &str, before: usize) -> FailureEvent {
    wait_for("the fault's failure", Duration::from_secs(30), || {
        read::<FailureEvent>(brokers, "unicron.failures")
            .get(before)
            .cloned()
    })
}

fn commands_of(brokers: &str, failure: &FailureEvent) -> Vec<Cmd> {
    read::<Cmd>(brokers, "unicron.commands")
        .into_iter()
        .filter(|c| c.causation.first() == Some(&failure.id))
        .collect()
}

/// The first iteration of `job` by workers that `caused` started, and
/// when: recovery is over once the restarted workers train.
fn first_step_after(brokers: &str, caused: &[Cmd]) -> Option<(i64, i64)> {
    let ids: Vec<&str> = caused.iter().map(|c| c.id.as_str()).collect();
    let events = read::<AgentEvent>(brokers, "unicron.agent");
    let started = events
        .iter()
        .filter_map(|e| {
            let w = e.worker.as_ref()?;
            (w.change == WorkerChange::Started
                && w.command_id.as_deref().is_some_and(|id| ids.contains(&id)))
            .then_some(e.time_ms)
        })
        .max()?;
    let mut steps: Vec<(i64, i64)> = events
        .iter()
        .filter(|e| e.kind == AgentEventKind::IterationDone && e.time_ms > started)
        .filter_map(|e| Some((e.time_ms, e.iteration?)))
        .collect();
    steps.sort_unstable();
    steps.first().copied()
}

/// The process ids whose `/proc/PID/<file>` (cmdline, environ) contains
/// `needle`.
fn pids_where(file: &str, needle: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/{file}"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

#[test]
fn slurm_drains_the_faulty_node_and_the_job_trains_on() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    need_torch();
    let tmp = TestDir::new();
    let dir = tmp.path();
    let slurm = SlurmCluster::start(dir);
    let exe = env!("CARGO_BIN_EXE_unicron");
    let run = dir.join("run");
    // Two isolations in this test on three nodes: past the default 2%.
    let config = format!(
        "[metrics]\nenabled = false\n\n\
         [planner.tuning]\nmax_isolations_per_hour = 2\n\n\
         [executor]\ncluster = \"{CLUSTER}\"\nbackend = {{ kind = \"slurm\", timeout_s = 10.0, conf = {conf:?} }}\n\n\
         [slurm]\ncluster = \"{CLUSTER}\"\npoll_interval_s = 1.0\nconf = {conf:?}\n",
        conf = slurm.conf.display().to_string()
    );
    std::fs::write(dir.join("unicron.toml"), config).unwrap();
    let (up, brokers) = up_no_sim(dir, Some(&dir.join("unicron.toml")));

    // The job: one agent per node as a job step, each with its own kernel
    // log file (the test writes the Xid line there).
    for node in NODES {
        std::fs::write(dir.join(format!("kmsg-{node}")), "").unwrap();
    }
    let d = dir.display();
    let train = repo().join("examples/torch-gpt/train.py");
    let agent = format!(
        "exec {exe} agent --brokers {brokers} --planner-key {pubkey} --address 127.0.0.1 \
         --kernel-log {d}/kmsg-$SLURMD_NODENAME --state-dir {d}/state-$SLURMD_NODENAME \
         --stop-grace-s 2 --master-port 29700 \
         -- {PYTHON} {train} --steps {STEPS} --checkpoint-every 20 --checkpoint-dir {d}/ck \
         --step-sleep 0.05 --global-batch 12 \
         >>{d}/agent-$SLURMD_NODENAME.out 2>>{d}/agent-$SLURMD_NODENAME.err",
        pubkey = run.join("planner.pub").display(),
        train = train.display(),
    );
    let script = format!(
        "#!/bin/sh\n\
         #SBATCH --job-name={JOB}\n\
         #SBATCH --nodes=3\n\
         #SBATCH --no-kill\n\
         #SBATCH --open-mode=append\n\
         #SBATCH --output={d}/job-%j.out\n\
         srun --no-kill --kill-on-bad-exit=0 --ntasks-per-node=1 sh -c '{agent}'\n"
    );
    std::fs::write(dir.join("job.sh"), script).unwrap();
    let submitted = slurm
        .command("sbatch")
        .arg("--parsable")
        .arg(dir.join("job.sh"))
        .current_dir(dir)
        .env("UNICRON_METRICS__ENABLED", "false")
        .output()
        .unwrap();
    assert!(
        submitted.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    let job_id: u64 = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .parse()
        .unwrap();

    let progress = |since_ms: i64| {
        read::<AgentEvent>(&brokers, "unicron.agent")
            .into_iter()
            .filter(|e| e.kind == AgentEventKind::IterationDone && e.time_ms > since_ms)
            .filter_map(|e| e.iteration)
            .max()
    };
    let placed = || {
        read::<Cmd>(&brokers, "unicron.commands")
            .into_iter()
            .rfind(|c| c.rendezvous.is_some())
            .map(|c| c.nodes)
    };
    wait_for(
        "the job training on three nodes",
        Duration::from_secs(120),
        || (placed()? == NODES && progress(0)? >= 10).then_some(()),
    );
    assert!(read::<FailureEvent>(&brokers, "unicron.failures").is_empty());

    // 1. An uncorrectable ECC error on n2, as the kernel prints it.
    let t_ecc = now_ms();
    std::fs::write(
        dir.join("kmsg-n2"),
        "NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.\n",
    )
    .unwrap();
    let drained = wait_for("n2 drained in Slurm", Duration::from_secs(30), || {
        let n2 = slurm.node("n2");
        n2.drained().then_some(n2)
    });
    let drain_s = (now_ms() - t_ecc) as f64 / 1000.0;
    assert!(drained.drained_by_unicron(), "{drained:?}");
    let ecc = failure_after(&brokers, 0);
    assert_eq!(ecc.kind, FailureKind::EccError);
    assert_eq!(ecc.node.as_deref(), Some("n2"));
    assert!(drained.reason.contains(&ecc.id), "{drained:?} {ecc:?}");
    let caused = wait_for("the re-plan's commands", Duration::from_secs(10), || {
        let caused = commands_of(&brokers, &ecc);
        (caused.len() >= 2).then_some(caused)
    });
    assert_eq!(caused[0].action, CommandAction::IsolateNode);
    assert_eq!(caused[0].job.as_deref(), Some(JOB));
    let shrunk = wait_for(
        "the allocation shrunk to n1,n3",
        Duration::from_secs(30),
        || {
            let job = slurm.job(job_id)?;
            (job.nodes == ["n1", "n3"]).then_some(job)
        },
    );
    assert_eq!(shrunk.state, "RUNNING");
    let (ecc_step_ms, _) = wait_for(
        "training again on n1 and n3",
        Duration::from_secs(90),
        || first_step_after(&brokers, &caused),
    );
    assert_eq!(
        caused.last().unwrap().nodes,
        ["n1", "n3"],
        "the job restarts on the two nodes it has left"
    );
    let ecc_step_s = (ecc_step_ms - t_ecc) as f64 / 1000.0;
    println!("ecc: drained after {drain_s:.2}s, training again after {ecc_step_s:.2}s");

    // 2. n3 dies: its slurmd and its agent are killed.
    std::thread::sleep(Duration::from_secs(3));
    let failures_before = read::<FailureEvent>(&brokers, "unicron.failures").len();
    let agent_n3 = pids_where("cmdline", &format!("{d}/kmsg-n3"));
    assert!(!agent_n3.is_empty(), "n3's agent runs");
    let t_loss = now_ms();
    slurm_kill(&slurm, "n3");
    for pid in agent_n3 {
        signal(pid, "KILL");
    }
    let lost = failure_after(&brokers, failures_before);
    let loss_detect_s = (lost.detected_ms - t_loss) as f64 / 1000.0;
    assert_eq!(lost.node.as_deref(), Some("n3"), "{lost:?}");
    assert_eq!(lost.kind, FailureKind::LostConnection, "{lost:?}");
    let caused = wait_for("the node loss's commands", Duration::from_secs(10), || {
        let caused = commands_of(&brokers, &lost);
        (caused.len() >= 2).then_some(caused)
    });
    assert_eq!(caused[0].action, CommandAction::IsolateNode);
    let (loss_step_ms, _) = wait_for("training again on n1", Duration::from_secs(90), || {
        first_step_after(&brokers, &caused)
    });
    println!(
        "node loss: detected after {loss_detect_s:.2}s, training again after {:.2}s",
        (loss_step_ms - t_loss) as f64 / 1000.0
    );
    // Slurm's own verdict, a SlurmdTimeout or two later: an event, and a
    // decision that changes nothing.
    let verdict = wait_for(
        "Slurm's verdict on n3",
        Duration::from_secs(u64::from(SLURMD_TIMEOUT_S) * 6),
        || {
            read::<ClusterEvent>(&brokers, "unicron.cluster")
                .into_iter()
                .find(|e| e.kind == ClusterEventKind::NodeDown && e.node.as_deref() == Some("n3"))
        },
    );
    let verdict_s = (verdict.time_ms - t_loss) as f64 / 1000.0;
    let decision = wait_for(
        "the decision on Slurm's verdict",
        Duration::from_secs(10),
        || {
            read::<Decision>(&brokers, "unicron.decisions")
                .into_iter()
                .find(|d| d.reason.contains("scheduler reports n3 down"))
        },
    );
    assert!(decision.command_ids.is_empty(), "{decision:?}");
    assert!(
        decision.reason.contains("already out of service"),
        "{decision:?}"
    );
    println!("slurm: n3 down after {verdict_s:.2}s: {}", decision.reason);

    // The job finishes on n1; its agent exits and the allocation ends.
    wait_for("the job to finish", Duration::from_secs(180), || {
        slurm
            .job(job_id)
            .is_none_or(|j| j.state != "RUNNING")
            .then_some(())
    });
    assert_eq!(
        progress(0),
        Some(i64::from(STEPS)),
        "every step was trained"
    );
    assert!(
        read::<ClusterEvent>(&brokers, "unicron.cluster")
            .iter()
            .any(|e| e.kind == ClusterEventKind::JobFinished && e.job_id.as_deref() == Some(JOB))
    );
    // The agents left cleanly: their silence is no node loss.
    std::thread::sleep(Duration::from_secs(6));
    assert!(!slurm.node("n1").drained(), "n1 stays in service");
    let isolations = read::<Cmd>(&brokers, "unicron.commands")
        .into_iter()
        .filter(|c| c.action == CommandAction::IsolateNode)
        .count();
    assert_eq!(
        isolations, 2,
        "one isolation per fault, none for Slurm's verdict"
    );

    if let Some(path) = std::env::var_os("UNICRON_SLURM_DEMO_JSON") {
        let json = format!(
            "{{\"ecc_to_drain_s\": {drain_s:.2}, \"ecc_to_training_s\": {ecc_step_s:.2}, \"node_loss_detect_s\": {loss_detect_s:.2}, \"node_loss_to_training_s\": {:.2}, \"slurm_verdict_s\": {verdict_s:.2}}}\n",
            (loss_step_ms - t_loss) as f64 / 1000.0
        );
        std::fs::write(path, json).unwrap();
    }

    // Stop cleanly so the archive is complete, then replay it with the
    // run's configuration (its isolation limit decided too).
    stop_and_replay(up, dir, Some(&dir.join("unicron.toml")));
}

/// Kills `node`'s slurmd, as if the machine died.
fn slurm_kill(slurm: &SlurmCluster, node: &str) {
    let pid = slurm.slurmd[node].0.id() as i32;
    signal(pid, "KILL");
}

/// The first `iteration N/` of `text`'s lines after `marker`.
fn first_iteration_after(text: &str, marker: &str) -> Option<i64> {
    let (_, after) = text.split_once(marker)?;
    after.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix("iteration")?;
        rest.split('/').next()?.trim().parse().ok()
    })
}

/// The baseline: a job without unicron, which Slurm requeues (what a
/// failed node does to a job without `--no-kill`). It restarts on a
/// fresh allocation after the credential lifetime, from its checkpoint,
/// and its output file, opened for appending, keeps the first run's lines.
#[test]
fn slurms_own_requeue_restarts_a_job_from_its_checkpoint() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    need_torch();
    let tmp = TestDir::new();
    let dir = tmp.path();
    let slurm = SlurmCluster::start(dir);
    let d = dir.display();
    let train = repo().join("examples/torch-gpt/train.py");
    // torchrun's variables from Slurm's; a restart resumes from the newest
    // checkpoint, as under torchrun --max-restarts.
    let worker = format!(
        "RANK=$SLURM_PROCID LOCAL_RANK=0 WORLD_SIZE=$SLURM_NTASKS LOCAL_WORLD_SIZE=1 \
         MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29800 + ${{SLURM_RESTART_COUNT:-0}})) \
         TORCHELASTIC_RESTART_COUNT=${{SLURM_RESTART_COUNT:-0}} \
         exec {PYTHON} {train} --steps 150 --checkpoint-every 10 --checkpoint-dir {d}/ck \
         --step-sleep 0.05 --global-batch 12",
        train = train.display()
    );
    let script = format!(
        "#!/bin/sh\n\
         #SBATCH --job-name=plain\n\
         #SBATCH --nodes=3\n\
         #SBATCH --requeue\n\
         #SBATCH --open-mode=append\n\
         #SBATCH --output={d}/plain.out\n\
         echo \"run ${{SLURM_RESTART_COUNT:-0}} on $SLURM_JOB_NODELIST\"\n\
         srun --ntasks-per-node=1 sh -c '{worker}'\n"
    );
    std::fs::write(dir.join("plain.sh"), script).unwrap();
    let submitted = slurm
        .command("sbatch")
        .arg("--parsable")
        .arg(dir.join("plain.sh"))
        .output()
        .unwrap();
    assert!(submitted.status.success(), "{submitted:?}");
    let job_id: u64 = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .parse()
        .unwrap();
    let out = || std::fs::read_to_string(dir.join("plain.out")).unwrap_or_default();
    // Requeued after its second checkpoint: a restart from scratch would
    // show as iteration 1.
    wait_for(
        "the plain job's second checkpoint",
        Duration::from_secs(120),
        || {
            out()
                .contains("successfully saved checkpoint at iteration      20")
                .then_some(())
        },
    );
    let t_requeue = now_ms();
    let requeued = slurm
        .command("scontrol")
        .args(["requeue", &job_id.to_string()])
        .output()
        .unwrap();
    assert!(requeued.status.success(), "{requeued:?}");
    let first = wait_for(
        "the requeued run training",
        Duration::from_secs(u64::from(cred_expire_s()) + 120),
        || first_iteration_after(&out(), "run 1 on"),
    );
    let requeue_s = (now_ms() - t_requeue) as f64 / 1000.0;
    let text = out();
    assert!(
        text.contains("run 0 on n[1-3]"),
        "the first run's lines are kept:\n{text}"
    );
    assert!(
        first > 20,
        "resumed from a checkpoint, not from scratch: {first}"
    );
    println!("slurm requeue: training again after {requeue_s:.2}s, from iteration {first}");
    if let Some(path) = std::env::var_os("UNICRON_SLURM_REQUEUE_JSON") {
        let json = format!(
            "{{\"requeue_to_training_s\": {requeue_s:.2}, \"cred_expire_s\": {}, \"resumed_at_iteration\": {first}}}\n",
            cred_expire_s()
        );
        std::fs::write(path, json).unwrap();
    }
}

fn command(action: CommandAction, node: &str, job: Option<&str>) -> Cmd {
    Cmd {
        id: format!("c-{}-{node}", action.symbol()),
        cluster: CLUSTER.into(),
        decision_id: "d-1".into(),
        time_ms: now_ms(),
        action,
        job: job.map(str::to_string),
        nodes: vec![node.to_string()],
        restore_from: None,
        causation: vec!["f-test".into()],
        key_id: String::new(),
        signature: Vec::new(),
        rendezvous: None,
        snapshots: None,
    }
}

/// The Slurm backend's answers to what goes wrong: a node Slurm does not
/// know, an operator's drain, `scontrol` missing, a controller that does
/// not answer. Each is a result with Slurm's reason; nothing panics, and
/// the next command is carried out.
#[test]
fn the_slurm_backend_answers_bad_input_with_reasons() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    use unicron_core::executor::Backoff;
    use unicron_core::executor::Outcome;
    use unicron_executor::{Backend, BackendSettings, SlurmSettings};
    let tmp = TestDir::new();
    let mut slurm = SlurmCluster::start(tmp.path());
    let conf = slurm.conf.clone();
    let backend = |bin_dir: Option<PathBuf>, timeout_s: f64| {
        Backend::new(&BackendSettings::Slurm(SlurmSettings {
            timeout_s,
            bin_dir,
            conf: Some(conf.clone()),
            release_nodes: true,
        }))
        .unwrap()
    };
    let act = |backend: &Backend, command: &Cmd| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let backoff = Backoff {
            max_attempts: 2,
            initial_ms: 100,
            max_ms: 100,
        };
        runtime.block_on(backend.act(command, &backoff))
    };
    let slurm_backend = backend(None, 5.0);

    // A node Slurm does not know.
    let done = act(
        &slurm_backend,
        &command(CommandAction::IsolateNode, "n9", None),
    );
    assert_eq!(done.outcome, Outcome::Failed);
    assert!(
        done.reason
            .as_deref()
            .unwrap()
            .contains("Slurm does not know node `n9`"),
        "{done:?}"
    );

    // An operator's drain stays, with their reason, and is not lifted.
    let drain = slurm
        .command("scontrol")
        .args(["update", "NodeName=n1", "State=DRAIN", "Reason=bad fan"])
        .status()
        .unwrap();
    assert!(drain.success());
    let done = act(
        &slurm_backend,
        &command(CommandAction::IsolateNode, "n1", None),
    );
    assert_eq!(done.outcome, Outcome::Succeeded);
    assert!(
        done.reason
            .as_deref()
            .unwrap()
            .contains("already drained (bad fan)"),
        "{done:?}"
    );
    let done = act(
        &slurm_backend,
        &command(CommandAction::ReturnNode, "n1", None),
    );
    assert!(
        done.reason
            .as_deref()
            .unwrap()
            .contains("drained by someone else"),
        "{done:?}"
    );
    assert_eq!(slurm.node("n1").reason, "bad fan");
    assert!(slurm.node("n1").drained());

    // The backend still works: n2 drained with unicron's reason, given back.
    let done = act(
        &slurm_backend,
        &command(CommandAction::IsolateNode, "n2", None),
    );
    assert_eq!(done.outcome, Outcome::Succeeded, "{done:?}");
    let n2 = slurm.node("n2");
    assert!(
        n2.drained_by_unicron() && n2.reason == "unicron: f-test",
        "{n2:?}"
    );
    let done = act(
        &slurm_backend,
        &command(CommandAction::ReturnNode, "n2", None),
    );
    assert_eq!(done.reason.as_deref(), Some("n2 resumed"));
    assert!(!slurm.node("n2").drained());

    // A job Slurm does not run.
    let done = act(
        &slurm_backend,
        &command(CommandAction::Restart, "n2", Some("nope")),
    );
    assert_eq!(done.outcome, Outcome::Failed);
    assert!(
        done.reason
            .as_deref()
            .unwrap()
            .contains("no running or pending Slurm job named `nope`")
    );

    // scontrol missing.
    let missing = backend(Some(PathBuf::from("/nonexistent/slurm/bin")), 5.0);
    let done = act(&missing, &command(CommandAction::IsolateNode, "n3", None));
    assert_eq!(done.outcome, Outcome::Failed);
    assert!(
        done.reason.as_deref().unwrap().contains("cannot be run"),
        "{done:?}"
    );

    // No controller: Slurm's own message, after the retries.
    slurm.slurmctld.take();
    let done = act(
        &backend(None, 2.0),
        &command(CommandAction::IsolateNode, "n3", None),
    );
    assert_eq!(done.outcome, Outcome::Failed);
    let reason = done.reason.unwrap();
    assert!(
        reason.contains("Unable to contact slurm controller") || reason.contains("timed out"),
        "{reason}"
    );
}
