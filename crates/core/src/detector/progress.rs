//! Online statistics of training progress: hangs and stragglers.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::config::DetectorConfig;

/// Running mean and variance (Welford), numerically stable in one pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunningStats {
    pub count: u64,
    pub mean: f64,
    m2: f64,
}

impl RunningStats {
    pub fn push(&mut self, x: f64) {
        self.count += 1;
        let delta = x - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
    }

    pub fn variance(&self) -> f64 {
        if self.count < 2 {
            0.0
        } else {
            self.m2 / (self.count - 1) as f64
        }
    }
}

/// One rank's recent iteration figures: its own compute time where the
/// worker reports it, else its iteration time, by iteration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankProgress {
    pub node: String,
    pub last_iteration: i64,
    recent: VecDeque<(i64, f64)>,
    /// Reported as a straggler and not yet recovered.
    pub straggling: bool,
}

impl RankProgress {
    fn push(&mut self, iteration: i64, figure_ms: f64, window: usize) {
        // A restart resumes at an earlier step: what came after it is gone.
        while self.recent.back().is_some_and(|(i, _)| *i >= iteration) {
            self.recent.pop_back();
        }
        self.recent.push_back((iteration, figure_ms));
        while self.recent.len() > window {
            self.recent.pop_front();
        }
    }

    /// The median over the `window` iterations up to `iteration`, when
    /// this rank has them all: one slow step (a snapshot, a collective
    /// that waited) does not move it.
    fn typical(&self, iteration: i64, window: usize) -> Option<f64> {
        let from = iteration - window as i64;
        let mut figures: Vec<f64> = self
            .recent
            .iter()
            .filter(|(i, _)| *i > from && *i <= iteration)
            .map(|(_, f)| *f)
            .collect();
        if figures.len() < window {
            return None;
        }
        figures.sort_by(f64::total_cmp);
        Some(figures[figures.len() / 2])
    }
}

/// Progress of one job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobProgress {
    pub stats: RunningStats,
    /// Event time of the newest completed iteration.
    pub last_progress_ms: Option<i64>,
    /// Event time from which the job's stall is reported (a hang, or a
    /// failure that explains it); only an iteration completed after it
    /// re-arms the hang timer. A late record of an older iteration does
    /// not: read out of order, it would report the stall a second time.
    pub stall_reported_ms: Option<i64>,
    pub ranks: BTreeMap<i32, RankProgress>,
}

/// One completed iteration of one rank.
#[derive(Debug, Clone, Copy)]
pub struct IterationDone<'a> {
    pub rank: Option<i32>,
    pub node: &'a str,
    pub iteration: Option<i64>,
    pub time_ms: Option<f64>,
    /// The rank's own compute within `time_ms`, when the worker says.
    pub compute_ms: Option<f64>,
    pub event_ms: i64,
}

/// What one completed iteration says.
#[derive(Debug, Clone, PartialEq)]
pub enum ProgressSignal {
    /// This iteration took `factor` times the job's mean.
    SlowIteration { time_ms: f64, mean_ms: f64 },
    /// This rank is persistently slower than its peers' median, in its
    /// own compute (`compute`) or, where that is not reported, per step.
    Straggler {
        rank: i32,
        node: String,
        rank_ms: f64,
        median_ms: f64,
        compute: bool,
    },
}

impl JobProgress {
    /// Records a completed iteration and returns what it signals.
    pub fn iteration(
        &mut self,
        done: &IterationDone<'_>,
        config: &DetectorConfig,
    ) -> Vec<ProgressSignal> {
        let (hang_factor, min_iterations) = (config.hang_factor, config.hang_min_iterations);
        let (straggler_factor, window) = (config.straggler_factor, config.straggler_window);
        let (rank, node, iteration, time_ms, event_ms) = (
            done.rank,
            done.node,
            done.iteration,
            done.time_ms,
            done.event_ms,
        );
        let mut signals = Vec::new();
        self.last_progress_ms = Some(self.last_progress_ms.map_or(event_ms, |t| t.max(event_ms)));
        if self.stall_reported_ms.is_some_and(|at| event_ms > at) {
            self.stall_reported_ms = None;
        }
        let Some(time_ms) = time_ms else {
            return signals;
        };
        // A slow iteration is a hang only past the minimum stall too: a
        // 30-ms step that took 100 ms on a busy machine is noise.
        let slow_ms = (hang_factor * self.stats.mean).max(config.hang_min_stall_s * 1000.0);
        if self.stats.count >= min_iterations && time_ms > slow_ms {
            signals.push(ProgressSignal::SlowIteration {
                time_ms,
                mean_ms: self.stats.mean,
            });
        } else {
            // An outlier would inflate the mean it is judged against.
            self.stats.push(time_ms);
        }
        let (Some(rank), Some(iteration)) = (rank, iteration) else {
            return signals;
        };
        // In a synchronous job every rank's step waits for the slowest,
        // so step times are alike; only its own compute names the slow one.
        let figure = done.compute_ms.filter(|c| c.is_finite() && *c >= 0.0);
        let entry = self.ranks.entry(rank).or_default();
        if entry.node != node {
            // The rank moved (a re-plan): its history is another node's.
            *entry = RankProgress {
                node: node.to_string(),
                ..RankProgress::default()
            };
        }
        entry.last_iteration = entry.last_iteration.max(iteration);
        entry.push(iteration, figure.unwrap_or(time_ms), window);
        signals.extend(self.stragglers(iteration, straggler_factor, window, figure.is_some()));
        signals
    }

    /// Judges every rank on the same iterations, once each active rank has
    /// reported `iteration`: ranks read at different moments of a change
    /// that struck them all would otherwise look apart.
    fn stragglers(
        &mut self,
        iteration: i64,
        factor: f64,
        window: usize,
        compute: bool,
    ) -> Vec<ProgressSignal> {
        // Ranks still in the job: heard within the window.
        let active = |r: &RankProgress| r.last_iteration > iteration - window as i64;
        let mut typical = Vec::new();
        for (rank, progress) in self.ranks.iter().filter(|(_, r)| active(r)) {
            match progress.typical(iteration, window) {
                Some(t) => typical.push((*rank, t)),
                None => return Vec::new(), // not every rank is there yet
            }
        }
        if typical.len() < 3 {
            return Vec::new(); // no meaningful median of peers
        }
        let mut signals = Vec::new();
        for (rank, mine) in &typical {
            let mut peers: Vec<f64> = typical
                .iter()
                .filter(|(r, _)| r != rank)
                .map(|(_, t)| *t)
                .collect();
            peers.sort_by(f64::total_cmp);
            let median = peers[peers.len() / 2];
            let entry = self.ranks.get_mut(rank).expect("listed above");
            if median > 0.0 && *mine > factor * median {
                if !entry.straggling {
                    entry.straggling = true;
                    signals.push(ProgressSignal::Straggler {
                        rank: *rank,
                        node: entry.node.clone(),
                        rank_ms: *mine,
                        median_ms: median,
                        compute,
                    });
                }
            } else {
                entry.straggling = false;
            }
        }
        signals
    }

    /// Event time at which no progress means a hang, once the mean is trusted.
    pub fn hang_deadline_ms(&self, config: &DetectorConfig) -> Option<i64> {
        if self.stall_reported_ms.is_some() || self.stats.count < config.hang_min_iterations {
            return None;
        }
        let last = self.last_progress_ms?;
        let stall_ms = (config.hang_factor * self.stats.mean).max(config.hang_min_stall_s * 1000.0);
        Some(last + stall_ms.round() as i64)
    }

    /// The node of the rank furthest behind, when exactly one rank is.
    pub fn laggard(&self) -> Option<&str> {
        let min = self.ranks.values().map(|r| r.last_iteration).min()?;
        let mut behind = self.ranks.values().filter(|r| r.last_iteration == min);
        let first = behind.next()?;
        (behind.next().is_none() && self.ranks.len() > 1).then_some(first.node.as_str())
    }
}
