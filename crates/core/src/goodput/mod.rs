//! Goodput by cause: each job's wall time split into productive training
//! and what was lost, and to what, derived from the log alone.
//!
//! Facts are kept per job as they are read, in any order across topics;
//! the split is computed from them sorted by event time, so the same log
//! gives the same split however it was read (live, replay, an archive).
//!
//! The causes:
//! - **detection**: a failure's first evidence until its detection;
//! - **recovery**: detection until the job's first step after the start
//!   command the failure caused (the agents' `job_restored`; for jobs
//!   without agents, the command's successful result);
//! - **redone**: work done after the snapshot it restored from and lost
//!   with the failure (first evidence less the time that step was stored);
//!   unknown for a restore from a disk checkpoint, whose step the log does
//!   not carry, and counted as such;
//! - **snapshot**: the training time in-memory snapshots blocked (per
//!   step, the slowest rank's `save()`);
//! - **waiting**: no nodes (pending, paused), a start not caused by a
//!   failure of the job (its first start, a re-plan moving it) until its
//!   workers run, or the share of its peak size a job ran without
//!   (running at 3 of 4 nodes loses a quarter);
//! - **productive**: the rest.
//!
//! A failure that caused no start command of the job (a straggler kept, a
//! fault on an idle node) costs it nothing here.

mod facts;
mod split;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::Serialize;

pub use facts::{JobFacts, Results};

use crate::planner::{InputEvent, SNAPSHOT_REPORT};
use crate::records::{ClusterEventKind, CommandAction, CommandStatus};
use crate::status::Record;

/// Causes of a job's time, in the order they are reported.
pub const CAUSES: [&str; 6] = [
    "productive",
    "snapshot",
    "detection",
    "recovery",
    "redone",
    "waiting",
];

/// One job's (or a cluster's) wall time by cause, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Split {
    pub wall_s: f64,
    pub productive_s: f64,
    pub snapshot_s: f64,
    pub detection_s: f64,
    pub recovery_s: f64,
    pub redone_s: f64,
    pub waiting_s: f64,
    /// Failures that stopped the job (caused a start command).
    pub failures: u32,
    /// Of those, restores from a disk checkpoint: their redone work is
    /// not in `redone_s`.
    pub checkpoint_restores: u32,
}

impl Split {
    /// Seconds of `cause` (one of [`CAUSES`]).
    pub fn seconds(&self, cause: &str) -> f64 {
        match cause {
            "productive" => self.productive_s,
            "snapshot" => self.snapshot_s,
            "detection" => self.detection_s,
            "recovery" => self.recovery_s,
            "redone" => self.redone_s,
            "waiting" => self.waiting_s,
            _ => 0.0,
        }
    }

    /// Productive share of the wall time (1 for no time at all).
    pub fn goodput(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.productive_s / self.wall_s
        } else {
            1.0
        }
    }

    fn add(&mut self, other: &Split) {
        self.wall_s += other.wall_s;
        self.productive_s += other.productive_s;
        self.snapshot_s += other.snapshot_s;
        self.detection_s += other.detection_s;
        self.recovery_s += other.recovery_s;
        self.redone_s += other.redone_s;
        self.waiting_s += other.waiting_s;
        self.failures += other.failures;
        self.checkpoint_restores += other.checkpoint_restores;
    }
}

/// The facts of every job of every cluster; feed it every record with
/// [`Goodput::apply`].
#[derive(Debug, Clone, Default)]
pub struct Goodput {
    /// GPUs per node: decisions name nodes, sizes are in GPUs.
    node_gpus: u32,
    /// (cluster, job) → its facts.
    jobs: BTreeMap<(String, String), JobFacts>,
    /// cluster → its newest event time: where an unfinished job's time ends.
    watermarks: BTreeMap<String, i64>,
    /// When commands succeeded (read in any order with the commands).
    results: facts::Results,
}

impl Goodput {
    pub fn new(node_gpus: u32) -> Goodput {
        Goodput {
            node_gpus: node_gpus.max(1),
            ..Goodput::default()
        }
    }

    fn job(&mut self, cluster: &str, job: &str) -> &mut JobFacts {
        self.jobs
            .entry((cluster.to_string(), job.to_string()))
            .or_default()
    }

    /// The cluster's event time has reached `time_ms`: unfinished jobs'
    /// time runs to it (the newest record read moves it too).
    pub fn saw(&mut self, cluster: &str, time_ms: i64) {
        let mark = self
            .watermarks
            .entry(cluster.to_string())
            .or_insert(time_ms);
        *mark = (*mark).max(time_ms);
    }

    /// Takes one record of the log.
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Input(InputEvent::Cluster(e)) => {
                self.saw(&e.cluster, e.time_ms);
                match e.kind {
                    ClusterEventKind::JobSubmitted => {
                        if let Some(job) = &e.job_id {
                            self.job(&e.cluster, job).submitted(e.time_ms);
                        }
                    }
                    ClusterEventKind::JobFinished => {
                        if let Some(job) = &e.job_id {
                            self.job(&e.cluster, job).finished(e.time_ms);
                        }
                    }
                    ClusterEventKind::SnapshotsStored => {
                        for s in e.snapshots.iter().filter(|s| !s.replica) {
                            self.job(&e.cluster, &s.job)
                                .snapshot(s.step, e.time_ms, s.block_us);
                        }
                    }
                    ClusterEventKind::JobRestored => {
                        if let Some(r) = &e.restored {
                            self.job(&e.cluster, &r.job).restored(r);
                        }
                    }
                    _ => {}
                }
            }
            Record::Input(InputEvent::Failure(f)) => {
                self.saw(&f.cluster, f.detected_ms);
                if let Some(job) = &f.job {
                    self.job(&f.cluster, job).failure(f);
                }
            }
            Record::Input(InputEvent::Result(r)) => {
                self.saw(&r.cluster, r.time_ms);
                if r.status == CommandStatus::Succeeded {
                    self.results.note(&r.command_id, r.time_ms);
                }
            }
            Record::Decision(d) => {
                self.saw(&d.cluster, d.time_ms);
                if d.trigger.kind == SNAPSHOT_REPORT {
                    return;
                }
                let time_ms = d.time_ms;
                for (job, nodes) in &d.assignment {
                    let gpus = nodes.len() as u32 * self.node_gpus;
                    self.job(&d.cluster, job).placed(time_ms, gpus);
                }
            }
            Record::Command(c) => {
                let starts = matches!(
                    c.action,
                    CommandAction::Reattempt
                        | CommandAction::Restart
                        | CommandAction::Reconfigure
                        | CommandAction::Resume
                );
                if let (true, Some(job)) = (starts, &c.job) {
                    self.job(&c.cluster, job).started(c);
                }
            }
        }
    }

    /// The split of `job` of `cluster`, up to its end or the cluster's
    /// newest event time.
    pub fn job_split(&self, cluster: &str, job: &str) -> Option<Split> {
        let facts = self.jobs.get(&(cluster.to_string(), job.to_string()))?;
        let until = self.watermarks.get(cluster).copied().unwrap_or(0);
        Some(split::split(facts, &self.results, until))
    }

    /// Every job's split, by (cluster, job).
    pub fn splits(&self) -> BTreeMap<(String, String), Split> {
        self.jobs
            .keys()
            .filter_map(|(c, j)| Some(((c.clone(), j.clone()), self.job_split(c, j)?)))
            .collect()
    }

    /// The sum of a cluster's jobs.
    pub fn cluster_split(&self, cluster: &str) -> Split {
        let mut total = Split::default();
        for ((c, j), _) in self.jobs.iter().filter(|((c, _), _)| c == cluster) {
            if let Some(s) = self.job_split(c, j) {
                total.add(&s);
            }
        }
        total
    }
}
