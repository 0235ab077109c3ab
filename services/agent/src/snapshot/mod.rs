//! In-memory snapshots: workers hand the agent their state every step
//! (the Python client in `clients/python`), the agent keeps the newest two
//! per rank, sends each to the peer the planner's start command names, and
//! serves a restarted worker the one step the planner chose, from its own
//! memory or a peer's. Reports every stored snapshot to the planner
//! (`snapshots_stored`) and what each restore cost (`job_restored`).
//! Operator docs: docs/agent.md, "In-memory snapshots".

pub mod digest;
mod fdsocket;
mod local;
pub mod mapped;
mod peer;
pub mod store;
#[cfg(test)]
mod tests;
pub mod wire;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, watch};
use unicron_core::agent::{RankRestore, Role};
use unicron_core::{ClusterEventKind, RestoreReport, SnapshotHeld};

use crate::error::AgentError;
use crate::metrics::{SNAPSHOT_BYTES, SNAPSHOT_MEMORY_LIMIT, SNAPSHOTS_REFUSED, SNAPSHOTS_STORED};
use crate::report::{Reported, Reporter, now_ms};
use crate::settings::AgentSettings;
use store::{Origin, Snapshot, SnapshotStore};

/// Shortest cluster secret accepted.
const MIN_SECRET: usize = 32;
/// Reports are gathered this long before one `snapshots_stored` goes out:
/// a node's ranks leave the same allreduce and save within a few ms of each
/// other, so one report carries them all, and the planner's view stays
/// within a fast step of what is held.
const REPORT_EVERY: Duration = Duration::from_millis(20);

/// A fetch of a peer's replica started when the start command arrived.
type Fetch = watch::Receiver<Option<Result<Arc<Snapshot>, String>>>;

/// What a start command told this node about one job.
struct Active {
    role: Role,
    command_id: String,
    action: String,
    /// The command's event time: the failure's detection, for a restart.
    command_ms: i64,
    local_world: i32,
}

/// What a local rank's restore turned out to be, until its first step.
struct Restored {
    source: String,
    step: Option<i64>,
    bytes: i64,
}

/// The agent's snapshot service.
pub struct Snapshots {
    node: String,
    store: Mutex<SnapshotStore>,
    secret: Option<Vec<u8>>,
    reporter: Arc<Reporter>,
    jobs: Mutex<BTreeMap<String, Active>>,
    fetches: Mutex<BTreeMap<(String, i32), Fetch>>,
    restored: Mutex<BTreeMap<(String, i32), Restored>>,
    reports: Mutex<Vec<SnapshotHeld>>,
    report_ready: Notify,
    replicate: mpsc::UnboundedSender<Arc<Snapshot>>,
    /// The local socket workers talk to.
    pub socket: PathBuf,
    /// host:port of the peer service, announced; `None`: no replication.
    pub address: Option<String>,
}

impl Snapshots {
    /// Starts the service as `settings` say; `None` when snapshots are off.
    pub async fn start(
        settings: &AgentSettings,
        reporter: Arc<Reporter>,
    ) -> Result<Option<Arc<Snapshots>>, AgentError> {
        if !settings.snapshots {
            return Ok(None);
        }
        let secret = match &settings.snapshot_secret_file {
            None => None,
            Some(path) => {
                let secret = std::fs::read(path).map_err(|e| {
                    AgentError::Config(format!(
                        "agent.snapshot_secret_file: cannot read {}: {e}",
                        path.display()
                    ))
                })?;
                let secret = secret.trim_ascii().to_vec();
                if secret.len() < MIN_SECRET {
                    return Err(AgentError::Config(format!(
                        "agent.snapshot_secret_file: {} holds {} bytes, at least {MIN_SECRET} are needed",
                        path.display(),
                        secret.len()
                    )));
                }
                Some(secret)
            }
        };
        std::fs::create_dir_all(&settings.state_dir).map_err(|e| {
            AgentError::Config(format!(
                "agent.state_dir: cannot create {}: {e}",
                settings.state_dir.display()
            ))
        })?;
        let socket = settings.state_dir.join("snapshots.sock");
        let _ = std::fs::remove_file(&socket);
        let unix = tokio::net::UnixListener::bind(&socket).map_err(|e| {
            AgentError::Config(format!(
                "agent.state_dir: cannot listen on {}: {e}",
                socket.display()
            ))
        })?;
        let tcp = match &secret {
            None => None,
            Some(_) => Some(
                tokio::net::TcpListener::bind(("0.0.0.0", settings.snapshot_port))
                    .await
                    .map_err(|e| {
                        AgentError::Config(format!(
                            "agent.snapshot_port: cannot listen on {}: {e}",
                            settings.snapshot_port
                        ))
                    })?,
            ),
        };
        let address = match &tcp {
            Some(l) => Some(format!(
                "{}:{}",
                settings.address(),
                l.local_addr().map_err(AgentError::Io)?.port()
            )),
            None => None,
        };
        let (replicate, queue) = mpsc::unbounded_channel();
        let service = Arc::new(Snapshots {
            node: settings.node.clone(),
            store: Mutex::new(SnapshotStore::new(settings.snapshot_memory_limit)),
            secret,
            reporter,
            jobs: Mutex::new(BTreeMap::new()),
            fetches: Mutex::new(BTreeMap::new()),
            restored: Mutex::new(BTreeMap::new()),
            reports: Mutex::new(Vec::new()),
            report_ready: Notify::new(),
            replicate,
            socket,
            address,
        });
        ::metrics::gauge!(SNAPSHOT_MEMORY_LIMIT.name).set(settings.snapshot_memory_limit as f64);
        tokio::spawn(local::serve(service.clone(), unix));
        if let Some(tcp) = tcp {
            tokio::spawn(peer::serve(service.clone(), tcp));
            tokio::spawn(peer::replicate(service.clone(), queue));
        }
        tokio::spawn(service.clone().send_reports());
        tracing::info!(socket = %service.socket.display(), replicas = ?service.address, "snapshot service up");
        Ok(Some(service))
    }

    /// A start command for this node: forget what the start abandons,
    /// remember the role (who may send replicas, where each rank
    /// restores from), and begin fetching the replicas local ranks need.
    pub fn on_start(self: &Arc<Self>, role: &Role, command: &unicron_core::Command, nproc: u32) {
        let step = role.snapshots.as_ref().and_then(|p| p.step);
        self.store().drop_after(&role.job, step);
        self.held_changed();
        let nproc = nproc as i32;
        let first = role.node_rank as i32 * nproc;
        {
            let mut fetches = self.fetches.lock().expect("not poisoned");
            fetches.retain(|(job, _), _| job != &role.job);
            for rank in first..first + nproc {
                let Some(restore) = role.restore_of(&self.node, rank) else {
                    continue;
                };
                if let Some(fetch) = self.prefetch(role, &restore) {
                    fetches.insert((role.job.clone(), rank), fetch);
                }
            }
        }
        self.restored
            .lock()
            .expect("not poisoned")
            .retain(|(job, _), _| job != &role.job);
        self.jobs.lock().expect("not poisoned").insert(
            role.job.clone(),
            Active {
                role: role.clone(),
                command_id: command.id.clone(),
                action: command.action.symbol().to_string(),
                command_ms: command.time_ms,
                local_world: nproc,
            },
        );
    }

    /// The job finished here: its snapshots are nobody's to restore.
    pub fn forget_job(&self, job: &str) {
        self.store().drop_after(job, None);
        self.held_changed();
    }

    /// Starts fetching a replica source; `None` for memory or checkpoint.
    fn prefetch(self: &Arc<Self>, role: &Role, restore: &RankRestore) -> Option<Fetch> {
        let (Some(step), Some(from), Some(node)) = (restore.step, restore.from_rank, &restore.node)
        else {
            return None;
        };
        // Held here already (the planner's view of this node may lag its
        // reports by a moment): memory beats a fetch.
        if node == &self.node || self.store().get(&role.job, from, step).is_some() {
            return None;
        }
        let (tx, rx) = watch::channel(None);
        let Some(address) = role.peer_address(node).map(str::to_string) else {
            let _ = tx.send(Some(Err(format!(
                "the command gives no address for {node}"
            ))));
            return Some(rx);
        };
        let service = self.clone();
        let (job, node) = (role.job.clone(), node.clone());
        tokio::spawn(async move {
            let result = peer::fetch(&service, &address, &node, &job, from, step).await;
            if let Ok(snapshot) = &result {
                // Served to the worker even if it does not fit to be kept.
                let kept = service.store().insert(snapshot.clone(), Origin::Fetched);
                service.held_changed();
                if let Err(e) = kept {
                    service.store_error(&e.to_string());
                }
            }
            let _ = tx.send(Some(result));
        });
        Some(rx)
    }

    fn store(&self) -> std::sync::MutexGuard<'_, SnapshotStore> {
        self.store.lock().expect("not poisoned")
    }

    fn held_changed(&self) {
        ::metrics::gauge!(SNAPSHOT_BYTES.name).set(self.store().held_bytes() as f64);
    }

    fn store_error(&self, message: &str) {
        ::metrics::counter!(SNAPSHOTS_REFUSED.name, "reason" => "memory_limit").increment(1);
        self.note(None, None, message);
    }

    /// Says why something was not kept or not served: a counter, the
    /// agent's own log, and a line on the logs topic (source `snapshot`).
    fn refuse(&self, reason: &'static str, job: Option<&str>, rank: Option<i32>, message: &str) {
        ::metrics::counter!(SNAPSHOTS_REFUSED.name, "reason" => reason).increment(1);
        self.note(job, rank, message);
    }

    fn note(&self, job: Option<&str>, rank: Option<i32>, message: &str) {
        tracing::warn!(job, rank, "{message}");
        self.reporter.log(
            "snapshot",
            job,
            rank,
            format!("unicron-agent: {message}"),
            BTreeMap::new(),
        );
    }

    /// Holds a complete snapshot and queues its report (and its replica).
    fn hold(&self, held: Arc<Snapshot>, origin: Origin) -> Result<(), String> {
        let kept = self.store().insert(held.clone(), origin);
        self.held_changed();
        kept.map_err(|e| {
            self.store_error(&e.to_string());
            e.to_string()
        })?;
        ::metrics::counter!(SNAPSHOTS_STORED.name, "origin" => match origin {
            Origin::Own => "own",
            Origin::Replica => "replica",
            Origin::Fetched => "fetched",
        })
        .increment(1);
        if origin != Origin::Fetched {
            self.reports
                .lock()
                .expect("not poisoned")
                .push(SnapshotHeld {
                    job: held.job.clone(),
                    rank: held.rank,
                    step: held.step,
                    generation: held.generation,
                    local_world: held.local_world,
                    bytes: held.bytes() as i64,
                    replica: origin == Origin::Replica,
                    block_us: held.costs.block_us,
                    step_us: held.costs.step_us,
                    transfer_us: held.costs.transfer_us,
                });
            self.report_ready.notify_one();
        }
        if origin == Origin::Own {
            let _ = self.replicate.send(held);
        }
        Ok(())
    }

    /// Sends what was stored, gathered over [`REPORT_EVERY`].
    async fn send_reports(self: Arc<Self>) {
        loop {
            self.report_ready.notified().await;
            tokio::time::sleep(REPORT_EVERY).await;
            self.flush_reports();
        }
    }

    /// Sends every snapshot stored and not yet reported, now; the store
    /// may then let older ones go. Called before a worker's exit is
    /// reported, so the planner hears of the dead rank's last snapshot
    /// before it hears of the death and picks a restore step.
    pub fn flush_reports(&self) {
        let held = std::mem::take(&mut *self.reports.lock().expect("not poisoned"));
        if held.is_empty() {
            return;
        }
        {
            let mut store = self.store();
            for s in &held {
                let origin = if s.replica {
                    Origin::Replica
                } else {
                    Origin::Own
                };
                store.reported(&s.job, s.rank, origin, s.step);
            }
        }
        self.held_changed();
        let mut event = self
            .reporter
            .cluster_event(ClusterEventKind::SnapshotsStored);
        event.node = Some(self.node.clone());
        event.snapshots = held;
        self.reporter.send(Reported::Cluster(event));
    }

    /// A local rank's first training step after a start: what its restore
    /// cost goes to the planner.
    pub fn first_step(&self, job: &str, rank: i32, generation: i64) {
        let jobs = self.jobs.lock().expect("not poisoned");
        let Some(active) = jobs.get(job).filter(|a| a.role.generation == generation) else {
            return;
        };
        if active.role.restore_from.is_none()
            && active
                .role
                .snapshots
                .as_ref()
                .is_none_or(|p| p.step.is_none())
        {
            return; // a first start: nothing was restored
        }
        let restored = self
            .restored
            .lock()
            .expect("not poisoned")
            .remove(&(job.to_string(), rank));
        let (source, step, bytes) = match restored {
            Some(r) => (r.source, r.step, r.bytes),
            // The worker never asked: it read its own checkpoint.
            None => ("checkpoint".to_string(), None, 0),
        };
        let restore_ms = (now_ms() - active.command_ms).max(0);
        let mut event = self.reporter.cluster_event(ClusterEventKind::JobRestored);
        event.node = Some(self.node.clone());
        event.job_id = Some(job.to_string());
        event.restored = Some(Box::new(RestoreReport {
            job: job.to_string(),
            rank,
            generation,
            command_id: active.command_id.clone(),
            action: active.action.clone(),
            source: source.clone(),
            step,
            bytes,
            restore_ms,
        }));
        tracing::info!(job, rank, %source, ?step, bytes, restore_ms, "first step after restore");
        self.reporter.send(Reported::Cluster(event));
    }
}
