//! The workers of this node: started as torchrun would start them, each in
//! its own process group, watched until they exit, and stopped with
//! SIGCONT, SIGTERM, then SIGKILL after a short grace. After every stop no
//! process this agent started survives, DataLoader children included: they
//! all carry the agent's marker in their environment.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::sync::{Notify, watch};
use unicron_core::agent::Role;
use unicron_core::{AgentEventKind, ClusterEventKind, WorkerChange, WorkerReport};

use crate::output::{FirstStep, LineContext, Stream, follow};
use crate::procfs;
use crate::progress::{ProgressPatterns, ProgressTracker};
use crate::report::{Reported, Reporter};
use crate::settings::{AgentSettings, JobSettings};
use crate::snapshot::Snapshots;

/// The environment variable that marks every process an agent starts.
pub const FENCE_VAR: &str = "UNICRON_AGENT";
/// How long to wait for killed processes to be reaped.
const REAP: Duration = Duration::from_secs(5);
/// How long py-spy may take for one stack.
const STACK_TIMEOUT: Duration = Duration::from_secs(5);

/// One worker process.
struct Worker {
    rank: i32,
    pid: i32,
    /// The command id that stops it, set before the first signal.
    stopped_by: Arc<std::sync::Mutex<Option<String>>>,
    exited: watch::Receiver<bool>,
    /// The last state class reported (`active` or a procfs word).
    reported_state: &'static str,
}

/// The job this node runs now.
struct Running {
    job: String,
    generation: i64,
    workers: Vec<Worker>,
}

/// Owns this node's workers.
pub struct Supervisor {
    settings: Arc<AgentSettings>,
    reporter: Arc<Reporter>,
    snapshots: Option<Arc<Snapshots>>,
    running: Option<Running>,
    /// Told when every local worker of a job has exited 0.
    done: Arc<Notify>,
}

impl Supervisor {
    pub fn new(
        settings: Arc<AgentSettings>,
        reporter: Arc<Reporter>,
        snapshots: Option<Arc<Snapshots>>,
    ) -> Supervisor {
        Supervisor {
            settings,
            reporter,
            snapshots,
            running: None,
            done: Arc::new(Notify::new()),
        }
    }

    /// Notified (once, with a stored permit) when a job finishes here.
    pub fn done(&self) -> Arc<Notify> {
        self.done.clone()
    }

    /// The job whose workers run here, if any still do.
    pub fn running_job(&self) -> Option<&str> {
        self.running
            .as_ref()
            .filter(|r| r.workers.iter().any(|w| !*w.exited.borrow()))
            .map(|r| r.job.as_str())
    }

    /// Starts the workers of `role` (nothing else may run). A command line
    /// that cannot start is an error with the reason; what did start is
    /// stopped again.
    pub fn start(&mut self, role: &Role, command: &unicron_core::Command) -> Result<(), String> {
        let command_id = command.id.as_str();
        let job = self
            .settings
            .job(&role.job)
            .ok_or_else(|| format!("job {} is not configured here", role.job))?
            .clone();
        if let Some(snapshots) = &self.snapshots {
            snapshots.on_start(role, command, job.nproc_per_node);
        }
        let patterns = ProgressPatterns::new(&job.progress_patterns)
            .map_err(|e| format!("progress pattern: {e}"))?;
        let nproc = job.nproc_per_node;
        let finishing = Arc::new(AtomicUsize::new(nproc as usize));
        let mut workers = Vec::with_capacity(nproc as usize);
        for local_rank in 0..nproc {
            let rank = (role.node_rank * nproc + local_rank) as i32;
            match self.spawn(
                &job, role, local_rank, rank, command_id, &patterns, &finishing,
            ) {
                Ok(worker) => workers.push(worker),
                Err(reason) => {
                    for w in &workers {
                        let _ = killpg(Pid::from_raw(w.pid), Signal::SIGKILL);
                    }
                    return Err(reason);
                }
            }
        }
        self.running = Some(Running {
            job: job.id.clone(),
            generation: role.generation,
            workers,
        });
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn(
        &self,
        job: &JobSettings,
        role: &Role,
        local_rank: u32,
        rank: i32,
        command_id: &str,
        patterns: &ProgressPatterns,
        finishing: &Arc<AtomicUsize>,
    ) -> Result<Worker, String> {
        let world = role.nodes * job.nproc_per_node;
        let mut command = Command::new(&job.command[0]);
        if let Some(snapshots) = &self.snapshots {
            command.env("UNICRON_SNAPSHOT_SOCKET", &snapshots.socket);
        }
        command
            .args(&job.command[1..])
            .env("PYTHONUNBUFFERED", "1")
            .envs(&job.env)
            .envs(torchrun_env(
                role,
                &self.settings.node,
                job.nproc_per_node,
                local_rank,
                rank,
                world,
            ))
            .env("UNICRON_JOB", &job.id)
            .env("UNICRON_NODE", &self.settings.node)
            .env(FENCE_VAR, self.settings.fence_tag())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(dir) = &job.workdir {
            command.current_dir(dir);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start `{}`: {e}", job.command.join(" ")))?;
        let pid = child.id().map(|p| p as i32).unwrap_or(-1);
        let first_step: FirstStep = Arc::new(std::sync::Mutex::new(None));
        if let Some(snapshots) = self.snapshots.clone() {
            let (job, generation) = (job.id.clone(), role.generation);
            *first_step.lock().expect("not shared yet") = Some(Box::new(move || {
                snapshots.first_step(&job, rank, generation);
            }));
        }
        let context = |_: Stream| LineContext {
            first_step: first_step.clone(),
            reporter: self.reporter.clone(),
            job: job.id.clone(),
            rank,
            generation: role.generation,
            max_line_bytes: self.settings.max_line_bytes,
            max_lines_per_s: self.settings.max_lines_per_s,
            progress: ProgressTracker::new(patterns.clone()),
        };
        if let Some(out) = child.stdout.take() {
            tokio::spawn(follow(out, Stream::Stdout, context(Stream::Stdout)));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(follow(err, Stream::Stderr, context(Stream::Stderr)));
        }
        let stopped_by = Arc::new(std::sync::Mutex::new(None::<String>));
        let (exited_tx, exited) = watch::channel(false);
        self.reporter.worker(
            &job.id,
            rank,
            WorkerReport {
                change: WorkerChange::Started,
                generation: role.generation,
                pid,
                command_id: Some(command_id.to_string()),
                process_state: None,
            },
        );
        tracing::info!(job = %job.id, rank, pid, generation = role.generation, "worker started");
        let reporter = self.reporter.clone();
        let (job_id, generation, by) = (job.id.clone(), role.generation, stopped_by.clone());
        let (finishing, first_node) = (finishing.clone(), role.node_rank == 0);
        let done = self.done.clone();
        let snapshots = self.snapshots.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            let mut event = reporter.event(AgentEventKind::ProcessExit, Some(&job_id), Some(rank));
            let (code, signal) = match &status {
                Ok(s) => (s.code(), s.signal()),
                Err(_) => (None, None),
            };
            event.exit_code = code;
            event.signal = signal;
            let stopper = by.lock().map(|b| b.clone()).unwrap_or(None);
            if let Some(command_id) = &stopper {
                event.worker = Some(WorkerReport {
                    change: WorkerChange::Stopped,
                    generation,
                    pid,
                    command_id: Some(command_id.clone()),
                    process_state: None,
                });
            }
            tracing::info!(job = %job_id, rank, pid, ?code, ?signal, stopped_by = ?stopper, "worker exited");
            if let Some(snapshots) = &snapshots {
                snapshots.flush_reports();
            }
            reporter.send(Reported::Agent(event));
            let _ = exited_tx.send(true);
            // Every local worker finished cleanly: the job is done here;
            // the first node says so for the job.
            if stopper.is_none() && code == Some(0) && finishing.fetch_sub(1, Ordering::SeqCst) == 1
            {
                if first_node {
                    let mut finished = reporter.cluster_event(ClusterEventKind::JobFinished);
                    finished.job_id = Some(job_id.clone());
                    reporter.send(Reported::Cluster(finished));
                }
                tracing::info!(job = %job_id, "job finished");
                if let Some(snapshots) = &snapshots {
                    snapshots.forget_job(&job_id);
                }
                done.notify_one();
            }
        });
        Ok(Worker {
            rank,
            pid,
            stopped_by,
            exited,
            reported_state: "active",
        })
    }

    /// Stops the workers of `job` (any job when `None`), on behalf of
    /// `command_id`. With `stacks`, each live worker's Python stack is
    /// published first (py-spy, where installed). Returns how many workers
    /// were stopped.
    pub async fn stop(&mut self, job: Option<&str>, command_id: &str, stacks: bool) -> usize {
        let Some(running) = self.running.as_ref() else {
            return 0;
        };
        if job.is_some_and(|j| j != running.job) {
            return 0;
        }
        let running = self.running.take().expect("checked above");
        let live: Vec<&Worker> = running
            .workers
            .iter()
            .filter(|w| !*w.exited.borrow())
            .collect();
        for w in &running.workers {
            if let Ok(mut by) = w.stopped_by.lock() {
                *by = Some(command_id.to_string());
            }
        }
        if stacks {
            for w in &live {
                self.publish_stack(&running.job, w).await;
            }
        }
        for w in &live {
            let group = Pid::from_raw(w.pid);
            let _ = killpg(group, Signal::SIGCONT);
            let _ = killpg(group, Signal::SIGTERM);
        }
        let grace = Duration::from_secs_f64(self.settings.stop_grace_s);
        if !wait_exited(&live, grace).await {
            for w in &live {
                let _ = killpg(Pid::from_raw(w.pid), Signal::SIGKILL);
            }
            wait_exited(&live, REAP).await;
        }
        let fenced = fence(&self.settings.fence_tag());
        tracing::info!(job = %running.job, generation = running.generation, stopped = live.len(), fenced, command = command_id, "workers stopped");
        live.len()
    }

    /// Reports workers whose process state changed class: stopped,
    /// tracing_stop, zombie, or back to active. A stopped worker is visible
    /// here long before any timeout.
    pub fn poll_states(&mut self) {
        let Some(running) = self.running.as_mut() else {
            return;
        };
        for w in &mut running.workers {
            if *w.exited.borrow() {
                continue;
            }
            let state = match procfs::state(w.pid) {
                Some("running" | "sleeping" | "disk_sleep") => "active",
                Some(other) => other,
                None => continue,
            };
            if state == w.reported_state {
                continue;
            }
            w.reported_state = state;
            let word = if state == "active" { "running" } else { state };
            tracing::info!(job = %running.job, rank = w.rank, pid = w.pid, state = word, "worker state");
            self.reporter.worker(
                &running.job,
                w.rank,
                WorkerReport {
                    change: WorkerChange::State,
                    generation: running.generation,
                    pid: w.pid,
                    command_id: None,
                    process_state: Some(word.to_string()),
                },
            );
        }
    }

    /// The worker's Python stack as log lines (source `stack`).
    async fn publish_stack(&self, job: &str, worker: &Worker) {
        let program = self
            .settings
            .py_spy
            .clone()
            .unwrap_or_else(|| "py-spy".into());
        let dump = Command::new(&program)
            .args(["dump", "--nonblocking", "--pid", &worker.pid.to_string()])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let text = match tokio::time::timeout(STACK_TIMEOUT, dump).await {
            Ok(Ok(out)) if out.status.success() => {
                String::from_utf8_lossy(&out.stdout).into_owned()
            }
            Ok(Ok(out)) => {
                tracing::warn!(pid = worker.pid, stderr = %String::from_utf8_lossy(&out.stderr).trim(), "py-spy failed");
                return;
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "py-spy not available; no stack captured");
                return;
            }
            Err(_) => {
                tracing::warn!(pid = worker.pid, "py-spy timed out");
                return;
            }
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            self.reporter.log(
                "stack",
                Some(job),
                Some(worker.rank),
                line.to_string(),
                BTreeMap::from([("pid".to_string(), worker.pid.to_string())]),
            );
        }
    }
}

/// The variables torchrun gives each worker, and unicron's own.
fn torchrun_env(
    role: &Role,
    node: &str,
    nproc: u32,
    local_rank: u32,
    rank: i32,
    world: u32,
) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("RANK", rank.to_string()),
        ("LOCAL_RANK", local_rank.to_string()),
        ("WORLD_SIZE", world.to_string()),
        ("LOCAL_WORLD_SIZE", nproc.to_string()),
        ("GROUP_RANK", role.node_rank.to_string()),
        ("GROUP_WORLD_SIZE", role.nodes.to_string()),
        ("ROLE_RANK", rank.to_string()),
        ("ROLE_WORLD_SIZE", world.to_string()),
        ("MASTER_ADDR", role.master_addr.clone()),
        ("MASTER_PORT", role.master_port.to_string()),
        (
            "TORCHELASTIC_RESTART_COUNT",
            (role.generation - 1).max(0).to_string(),
        ),
        ("UNICRON_GENERATION", role.generation.to_string()),
        ("UNICRON_SNAPSHOT_EVERY", role.snapshot_every().to_string()),
    ];
    if let Some(restore) = role.restore_of(node, rank) {
        env.push(("UNICRON_RESUME_FROM", restore.resume_from));
        if let Some(step) = restore.step {
            env.push(("UNICRON_RESTORE_STEP", step.to_string()));
        }
    }
    env
}

/// Waits until every worker has exited, at most `limit`.
async fn wait_exited(workers: &[&Worker], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    for w in workers {
        let mut exited = w.exited.clone();
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, exited.wait_for(|e| *e))
            .await
            .is_err()
        {
            return false;
        }
    }
    true
}

/// Kills every live process carrying this agent's marker (left by an
/// earlier incarnation, or children that left their process group).
/// Returns how many there were.
pub fn fence(tag: &str) -> usize {
    let pids = procfs::with_env(FENCE_VAR, tag);
    let me = std::process::id() as i32;
    let mut killed = 0;
    for pid in pids.into_iter().filter(|p| *p != me) {
        let pid = Pid::from_raw(pid);
        let _ = kill(pid, Signal::SIGCONT);
        if kill(pid, Signal::SIGKILL).is_ok() {
            killed += 1;
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_and_world_follow_torchrun() {
        let role = Role {
            job: "a".into(),
            node_rank: 1,
            nodes: 2,
            generation: 4,
            master_addr: "10.0.0.1".into(),
            master_port: 29504,
            restore_from: Some("checkpoint".into()),
            node_names: vec!["n1".into(), "n2".into()],
            snapshots: None,
        };
        let env: BTreeMap<_, _> = torchrun_env(&role, "n2", 2, 1, 3, 4).into_iter().collect();
        assert_eq!(env["RANK"], "3");
        assert_eq!(env["LOCAL_RANK"], "1");
        assert_eq!(env["WORLD_SIZE"], "4");
        assert_eq!(env["GROUP_RANK"], "1");
        assert_eq!(env["MASTER_PORT"], "29504");
        assert_eq!(env["UNICRON_GENERATION"], "4");
        assert_eq!(env["UNICRON_RESUME_FROM"], "checkpoint");
    }
}
