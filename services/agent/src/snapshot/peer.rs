//! Agent to agent over TCP: replicas pushed to the node the start command
//! names as this node's holder, and fetched back by a node that restores a
//! rank whose state it does not hold. Every header is signed with the
//! cluster's secret; a replica is accepted only from the node the signed
//! command names as its sender for that job and generation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::Snapshots;
use super::local::reason_of;
use super::mapped::Mapped;
use super::store::{Costs, Origin, Snapshot};
use super::wire::{self, Header, WireError};
use crate::metrics::{REPLICA_BYTES, REPLICA_SECONDS};

/// Tries of a fetch before the rank falls back to the disk checkpoint.
const FETCH_TRIES: u32 = 3;
/// Connect and per-message limit between agents.
const PEER_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn serve(service: Arc<Snapshots>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, from)) => {
                let _ = stream.set_nodelay(true);
                let service = service.clone();
                tokio::spawn(async move {
                    if let Err(e) = connection(&service, stream).await
                        && !matches!(e, WireError::Closed)
                    {
                        tracing::debug!(%from, error = %e, "peer connection ended");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "snapshot service accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn refusal(service: &Snapshots, reason: String) -> Header {
    let mut h = Header {
        op: "reply".into(),
        reason,
        ..Header::default()
    };
    service.sign(&mut h);
    h
}

async fn connection(service: &Snapshots, stream: TcpStream) -> Result<(), WireError> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::with_capacity(1 << 20, read);
    loop {
        let header = wire::read_header(&mut read).await?;
        // The payload follows its header at once: from here to verified is
        // the transfer the planner's interval must leave room for.
        let arrived = std::time::Instant::now();
        if !service.verified(&header) {
            let message = format!(
                "{} from {:?} for job {} rank {} refused: its signature does not verify under this cluster's secret",
                header.op, header.from, header.job, header.rank
            );
            service.refuse("signature", Some(&header.job), Some(header.rank), &message);
            wire::write(&mut write, &refusal(service, message), &[]).await?;
            return Ok(());
        }
        match header.op.as_str() {
            "replica" => {
                let (limit, spare) = service.spare_for(header.len);
                let data = match wire::read_peer_payload(&mut read, &header, limit, spare).await {
                    Ok(payload) => payload.data,
                    Err(e) => {
                        let message = format!(
                            "replica of job {} rank {} step {} from {} not kept: {e}",
                            header.job, header.rank, header.step, header.from
                        );
                        service.refuse(
                            reason_of(&e),
                            Some(&header.job),
                            Some(header.rank),
                            &message,
                        );
                        if matches!(e, WireError::Checksum) {
                            wire::write(&mut write, &refusal(service, message), &[]).await?;
                            continue;
                        }
                        return Err(e);
                    }
                };
                let transfer_us = arrived.elapsed().as_micros() as i64;
                let answer = match service.accept_replica(&header, data, transfer_us) {
                    Ok(()) => {
                        let mut h = Header {
                            op: "reply".into(),
                            ok: true,
                            ..Header::default()
                        };
                        service.sign(&mut h);
                        h
                    }
                    Err(reason) => refusal(service, reason),
                };
                wire::write(&mut write, &answer, &[]).await?;
            }
            "fetch" => {
                let found = service.store().get(&header.job, header.rank, header.step);
                match found {
                    Some(s) => {
                        let mut h = Header {
                            op: "reply".into(),
                            ok: true,
                            job: s.job.clone(),
                            rank: s.rank,
                            step: s.step,
                            generation: s.generation,
                            local_world: s.local_world,
                            len: s.bytes(),
                            digest: s.digest.clone(),
                            from: service.node.clone(),
                            ..Header::default()
                        };
                        service.sign(&mut h);
                        wire::write(&mut write, &h, &s.data).await?;
                    }
                    None => {
                        let why = format!(
                            "{} holds no snapshot of job {} rank {} at step {}",
                            service.node, header.job, header.rank, header.step
                        );
                        wire::write(&mut write, &refusal(service, why), &[]).await?;
                    }
                }
            }
            other => {
                let why = format!("unknown op {other:?}");
                wire::write(&mut write, &refusal(service, why), &[]).await?;
            }
        }
    }
}

impl Snapshots {
    fn sign(&self, header: &mut Header) {
        if let Some(secret) = &self.secret {
            header.sign(secret);
        }
    }

    fn verified(&self, header: &Header) -> bool {
        self.secret.as_ref().is_some_and(|s| header.verify(s))
    }

    /// The byte limit of a payload and, if `len` is within it, a spare
    /// memfd to receive it into.
    fn spare_for(&self, len: u64) -> (u64, Option<std::fs::File>) {
        let mut store = self.store();
        let limit = store.limit();
        (
            limit,
            (len <= limit).then(|| store.take_spare(len)).flatten(),
        )
    }

    /// A verified replica: kept only if the newest start command of its
    /// job here names its sender as the node this one holds replicas of,
    /// for the same generation.
    fn accept_replica(
        &self,
        header: &Header,
        data: Mapped,
        transfer_us: i64,
    ) -> Result<(), String> {
        let refuse = |why: String| {
            let message = format!(
                "replica of job {} rank {} step {} from {} not kept: {why}",
                header.job, header.rank, header.step, header.from
            );
            self.refuse("not_named", Some(&header.job), Some(header.rank), &message);
            message
        };
        {
            let jobs = self.jobs.lock().expect("not poisoned");
            let Some(active) = jobs.get(&header.job) else {
                return Err(refuse(
                    "no start command of that job reached this node".into(),
                ));
            };
            if active.role.generation != header.generation {
                return Err(refuse(format!(
                    "it is of generation {}, the job here is at generation {}",
                    header.generation, active.role.generation
                )));
            }
            if active.role.replica_sender(&self.node) != Some(header.from.as_str()) {
                return Err(refuse(format!(
                    "the start command does not name {} as the node whose replicas {} keeps",
                    header.from, self.node
                )));
            }
        }
        let snapshot = Arc::new(Snapshot {
            job: header.job.clone(),
            rank: header.rank,
            step: header.step,
            generation: header.generation,
            local_world: header.local_world,
            digest: header.digest.clone(),
            data,
            costs: Costs {
                transfer_us,
                ..Costs::default()
            },
        });
        self.hold(snapshot, Origin::Replica)
    }

    /// Where this node's replicas of `job` go, per its newest start command.
    fn holder_of(&self, job: &str, generation: i64) -> Option<(String, String)> {
        let jobs = self.jobs.lock().expect("not poisoned");
        let active = jobs.get(job).filter(|a| a.role.generation == generation)?;
        let (node, address) = active.role.replica_holder()?;
        Some((node.to_string(), address.to_string()))
    }
}

/// Sends each own snapshot to this node's replica holder. When snapshots
/// come faster than they travel, only the newest of each rank is sent.
pub async fn replicate(service: Arc<Snapshots>, mut queue: mpsc::UnboundedReceiver<Arc<Snapshot>>) {
    let mut connections: BTreeMap<String, TcpStream> = BTreeMap::new();
    while let Some(first) = queue.recv().await {
        let mut newest: BTreeMap<(String, i32), Arc<Snapshot>> = BTreeMap::new();
        newest.insert((first.job.clone(), first.rank), first);
        while let Ok(more) = queue.try_recv() {
            newest.insert((more.job.clone(), more.rank), more);
        }
        for snapshot in newest.into_values() {
            let Some((holder, address)) = service.holder_of(&snapshot.job, snapshot.generation)
            else {
                continue;
            };
            let started = std::time::Instant::now();
            let sent = push(&service, &mut connections, &address, &snapshot).await;
            match sent {
                Ok(()) => {
                    let seconds = started.elapsed().as_secs_f64();
                    ::metrics::counter!(REPLICA_BYTES.name).increment(snapshot.bytes());
                    ::metrics::histogram!(REPLICA_SECONDS.name).record(seconds);
                    tracing::debug!(job = %snapshot.job, rank = snapshot.rank, step = snapshot.step, bytes = snapshot.bytes(), seconds, %holder, "replica sent");
                }
                Err(why) => {
                    connections.remove(&address);
                    service.refuse(
                        "replica_not_sent",
                        Some(&snapshot.job),
                        Some(snapshot.rank),
                        &format!(
                            "replica of step {} not kept by {holder}: {why}",
                            snapshot.step
                        ),
                    );
                }
            }
        }
    }
}

pub(super) async fn push(
    service: &Snapshots,
    connections: &mut BTreeMap<String, TcpStream>,
    address: &str,
    snapshot: &Snapshot,
) -> Result<(), String> {
    if !connections.contains_key(address) {
        let stream = tokio::time::timeout(PEER_TIMEOUT, TcpStream::connect(address))
            .await
            .map_err(|_| format!("no connection to {address} in time"))?
            .map_err(|e| format!("cannot connect to {address}: {e}"))?;
        let _ = stream.set_nodelay(true);
        connections.insert(address.to_string(), stream);
    }
    let stream = connections.get_mut(address).expect("inserted above");
    let mut header = Header {
        op: "replica".into(),
        job: snapshot.job.clone(),
        rank: snapshot.rank,
        step: snapshot.step,
        generation: snapshot.generation,
        local_world: snapshot.local_world,
        len: snapshot.bytes(),
        digest: snapshot.digest.clone(),
        from: service.node.clone(),
        ..Header::default()
    };
    service.sign(&mut header);
    let exchange = async {
        wire::write(stream, &header, &snapshot.data).await?;
        let mut read = BufReader::new(&mut *stream);
        wire::read_header(&mut read).await
    };
    let answer = tokio::time::timeout(PEER_TIMEOUT, exchange)
        .await
        .map_err(|_| "no answer in time".to_string())?
        .map_err(|e| e.to_string())?;
    if !service.verified(&answer) {
        return Err("its answer is not signed with this cluster's secret".into());
    }
    if answer.ok {
        Ok(())
    } else {
        Err(answer.reason)
    }
}

/// Fetches `job` rank `rank` at `step` from `node`, verified; retried a
/// few times (the peer may be restarting its connection), then the reason.
pub async fn fetch(
    service: &Snapshots,
    address: &str,
    node: &str,
    job: &str,
    rank: i32,
    step: i64,
) -> Result<Arc<Snapshot>, String> {
    let mut last = String::new();
    for attempt in 0..FETCH_TRIES {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
        }
        match tokio::time::timeout(PEER_TIMEOUT, fetch_once(service, address, job, rank, step))
            .await
        {
            Ok(Ok(s)) => return Ok(Arc::new(s)),
            Ok(Err(FetchError::Refused(why))) => return Err(format!("{node} refused: {why}")),
            Ok(Err(FetchError::Retry(why))) => last = why,
            Err(_) => last = "no answer in time".into(),
        }
        tracing::warn!(%node, job, rank, step, attempt, reason = %last, "replica fetch retried");
    }
    Err(format!("from {node} after {FETCH_TRIES} tries: {last}"))
}

enum FetchError {
    /// The peer answered no: retrying changes nothing.
    Refused(String),
    Retry(String),
}

async fn fetch_once(
    service: &Snapshots,
    address: &str,
    job: &str,
    rank: i32,
    step: i64,
) -> Result<Snapshot, FetchError> {
    let retry = |e: String| FetchError::Retry(e);
    let mut stream = TcpStream::connect(address)
        .await
        .map_err(|e| retry(format!("cannot connect to {address}: {e}")))?;
    let _ = stream.set_nodelay(true);
    let mut header = Header {
        op: "fetch".into(),
        job: job.to_string(),
        rank,
        step,
        from: service.node.clone(),
        ..Header::default()
    };
    service.sign(&mut header);
    wire::write(&mut stream, &header, &[])
        .await
        .map_err(|e| retry(e.to_string()))?;
    let mut read = BufReader::with_capacity(1 << 20, stream);
    let answer = wire::read_header(&mut read)
        .await
        .map_err(|e| retry(e.to_string()))?;
    if !service.verified(&answer) {
        return Err(FetchError::Refused(
            "its answer is not signed with this cluster's secret".into(),
        ));
    }
    if !answer.ok {
        return Err(FetchError::Refused(answer.reason));
    }
    if answer.job != job || answer.rank != rank || answer.step != step {
        return Err(FetchError::Refused(format!(
            "it sent job {} rank {} step {} instead",
            answer.job, answer.rank, answer.step
        )));
    }
    let (limit, spare) = service.spare_for(answer.len);
    let data = wire::read_peer_payload(&mut read, &answer, limit, spare)
        .await
        .map_err(|e| retry(e.to_string()))?
        .data;
    Ok(Snapshot {
        job: answer.job,
        rank: answer.rank,
        step: answer.step,
        generation: answer.generation,
        local_world: answer.local_world,
        digest: answer.digest,
        data,
        costs: Costs::default(),
    })
}
