//! The local socket: workers hand over snapshots (a header line and the
//! memfd of the slot they wrote, mapped here without a copy) and ask for
//! the one to restore (answered with a header line and a memfd). A worker
//! killed while writing a slot never handed it over: nothing torn is held.
//! Each `save` reply lists the worker's slots nothing here holds any more,
//! which it may write again.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};

use super::digest;
use super::fdsocket::{self, FdLines};
use super::mapped::Mapped;
use super::store::{Costs, Origin, Snapshot};
use super::wire::{Header, WireError};
use super::{Restored, Snapshots};

/// How long a restore waits for a replica being fetched.
const FETCH_WAIT: Duration = Duration::from_secs(60);

pub async fn serve(service: Arc<Snapshots>, listener: UnixListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(connection(service.clone(), stream));
            }
            Err(e) => {
                tracing::warn!(error = %e, "snapshot socket accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The counter label of a wire error.
pub(super) fn reason_of(e: &WireError) -> &'static str {
    match e {
        WireError::Truncated { .. } | WireError::Closed => "truncated",
        WireError::Checksum => "checksum",
        WireError::BadHeader(_) => "bad_header",
        WireError::Io(_) => "io",
    }
}

fn reply(ok: bool, reason: impl Into<String>) -> Header {
    Header {
        op: "reply".into(),
        ok,
        reason: reason.into(),
        ..Header::default()
    }
}

async fn connection(service: Arc<Snapshots>, stream: UnixStream) {
    let mut lines = FdLines::new(&stream);
    // The slots this worker handed over, by its id for them: one is free
    // again once nothing here holds its snapshot.
    let mut slots: BTreeMap<u64, Weak<Snapshot>> = BTreeMap::new();
    loop {
        let header = match lines.header().await {
            Ok(h) => h,
            Err(WireError::Closed) => return,
            Err(e) => {
                service.refuse(
                    reason_of(&e),
                    None,
                    None,
                    &format!("a worker's snapshot message was not understood: {e}"),
                );
                return;
            }
        };
        let (mut answer, fd) = match header.op.as_str() {
            "save" => {
                let fd = lines.descriptor();
                lines.drop_descriptors();
                let answer = match service.take_slot(&header, fd) {
                    Ok(data) => {
                        let (answer, held) = service.save(&header, data);
                        if let Some(held) = held {
                            slots.insert(header.slot, Arc::downgrade(&held));
                        }
                        answer
                    }
                    Err(message) => reply(false, message),
                };
                (answer, None)
            }
            "restore" => {
                lines.drop_descriptors();
                let (answer, snapshot) = service.restore(&header).await;
                match snapshot.map(|s| s.data.descriptor()).transpose() {
                    Ok(fd) => (answer, fd),
                    Err(e) => (
                        reply(false, format!("the snapshot cannot be passed on: {e}")),
                        None,
                    ),
                }
            }
            other => (reply(false, format!("unknown op {other:?}")), None),
        };
        slots.retain(|_, held| held.strong_count() > 0);
        answer.released = released(&slots, &header);
        if fdsocket::send(&stream, &answer, fd.as_ref()).await.is_err() {
            return;
        }
    }
}

/// The worker's slots (ids `0..header.slots`) whose snapshots nothing here
/// holds, after a `save`: the worker may write them again.
fn released(slots: &BTreeMap<u64, Weak<Snapshot>>, header: &Header) -> Vec<u64> {
    if header.op != "save" {
        return Vec::new();
    }
    (0..header.slots.max(header.slot + 1))
        .filter(|id| !slots.contains_key(id))
        .collect()
}

impl Snapshots {
    /// The snapshot a `save` hands over in the memfd that came with it:
    /// mapped (no copy) and digested; or why it is refused.
    fn take_slot(&self, header: &Header, fd: Option<OwnedFd>) -> Result<Mapped, String> {
        let refuse = |reason: &'static str, why: String| {
            let message = format!(
                "snapshot of job {} rank {} step {} not kept: {why}",
                header.job, header.rank, header.step
            );
            self.refuse(reason, Some(&header.job), Some(header.rank), &message);
            message
        };
        let limit = self.store().limit();
        if header.len > limit {
            return Err(refuse(
                "memory_limit",
                format!(
                    "{} bytes is more than agent.snapshot_memory_limit ({limit} bytes)",
                    header.len
                ),
            ));
        }
        let Some(fd) = fd else {
            return Err(refuse("bad_header", "no descriptor came with it".into()));
        };
        Mapped::from_worker(fd, header.len).map_err(|e| refuse("bad_descriptor", e.to_string()))
    }

    /// A worker's complete snapshot: held if it belongs to the generation
    /// running here and to one of this node's ranks.
    fn save(&self, header: &Header, data: Mapped) -> (Header, Option<Arc<Snapshot>>) {
        let local_world = {
            let jobs = self.jobs.lock().expect("not poisoned");
            let Some(active) = jobs.get(&header.job) else {
                return (
                    self.refused_save(header, "no start command for this job reached this node"),
                    None,
                );
            };
            if active.role.generation != header.generation {
                let why = format!(
                    "it is of generation {}, this node runs generation {}",
                    header.generation, active.role.generation
                );
                return (self.refused_save(header, &why), None);
            }
            let first = active.role.node_rank as i32 * active.local_world;
            if !(first..first + active.local_world).contains(&header.rank) {
                return (
                    self.refused_save(header, "that rank does not run on this node"),
                    None,
                );
            }
            active.local_world
        };
        let snapshot = Arc::new(Snapshot {
            job: header.job.clone(),
            rank: header.rank,
            step: header.step,
            generation: header.generation,
            local_world,
            digest: digest::of(&data),
            data,
            costs: Costs {
                block_us: header.block_us.max(0),
                step_us: header.step_us.max(0),
                transfer_us: 0,
            },
        });
        match self.hold(snapshot.clone(), Origin::Own) {
            Ok(()) => (reply(true, ""), Some(snapshot)),
            Err(reason) => (reply(false, reason), None),
        }
    }

    fn refused_save(&self, header: &Header, why: &str) -> Header {
        let message = format!(
            "snapshot of job {} rank {} step {} not kept: {why}",
            header.job, header.rank, header.step
        );
        self.refuse(
            "not_this_job",
            Some(&header.job),
            Some(header.rank),
            &message,
        );
        reply(false, message)
    }

    /// The state a starting worker resumes from, as the start command
    /// chose it; or a reply that says to use the disk checkpoint, and why.
    async fn restore(&self, header: &Header) -> (Header, Option<Arc<Snapshot>>) {
        let (restore, fetch) = {
            let jobs = self.jobs.lock().expect("not poisoned");
            let Some(active) = jobs
                .get(&header.job)
                .filter(|a| a.role.generation == header.generation)
            else {
                return (
                    reply(
                        false,
                        format!(
                            "no start command of job {} generation {} reached this node",
                            header.job, header.generation
                        ),
                    ),
                    None,
                );
            };
            let fetch = self
                .fetches
                .lock()
                .expect("not poisoned")
                .get(&(header.job.clone(), header.rank))
                .cloned();
            (active.role.restore_of(&self.node, header.rank), fetch)
        };
        let Some(restore) = restore else {
            let mut answer = reply(false, "a first start: nothing to restore");
            answer.source = "none".into();
            return (answer, None);
        };
        let fetched = fetch.is_some();
        let found = match (restore.step, restore.from_rank) {
            (Some(step), Some(from)) => match fetch {
                None => self
                    .store()
                    .get(&header.job, from, step)
                    .ok_or_else(|| format!("step {step} of rank {from} is no longer held here")),
                Some(mut fetch) => {
                    match tokio::time::timeout(FETCH_WAIT, fetch.wait_for(Option::is_some)).await {
                        Ok(Ok(result)) => result.clone().expect("waited for it"),
                        _ => Err(format!("no answer from {} in time", restore.resume_from)),
                    }
                }
            },
            _ => Err("the start command chose the disk checkpoint".to_string()),
        };
        let found = found.and_then(|s| {
            if s.data.intact(&s.digest) {
                Ok(s)
            } else {
                Err(format!(
                    "step {} was altered after it was handed over",
                    s.step
                ))
            }
        });
        let key = (header.job.clone(), header.rank);
        // Where it really came from: a replica source held here is memory.
        let source = if fetched {
            restore.resume_from.clone()
        } else {
            "memory".to_string()
        };
        match found {
            Ok(snapshot) => {
                self.restored.lock().expect("not poisoned").insert(
                    key,
                    Restored {
                        source: source.clone(),
                        step: Some(snapshot.step),
                        bytes: snapshot.bytes() as i64,
                    },
                );
                let answer = Header {
                    op: "reply".into(),
                    ok: true,
                    job: snapshot.job.clone(),
                    rank: header.rank,
                    step: snapshot.step,
                    generation: header.generation,
                    len: snapshot.bytes(),
                    digest: snapshot.digest.clone(),
                    source,
                    ..Header::default()
                };
                (answer, Some(snapshot))
            }
            Err(why) => {
                if restore.step.is_some() {
                    self.refuse(
                        "not_restored",
                        Some(&header.job),
                        Some(header.rank),
                        &format!(
                            "rank {} resumes from the disk checkpoint, not {}: {why}",
                            header.rank, restore.resume_from
                        ),
                    );
                }
                self.restored.lock().expect("not poisoned").insert(
                    key,
                    Restored {
                        source: "checkpoint".into(),
                        step: None,
                        bytes: 0,
                    },
                );
                let mut answer = reply(false, why);
                answer.source = "checkpoint".into();
                (answer, None)
            }
        }
    }
}
