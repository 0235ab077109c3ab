//! The snapshots this agent holds, in its own memory, within a byte limit:
//! per job and rank, the newest [`KEPT`] complete snapshots of each origin.
//! Only whole snapshots whose checksum matched are ever inserted.

use std::collections::BTreeMap;
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
    /// SHA-256 of `data`, hex.
    pub sha256: String,
    pub data: Vec<u8>,
}

impl Snapshot {
    pub fn bytes(&self) -> u64 {
        self.data.len() as u64
    }
}

/// Why a snapshot is not held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
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

/// Snapshots by job, rank and origin, oldest first.
#[derive(Debug)]
pub struct Store {
    limit: u64,
    held: u64,
    entries: BTreeMap<Key, Vec<Arc<Snapshot>>>,
}

impl Store {
    pub fn new(limit: u64) -> Store {
        Store {
            limit,
            held: 0,
            entries: BTreeMap::new(),
        }
    }

    pub fn held_bytes(&self) -> u64 {
        self.held
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Holds `snapshot`; the oldest of its key beyond [`KEPT`] goes. A
    /// snapshot of a step already held replaces that one.
    pub fn insert(&mut self, snapshot: Arc<Snapshot>, origin: Origin) -> Result<(), StoreError> {
        let key = (snapshot.job.clone(), snapshot.rank, origin);
        let list = self.entries.get(&key);
        let same = list.and_then(|l| l.iter().find(|s| s.step == snapshot.step));
        let freed = match (same, list) {
            (Some(s), _) => s.bytes(),
            (None, Some(l)) if l.len() >= KEPT => l[0].bytes(),
            _ => 0,
        };
        let after = self.held - freed + snapshot.bytes();
        if after > self.limit {
            return Err(StoreError::DoesNotFit {
                job: snapshot.job.clone(),
                rank: snapshot.rank,
                bytes: snapshot.bytes(),
                held: self.held,
                limit: self.limit,
            });
        }
        let list = self.entries.entry(key).or_default();
        list.retain(|s| s.step != snapshot.step);
        list.push(snapshot);
        list.sort_by_key(|s| s.step);
        while list.len() > KEPT {
            list.remove(0);
        }
        self.held = after;
        Ok(())
    }

    /// The snapshot of `job` rank `rank` at `step`, of any origin.
    pub fn get(&self, job: &str, rank: i32, step: i64) -> Option<Arc<Snapshot>> {
        [Origin::Own, Origin::Replica, Origin::Fetched]
            .into_iter()
            .filter_map(|o| self.entries.get(&(job.to_string(), rank, o)))
            .flatten()
            .find(|s| s.step == step)
            .cloned()
    }

    /// Drops `job`'s snapshots after `step` (a start resumes there and
    /// they are abandoned work), or all of them with `None`.
    pub fn drop_after(&mut self, job: &str, step: Option<i64>) {
        let mut freed = 0;
        for ((j, _, _), list) in self.entries.iter_mut() {
            if j != job {
                continue;
            }
            list.retain(|s| {
                let keep = step.is_some_and(|step| s.step <= step);
                if !keep {
                    freed += s.bytes();
                }
                keep
            });
        }
        self.entries.retain(|_, l| !l.is_empty());
        self.held -= freed;
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
            sha256: String::new(),
            data: vec![0; bytes],
        })
    }

    #[test]
    fn keeps_the_newest_two_per_rank_and_counts_bytes() {
        let mut store = Store::new(1000);
        for step in 1..=4 {
            store.insert(snap(0, step, 100), Origin::Own).unwrap();
        }
        assert_eq!(store.held_bytes(), 200);
        assert!(store.get("j", 0, 2).is_none());
        assert!(store.get("j", 0, 3).is_some() && store.get("j", 0, 4).is_some());
        store.insert(snap(1, 4, 100), Origin::Replica).unwrap();
        assert_eq!(store.held_bytes(), 300);
        store.drop_after("j", Some(3));
        assert_eq!(store.held_bytes(), 100);
        assert!(store.get("j", 0, 4).is_none() && store.get("j", 1, 4).is_none());
        store.drop_after("j", None);
        assert_eq!(store.held_bytes(), 0);
    }

    #[test]
    fn a_snapshot_over_the_limit_is_refused_with_the_field() {
        let mut store = Store::new(250);
        store.insert(snap(0, 1, 100), Origin::Own).unwrap();
        store.insert(snap(0, 2, 100), Origin::Own).unwrap();
        // Replacing the oldest keeps it at 200.
        store.insert(snap(0, 3, 100), Origin::Own).unwrap();
        let err = store.insert(snap(1, 3, 100), Origin::Replica).unwrap_err();
        assert!(
            err.to_string().contains("agent.snapshot_memory_limit"),
            "{err}"
        );
        assert_eq!(store.held_bytes(), 200);
    }
}
