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
        // Twice the window: a rank read ahead of its peers still has the
        // iterations they are judged on.
        while self.recent.len() > 2 * window {
            self.recent.pop_front();
        }
    }

    /// This rank's figure at `iteration`, when it reported one.
    fn at(&self, iteration: i64) -> Option<f64> {
        self.recent
            .binary_search_by_key(&iteration, |(i, _)| *i)
            .ok()
            .map(|k| self.recent[k].1)
    }

    /// The `window` newest iterations this rank reported, up to `iteration`.
    fn window_to(&self, iteration: i64, window: usize) -> Option<Vec<i64>> {
        let upto: Vec<i64> = self
            .recent
            .iter()
            .map(|(i, _)| *i)
            .filter(|i| *i <= iteration)
            .collect();
        (upto.len() >= window && upto.last() == Some(&iteration))
            .then(|| upto[upto.len() - window..].to_vec())
    }
}

/// The upper median (one slow step in two does not move it down).
fn upper_median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
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
        /// The median of its figure over its peers' median, step by step.
        slowdown: f64,
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
        signals.extend(self.stragglers(
            rank,
            iteration,
            straggler_factor,
            window,
            figure.is_some(),
        ));
        signals
    }

    /// Judges every rank on the same iterations, once each active rank has
    /// reported `iteration`. A rank's slowdown is the median, over the
    /// window, of its figure at an iteration against its peers' median at
    /// that same iteration: ranks read at different moments of a change
    /// that struck them all, or a window that straddles the change, would
    /// otherwise look apart (the iteration a change lands in finds each
    /// rank at another point of its step).
    fn stragglers(
        &mut self,
        reporter: i32,
        iteration: i64,
        factor: f64,
        window: usize,
        compute: bool,
    ) -> Vec<ProgressSignal> {
        let Some(iterations) = self
            .ranks
            .get(&reporter)
            .and_then(|r| r.window_to(iteration, window))
        else {
            return Vec::new();
        };
        // Ranks still in the job: heard within the window.
        let from = iterations[0];
        let active = || self.ranks.iter().filter(|(_, r)| r.last_iteration >= from);
        if active().any(|(_, r)| r.at(iteration).is_none()) {
            return Vec::new(); // not every rank is there yet (a cheap test first)
        }
        let mut rows: Vec<(i32, Vec<f64>)> = Vec::new();
        for (rank, progress) in active() {
            let row: Option<Vec<f64>> = iterations.iter().map(|i| progress.at(*i)).collect();
            match row {
                Some(row) => rows.push((*rank, row)),
                None => return Vec::new(), // not every rank is there yet
            }
        }
        if rows.len() < 3 {
            return Vec::new(); // no meaningful median of peers
        }
        let mut ratios = paired_ratios(&rows);
        let typical: Vec<f64> = rows
            .iter()
            .map(|(_, row)| upper_median(&mut row.clone()))
            .collect();
        let mut signals = Vec::new();
        for (k, (rank, _)) in rows.iter().enumerate() {
            let slowdown = upper_median(&mut ratios[k]);
            let entry = self.ranks.get_mut(rank).expect("listed above");
            if slowdown > factor {
                if !entry.straggling {
                    entry.straggling = true;
                    let mut peers: Vec<f64> = typical
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != k)
                        .map(|(_, t)| *t)
                        .collect();
                    signals.push(ProgressSignal::Straggler {
                        rank: *rank,
                        node: entry.node.clone(),
                        rank_ms: typical[k],
                        median_ms: upper_median(&mut peers),
                        slowdown,
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

/// For each rank (row) and iteration (column): its figure over the upper
/// median of the other ranks' figures at that iteration (1 where that
/// median is not positive: no evidence either way).
fn paired_ratios(rows: &[(i32, Vec<f64>)]) -> Vec<Vec<f64>> {
    let columns = rows[0].1.len();
    let mut ratios = vec![Vec::with_capacity(columns); rows.len()];
    let middle = (rows.len() - 1) / 2; // the peers' upper median, by index
    for c in 0..columns {
        let mut column: Vec<f64> = rows.iter().map(|(_, row)| row[c]).collect();
        column.sort_by(f64::total_cmp);
        for (k, (_, row)) in rows.iter().enumerate() {
            let mine = row[c];
            // Leaving out one copy of `mine` shifts what lies above it.
            let below_or_at = column.partition_point(|v| v.total_cmp(&mine).is_le());
            let peers_median = if below_or_at - 1 > middle {
                column[middle]
            } else {
                column[middle + 1]
            };
            ratios[k].push(if peers_median > 0.0 {
                mine / peers_median
            } else {
                1.0
            });
        }
    }
    ratios
}
