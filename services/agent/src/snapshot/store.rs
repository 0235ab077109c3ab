//! The snapshots this agent holds, in its own memory, within a byte limit:
//! per job, rank and origin, the newest [`KEPT`] complete snapshots the
//! planner has been told of, and any newer ones not yet reported. Only
//! whole snapshots whose checksum matched are ever inserted.
//!
//! Memfds of replicas it let go of (never lent to a worker) are kept, at
//! most [`SPARES`] and within the same limit, to receive the next replica
//! into: on a VM, making a GB of fresh pages costs more than sending it.
//!
//! Why "reported": the planner mirrors this store from the agent's reports
//! and picks a restore step from that mirror. Reports go out in batches
//! (and a failure can overtake them), so a step newer than the planner
//! knows must not push out a step it may still choose.

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;

use unicron_core::planner::snapshots::KEPT;

/// Where a held snapshot came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// Saved by a worker on this node.
    Own,
    /// Sent by the peer whose replica holder this node is.
    Replica,
    /// Fetched from a peer to restore a rank here.
    Fetched,
}

/// One complete snapshot of one rank's state.
#[derive(Debug)]
pub struct Snapshot {
    pub job: String,
    pub rank: i32,
    pub step: i64,
    pub generation: i64,
    pub local_world: i32,
    /// The digest of `data` ([`super::digest`]), hex.
    pub digest: String,
    /// The bytes, in a memfd (a worker's slot, or the agent's own).
    pub data: super::mapped::Mapped,
    /// What it cost, as measured where it was made or received.
    pub costs: Costs,
}

/// A snapshot's measured costs, reported to the planner, which chooses
/// the snapshot interval from them. Microseconds; 0: not measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Costs {
    /// The worker's training thread in `save()` (own snapshots).
    pub block_us: i64,
    /// The worker's mean training step (own snapshots).
    pub step_us: i64,
    /// The replica's first byte arriving here to it being held (replicas).
    pub transfer_us: i64,
}

impl Snapshot {
    pub fn bytes(&self) -> u64 {
        self.data.len() as u64
    }
}

/// Why a snapshot is not held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    #[error(
        "job {job} rank {rank}: a snapshot of {bytes} bytes does not fit: {held} of {limit} bytes held (agent.snapshot_memory_limit)"
    )]
    DoesNotFit {
        job: String,
        rank: i32,
        bytes: u64,
        held: u64,
        limit: u64,
    },
}

type Key = (String, i32, Origin);

/// A held snapshot and whether the planner has been told of it.
#[derive(Debug)]
struct Held {
    snapshot: Arc<Snapshot>,
    reported: bool,
}

/// Spare receive memfds kept at most.
pub const SPARES: usize = 2;

/// Snapshots by job, rank and origin, oldest first.
#[derive(Debug)]
pub struct SnapshotStore {
    limit: u64,
    held: u64,
    entries: BTreeMap<Key, Vec<Held>>,
    /// Memfds to receive replicas into, with their sizes; their bytes
    /// count against `limit` and they go first when room is needed.
    spares: Vec<(File, u64)>,
    spare_bytes: u64,
}

impl SnapshotStore {
    pub fn new(limit: u64) -> SnapshotStore {
        SnapshotStore {
            limit,
            held: 0,
            entries: BTreeMap::new(),
            spares: Vec::new(),
            spare_bytes: 0,
        }
    }

    /// Bytes of the snapshots held (spares not counted).
    pub fn held_bytes(&self) -> u64 {
        self.held
    }

    /// Bytes of the spare memfds kept.
    pub fn spare_bytes(&self) -> u64 {
        self.spare_bytes
    }

    /// A spare memfd to receive `len` bytes into: one of that size if
    /// there is one (nothing to resize), else any.
    pub fn take_spare(&mut self, len: u64) -> Option<File> {
        let at = self
            .spares
            .iter()
            .position(|(_, n)| *n == len)
            .or_else(|| self.spares.len().checked_sub(1))?;
        let (file, n) = self.spares.swap_remove(at);
        self.spare_bytes -= n;
        Some(file)
    }

    /// Keeps the memfds of `gone` the agent may reuse, while they fit.
    fn recycle(&mut self, gone: impl IntoIterator<Item = Held>) {
        for held in gone {
            let Ok(snapshot) = Arc::try_unwrap(held.snapshot) else {
                continue; // still being sent or served: freed when done
            };
            let n = snapshot.bytes();
            if self.spares.len() >= SPARES || self.held + self.spare_bytes + n > self.limit {
                continue;
            }
            if let Some(file) = snapshot.data.into_spare() {
                self.spares.push((file, n));
                self.spare_bytes += n;
            }
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Holds `snapshot`, not yet reported (a fetched one never is: the
    /// planner does not mirror fetches). A snapshot of a step already held
    /// replaces that one. When the limit would be passed, the oldest of its
    /// key go first while [`KEPT`] or more are held, as they would once
    /// this one is reported; if it still does not fit, it is refused.
    pub fn insert(&mut self, snapshot: Arc<Snapshot>, origin: Origin) -> Result<(), HoldError> {
        let key = (snapshot.job.clone(), snapshot.rank, origin);
        let list = self.entries.get(&key).map_or(&[][..], Vec::as_slice);
        let replaced = list
            .iter()
            .find(|h| h.snapshot.step == snapshot.step)
            .map_or(0, |h| h.snapshot.bytes());
        let others: Vec<u64> = list
            .iter()
            .filter(|h| h.snapshot.step != snapshot.step)
            .map(|h| h.snapshot.bytes())
            .collect();
        let mut after = self.held - replaced + snapshot.bytes();
        while after + self.spare_bytes > self.limit
            && let Some((_, n)) = self.spares.pop()
        {
            self.spare_bytes -= n;
        }
        let mut evict = 0;
        while after > self.limit && others.len() - evict >= KEPT {
            after -= others[evict];
            evict += 1;
        }
        if after > self.limit {
            return Err(HoldError::DoesNotFit {
                job: snapshot.job.clone(),
                rank: snapshot.rank,
                bytes: snapshot.bytes(),
                held: self.held,
                limit: self.limit,
            });
        }
        let list = self.entries.entry(key.clone()).or_default();
        let (mut gone, kept): (Vec<Held>, Vec<Held>) = std::mem::take(list)
            .into_iter()
            .partition(|h| h.snapshot.step == snapshot.step);
        *list = kept;
        gone.extend(list.drain(..evict));
        list.push(Held {
            snapshot,
            reported: origin == Origin::Fetched,
        });
        list.sort_by_key(|h| h.snapshot.step);
        self.held = after;
        self.recycle(gone);
        self.trim(&key);
        Ok(())
    }

    /// The planner has been told of `job` rank `rank` at `step` (of this
    /// origin): reported snapshots beyond the newest [`KEPT`] go.
    pub fn reported(&mut self, job: &str, rank: i32, origin: Origin, step: i64) {
        let key = (job.to_string(), rank, origin);
        let Some(list) = self.entries.get_mut(&key) else {
            return;
        };
        for h in list.iter_mut().filter(|h| h.snapshot.step == step) {
            h.reported = true;
        }
        self.trim(&key);
    }

    /// Drops the reported snapshots of `key` older than its newest [`KEPT`]
    /// reported ones; unreported ones stay.
    fn trim(&mut self, key: &Key) {
        let Some(list) = self.entries.get_mut(key) else {
            return;
        };
        let reported = list.iter().filter(|h| h.reported).count();
        let mut extra = reported.saturating_sub(KEPT);
        let (gone, kept): (Vec<Held>, Vec<Held>) =
            std::mem::take(list).into_iter().partition(|h| {
                let goes = extra > 0 && h.reported;
                extra -= usize::from(goes);
                goes
            });
        *list = kept;
        self.held -= gone.iter().map(|h| h.snapshot.bytes()).sum::<u64>();
        self.recycle(gone);
    }

    /// The snapshot of `job` rank `rank` at `step`, of any origin.
    pub fn get(&self, job: &str, rank: i32, step: i64) -> Option<Arc<Snapshot>> {
        [Origin::Own, Origin::Replica, Origin::Fetched]
            .into_iter()
            .filter_map(|o| self.entries.get(&(job.to_string(), rank, o)))
            .flatten()
            .find(|h| h.snapshot.step == step)
            .map(|h| h.snapshot.clone())
    }

    /// Drops `job`'s snapshots after `step` (a start resumes there and
    /// they are abandoned work), or all of them with `None`.
    pub fn drop_after(&mut self, job: &str, step: Option<i64>) {
        let mut gone = Vec::new();
        for ((j, _, _), list) in self.entries.iter_mut() {
            if j != job {
                continue;
            }
            let (kept, dropped): (Vec<Held>, Vec<Held>) = std::mem::take(list)
                .into_iter()
                .partition(|h| step.is_some_and(|step| h.snapshot.step <= step));
            *list = kept;
            gone.extend(dropped);
        }
        self.entries.retain(|_, l| !l.is_empty());
        self.held -= gone.iter().map(|h| h.snapshot.bytes()).sum::<u64>();
        self.recycle(gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(rank: i32, step: i64, bytes: usize) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            job: "j".into(),
            rank,
            step,
            generation: 1,
            local_world: 1,
            digest: String::new(),
            data: super::super::mapped::Mapped::from_bytes(&vec![0; bytes]).expect("a memfd"),
            costs: Default::default(),
        })
    }

    /// Inserts and reports, as the agent does once a report went out.
    fn held(store: &mut SnapshotStore, rank: i32, step: i64, origin: Origin) {
        store.insert(snap(rank, step, 100), origin).unwrap();
        store.reported("j", rank, origin, step);
    }

    #[test]
    fn keeps_the_newest_two_reported_per_rank_and_counts_bytes() {
        let mut store = SnapshotStore::new(1000);
        for step in 1..=4 {
            held(&mut store, 0, step, Origin::Own);
        }
        assert_eq!(store.held_bytes(), 200);
        assert!(store.get("j", 0, 2).is_none());
        assert!(store.get("j", 0, 3).is_some() && store.get("j", 0, 4).is_some());
        held(&mut store, 1, 4, Origin::Replica);
        assert_eq!(store.held_bytes(), 300);
        store.drop_after("j", Some(3));
        assert_eq!(store.held_bytes(), 100);
        assert!(store.get("j", 0, 4).is_none() && store.get("j", 1, 4).is_none());
        store.drop_after("j", None);
        assert_eq!(store.held_bytes(), 0);
    }

    #[test]
    fn steps_not_yet_reported_do_not_push_out_the_ones_the_planner_knows() {
        let mut store = SnapshotStore::new(1000);
        held(&mut store, 0, 1, Origin::Own);
        held(&mut store, 0, 2, Origin::Own);
        // Two newer steps saved before their report went out: the planner
        // still knows only 1 and 2, and may pick either.
        store.insert(snap(0, 3, 100), Origin::Own).unwrap();
        store.insert(snap(0, 4, 100), Origin::Own).unwrap();
        assert!((1..=4).all(|step| store.get("j", 0, step).is_some()));
        assert_eq!(store.held_bytes(), 400);
        store.reported("j", 0, Origin::Own, 3);
        assert!(store.get("j", 0, 1).is_none() && store.get("j", 0, 2).is_some());
        store.reported("j", 0, Origin::Own, 4);
        assert!(store.get("j", 0, 2).is_none());
        assert_eq!(store.held_bytes(), 200);
    }

    #[test]
    fn a_replica_let_go_of_is_kept_as_a_spare_within_the_limit() {
        let mut store = SnapshotStore::new(300);
        for step in 1..=3 {
            held(&mut store, 0, step, Origin::Replica);
        }
        // Step 1 went: its memfd is kept, counted against the limit.
        assert_eq!((store.held_bytes(), store.spare_bytes()), (200, 100));
        // A new snapshot needs the room: the spare goes first.
        store.insert(snap(1, 1, 100), Origin::Own).unwrap();
        assert_eq!((store.held_bytes(), store.spare_bytes()), (300, 0));
        assert!(store.take_spare(100).is_none());
        store.drop_after("j", None);
        assert_eq!(store.held_bytes(), 0);
        // Two spares at most.
        assert_eq!(store.spare_bytes(), 200);
        assert!(store.take_spare(100).is_some() && store.take_spare(7).is_some());
        assert!(store.take_spare(100).is_none());
        assert_eq!(store.spare_bytes(), 0);
    }

    #[test]
    fn a_snapshot_lent_to_a_worker_or_still_in_use_is_never_reused() {
        let mut store = SnapshotStore::new(1000);
        let lent = snap(0, 1, 100);
        drop(lent.data.descriptor().unwrap());
        store.insert(lent, Origin::Replica).unwrap();
        store.reported("j", 0, Origin::Replica, 1);
        let in_use = snap(0, 2, 100);
        store.insert(in_use.clone(), Origin::Replica).unwrap();
        store.reported("j", 0, Origin::Replica, 2);
        store.drop_after("j", None);
        assert_eq!(store.spare_bytes(), 0);
        assert!(store.take_spare(100).is_none());
        drop(in_use);
    }

    #[test]
    fn a_snapshot_over_the_limit_is_refused_with_the_field() {
        let mut store = SnapshotStore::new(250);
        held(&mut store, 0, 1, Origin::Own);
        held(&mut store, 0, 2, Origin::Own);
        // At the limit, the oldest goes first: it stays at 200.
        store.insert(snap(0, 3, 100), Origin::Own).unwrap();
        assert_eq!(store.held_bytes(), 200);
        assert!(store.get("j", 0, 1).is_none());
        let err = store.insert(snap(1, 3, 100), Origin::Replica).unwrap_err();
        assert!(
            err.to_string().contains("agent.snapshot_memory_limit"),
            "{err}"
        );
        assert_eq!(store.held_bytes(), 200);
    }
}
