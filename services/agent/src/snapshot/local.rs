//! The local socket: workers save snapshots and ask for the one to
//! restore. A snapshot is held only once wholly received with a matching
//! checksum; a worker killed mid-save leaves nothing anyone restores.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::store::{Origin, Snapshot};
use super::wire::{self, Header, WireError};
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
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::with_capacity(1 << 20, read);
    loop {
        let header = match wire::read_header(&mut read).await {
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
        let (answer, payload) = match header.op.as_str() {
            "save" => {
                let limit = service.store().limit();
                if header.len > limit {
                    // Read past it, so the worker's next save still lands.
                    let skipped =
                        tokio::io::copy(&mut (&mut read).take(header.len), &mut tokio::io::sink())
                            .await;
                    let message = format!(
                        "snapshot of job {} rank {} step {} not kept: {} bytes is more than agent.snapshot_memory_limit ({limit} bytes)",
                        header.job, header.rank, header.step, header.len
                    );
                    service.refuse(
                        "memory_limit",
                        Some(&header.job),
                        Some(header.rank),
                        &message,
                    );
                    if skipped.ok() != Some(header.len) {
                        return;
                    }
                    let _ = wire::write(&mut write, &reply(false, message), &[]).await;
                    continue;
                }
                match wire::read_payload(&mut read, &header, limit).await {
                    Ok(payload) => (service.save(&header, payload), None),
                    Err(e) => {
                        let message = format!(
                            "snapshot of job {} rank {} step {} not kept: {e}",
                            header.job, header.rank, header.step
                        );
                        service.refuse(
                            reason_of(&e),
                            Some(&header.job),
                            Some(header.rank),
                            &message,
                        );
                        if !matches!(e, WireError::Checksum) {
                            return; // the stream is out of step or gone
                        }
                        (reply(false, message), None)
                    }
                }
            }
            "restore" => service.restore(&header).await,
            other => (reply(false, format!("unknown op {other:?}")), None),
        };
        let data = payload
            .as_ref()
            .map_or(&[][..], |s: &Arc<Snapshot>| &s.data[..]);
        if wire::write(&mut write, &answer, data).await.is_err() {
            return;
        }
    }
}

impl Snapshots {
    /// A worker's complete snapshot: held if it belongs to the generation
    /// running here and to one of this node's ranks.
    fn save(&self, header: &Header, payload: wire::Payload) -> Header {
        let local_world = {
            let jobs = self.jobs.lock().expect("not poisoned");
            let Some(active) = jobs.get(&header.job) else {
                return self
                    .refused_save(header, "no start command for this job reached this node");
            };
            if active.role.generation != header.generation {
                return self.refused_save(
                    header,
                    &format!(
                        "it is of generation {}, this node runs generation {}",
                        header.generation, active.role.generation
                    ),
                );
            }
            let first = active.role.node_rank as i32 * active.local_world;
            if !(first..first + active.local_world).contains(&header.rank) {
                return self.refused_save(header, "that rank does not run on this node");
            }
            active.local_world
        };
        let snapshot = Arc::new(Snapshot {
            job: header.job.clone(),
            rank: header.rank,
            step: header.step,
            generation: header.generation,
            local_world,
            digest: payload.digest,
            data: payload.data,
        });
        match self.hold(snapshot, Origin::Own) {
            Ok(()) => reply(true, ""),
            Err(reason) => reply(false, reason),
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
