//! What the log says about one job, kept in the order it was read; the
//! split sorts it. Every list is bounded: a job that runs for months keeps
//! its newest facts, and the oldest snapshot costs fold into a total.

use std::collections::{BTreeMap, VecDeque};

use crate::records::{Command, FailureEvent, RestoreReport};

/// Facts kept per list, at most.
pub const FACTS: usize = 4096;
/// Snapshot steps kept one by one (the restore points work redone is
/// measured from); older ones fold into `snapshot_us_folded`.
pub const STEPS: usize = 256;

/// One failure that named the job.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureFact {
    pub id: String,
    pub first_evidence_ms: i64,
    pub detected_ms: i64,
}

/// One start command of the job, and what it was caused by.
#[derive(Debug, Clone, PartialEq)]
pub struct StartFact {
    pub id: String,
    pub time_ms: i64,
    pub causation: Vec<String>,
}

/// A rank's restore after a start command.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestoreFact {
    /// From the start command's time to this rank's first step.
    pub restore_ms: i64,
    /// The step restored; `None`: the disk checkpoint.
    pub step: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFacts {
    pub submitted_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    /// (decision time, GPUs it gave the job).
    pub sizes: VecDeque<(i64, u32)>,
    pub failures: VecDeque<FailureFact>,
    pub starts: VecDeque<StartFact>,
    /// start command id → its ranks' restores.
    pub restores: BTreeMap<String, Vec<RestoreFact>>,
    /// step → (first time it was reported stored, slowest rank's block µs).
    pub steps: BTreeMap<i64, (i64, i64)>,
    /// Blocking of steps no longer kept one by one, µs.
    pub snapshot_us_folded: i64,
}

fn push_bounded<T>(list: &mut VecDeque<T>, item: T) {
    list.push_back(item);
    if list.len() > FACTS {
        list.pop_front();
    }
}

impl JobFacts {
    pub fn submitted(&mut self, time_ms: i64) {
        self.submitted_ms = Some(self.submitted_ms.map_or(time_ms, |t| t.min(time_ms)));
    }

    pub fn finished(&mut self, time_ms: i64) {
        self.finished_ms = Some(self.finished_ms.map_or(time_ms, |t| t.max(time_ms)));
    }

    /// A decision's size for the job. Every decision names every job of
    /// its cluster: only a change is kept (a cluster's decisions are read
    /// in order), so the bound holds sizes, not decisions.
    pub fn placed(&mut self, time_ms: i64, gpus: u32) {
        if let Some(last) = self.sizes.back_mut()
            && last.1 == gpus
        {
            last.0 = last.0.min(time_ms);
            return;
        }
        push_bounded(&mut self.sizes, (time_ms, gpus));
    }

    pub fn failure(&mut self, f: &FailureEvent) {
        if self.failures.iter().any(|k| k.id == f.id) {
            return; // delivered again
        }
        push_bounded(
            &mut self.failures,
            FailureFact {
                id: f.id.clone(),
                first_evidence_ms: f.first_evidence_ms,
                detected_ms: f.detected_ms,
            },
        );
    }

    pub fn started(&mut self, c: &Command) {
        push_bounded(
            &mut self.starts,
            StartFact {
                id: c.id.clone(),
                time_ms: c.time_ms,
                causation: c.causation.clone(),
            },
        );
    }

    pub fn restored(&mut self, r: &RestoreReport) {
        let ranks = self.restores.entry(r.command_id.clone()).or_default();
        ranks.push(RestoreFact {
            restore_ms: r.restore_ms,
            step: r.step,
        });
        if self.restores.len() > FACTS
            && let Some(oldest) = self.restores.keys().next().cloned()
        {
            self.restores.remove(&oldest);
        }
    }

    pub fn snapshot(&mut self, step: i64, time_ms: i64, block_us: i64) {
        let entry = self.steps.entry(step).or_insert((time_ms, 0));
        entry.0 = entry.0.min(time_ms);
        entry.1 = entry.1.max(block_us.max(0));
        while self.steps.len() > STEPS {
            if let Some((_, (_, block))) = self.steps.pop_first() {
                self.snapshot_us_folded += block;
            }
        }
    }
}

/// When commands succeeded, by id (bounded: the newest [`FACTS`] × 4).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Results {
    at: BTreeMap<String, i64>,
    order: VecDeque<String>,
}

impl Results {
    pub fn note(&mut self, command_id: &str, time_ms: i64) {
        if self.at.contains_key(command_id) {
            return;
        }
        self.at.insert(command_id.to_string(), time_ms);
        self.order.push_back(command_id.to_string());
        if self.order.len() > FACTS * 4
            && let Some(old) = self.order.pop_front()
        {
            self.at.remove(&old);
        }
    }

    pub fn get(&self, command_id: &str) -> Option<i64> {
        self.at.get(command_id).copied()
    }
}
