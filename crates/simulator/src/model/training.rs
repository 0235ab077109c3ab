//! Jobs at work: placement of the submitted jobs, iterations and
//! checkpoints tick by tick or over a quiet span, and the work they add up to.

use std::collections::BTreeMap;

use rand::Rng;
use unicron_core::{AgentEvent, AgentEventKind, LogRecord};

use super::table::Table;
use super::{Emission, Job, Phase, Sim, TICK_MS};
use crate::config::{SimConfig, Workload};
use crate::profiles::Model;

impl Job {
    /// `ticks` running ticks after `from` at `iteration_s` a step, as
    /// many one-tick steps would add up (a sparse feed's quiet span).
    fn run_ticks(&mut self, from: i64, ticks: i64, iteration_s: f64) {
        if ticks <= 0 {
            return;
        }
        let step = TICK_MS as f64 / 1000.0 / iteration_s;
        let start = self.partial;
        let total = start + step * ticks as f64;
        let done = total.floor();
        if done >= 1.0 {
            // The tick at which the last whole iteration was completed.
            let tick = ((done - start) / step).ceil().clamp(1.0, ticks as f64) as i64;
            self.last_completion_ms = Some(from + tick * TICK_MS);
            self.iteration += done as u64;
            self.iterations_seen += done as u64;
        }
        self.partial = total - done;
    }
}

impl Sim {
    /// Sparse feed: runs the ticks up to `until` at once, where nothing but
    /// training happens: jobs progress and checkpoint as tick by tick.
    pub(super) fn quiet_until(&mut self, until: i64) {
        if until <= self.now {
            return;
        }
        let checkpoint_ms = self.config.checkpoint_interval_s * 1000;
        let (gpn, factor) = (self.config.gpus_per_node, self.config.throughput_factor);
        let from = self.now;
        for job in self.jobs.values_mut() {
            let iteration_s = job.model.iteration_s(job.nodes.len() as u32 * gpn) / factor;
            if job.phase != Phase::Running || !iteration_s.is_finite() {
                job.downtime_ms += until - from;
                continue;
            }
            let mut at = from;
            while at < until {
                // Checkpoints are taken on the first running tick due.
                let due = (job.last_checkpoint + checkpoint_ms).max(at + TICK_MS);
                let to = due.min(until);
                job.run_ticks(at, (to - at) / TICK_MS, iteration_s);
                at = to;
                if at == due {
                    job.last_checkpoint = at;
                    job.checkpoint_iteration = job.iteration;
                }
            }
        }
        let rate = self.current_rate();
        self.truth.account_span(from, until, rate);
        self.now = until;
        self.truth.work = self.total_work();
    }

    fn total_work(&self) -> f64 {
        self.jobs
            .values()
            .map(|j| j.weight * j.model.iteration_flops() * (j.iteration as f64 + j.partial))
            .sum()
    }

    /// Transitions that end now: the job runs again (or, with no nodes
    /// left, is paused), and the faults it recovered from are over.
    pub(super) fn finish_transitions(&mut self) {
        for job in self.jobs.values_mut() {
            if let Phase::Transition { until } = job.phase
                && until <= self.now
            {
                job.phase = if job.nodes.is_empty() {
                    Phase::Paused
                } else {
                    Phase::Running
                };
                if job.phase == Phase::Running {
                    for index in job.recovering.drain(..) {
                        self.truth.faults[index].running_again_ms = Some(self.now);
                    }
                }
            }
        }
    }

    /// One tick of every running job: its iterations (each reported by
    /// every rank, every few a progress line, unless the feed is sparse)
    /// and its checkpoint when due.
    pub(super) fn progress_jobs(&mut self, out: &mut Vec<Emission>) {
        let gpn = self.config.gpus_per_node;
        let checkpoint_ms = self.config.checkpoint_interval_s * 1000;
        let factor = self.config.throughput_factor;
        for (id, job) in self.jobs.iter_mut() {
            if job.phase != Phase::Running {
                job.downtime_ms += TICK_MS;
                continue;
            }
            let iteration_s = job.model.iteration_s(job.nodes.len() as u32 * gpn) / factor;
            if !iteration_s.is_finite() {
                job.downtime_ms += TICK_MS;
                continue;
            }
            job.partial += TICK_MS as f64 / 1000.0 / iteration_s;
            while job.partial >= 1.0 {
                job.partial -= 1.0;
                job.iteration += 1;
                job.iterations_seen += 1;
                job.last_completion_ms = Some(self.now);
                if self.sparse {
                    continue;
                }
                let jitter = 1.0 + (self.rng.random::<f64>() - 0.5) * 0.04;
                for (rank, node) in job.nodes.iter().enumerate() {
                    out.push(Emission::Agent(AgentEvent {
                        cluster: self.config.cluster.clone(),
                        node: node.clone(),
                        time_ms: self.now,
                        kind: AgentEventKind::IterationDone,
                        job: Some(id.to_string()),
                        rank: Some(rank as i32),
                        exit_code: None,
                        signal: None,
                        iteration: Some(job.iteration as i64),
                        iteration_time_ms: Some(iteration_s * 1000.0 * jitter),
                        compute_ms: None,
                        idle_tick: false,
                        worker: None,
                    }));
                }
                if job.iteration % self.config.log_every_iterations == 0 {
                    out.push(Emission::Log(LogRecord {
                        cluster: self.config.cluster.clone(),
                        node: job.nodes[0].clone(),
                        time_ms: self.now,
                        source: "training".into(),
                        job: Some(id.to_string()),
                        rank: Some(0),
                        gpu: None,
                        line: format!(
                            " iteration {:>8} | consumed samples: {:>12} | elapsed time per iteration (ms): {:.1} | lm loss: {:.6E} | grad norm: 0.312 | number of skipped iterations: 0",
                            job.iteration,
                            job.iteration * 512,
                            iteration_s * 1000.0 * jitter,
                            2.0 + 8.0 / (1.0 + job.iteration as f64 / 500.0),
                        ),
                        attributes: BTreeMap::new(),
                    }));
                }
            }
            if self.now - job.last_checkpoint >= checkpoint_ms {
                job.last_checkpoint = self.now;
                job.checkpoint_iteration = job.iteration;
            }
        }
        self.truth.work = self.total_work();
    }
}

/// Jobs sized to fill the cluster: each gets the nodes of one replica,
/// then the rest go round-robin.
pub(super) fn plan_jobs(config: &SimConfig) -> Table<Job> {
    let gpn = config.gpus_per_node;
    let models: Vec<Model> = (0..config.jobs)
        .map(|i| config.workload.job(i as usize).0)
        .collect();
    let mut nodes: Vec<u32> = models
        .iter()
        .map(|m| m.replica_gpus.div_ceil(gpn))
        .collect();
    let mut left = config.nodes.saturating_sub(nodes.iter().sum());
    // Uniform jobs grow a node at a time; heterogeneous ones a whole
    // replica at a time (a part of one adds nothing), while one fits.
    let step = |m: &Model| match config.workload {
        Workload::Uniform => 1,
        Workload::Heterogeneous => m.replica_gpus.div_ceil(gpn),
    };
    let mut i = 0;
    while left > 0 && models.iter().any(|m| step(m) <= left) {
        let n = nodes.len();
        let grow = step(&models[i % n]);
        if grow <= left {
            nodes[i % n] += grow;
            left -= grow;
        }
        i += 1;
    }
    models
        .iter()
        .zip(nodes)
        .enumerate()
        .map(|(i, (model, n))| {
            (
                format!("job-{i}"),
                Job {
                    model: *model,
                    weight: config.workload.job(i).1,
                    max_gpus: n * gpn,
                    nodes: Vec::new(),
                    phase: Phase::Pending,
                    iteration: 0,
                    partial: 0.0,
                    checkpoint_iteration: 0,
                    last_checkpoint: config.start_ms,
                    fault: None,
                    downtime_ms: 0,
                    iterations_seen: 0,
                    last_completion_ms: None,
                    watchdog_fired: None,
                    recovering: Vec::new(),
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Heterogeneous jobs get whole replicas (a part of one adds nothing)
    /// and differ in replica size, scaling and weight.
    #[test]
    fn heterogeneous_jobs_get_whole_replicas() {
        let config = SimConfig {
            nodes: 128,
            jobs: 8,
            workload: Workload::Heterogeneous,
            ..SimConfig::default()
        };
        let jobs = plan_jobs(&config);
        let used: u32 = jobs.values().map(|j| j.max_gpus / 8).sum();
        assert!(used <= 128 && used > 120, "{used} of 128 nodes");
        for job in jobs.values() {
            assert_eq!(
                job.max_gpus % job.model.replica_gpus,
                0,
                "{}",
                job.model.name
            );
        }
        let replicas: BTreeSet<u32> = jobs.values().map(|j| j.model.replica_gpus).collect();
        assert_eq!(replicas.len(), 4);
        let weights: Vec<f64> = jobs.values().map(|j| j.weight).collect();
        let spread = weights.iter().cloned().fold(0.0, f64::max)
            / weights.iter().cloned().fold(f64::MAX, f64::min);
        assert!(spread >= 10.0, "{weights:?}");
        // The uniform default is what it was: a node at a time.
        let uniform = plan_jobs(&SimConfig {
            nodes: 16,
            jobs: 3,
            ..SimConfig::default()
        });
        let sizes: Vec<u32> = uniform.values().map(|j| j.max_gpus / 8).collect();
        assert_eq!(sizes.iter().sum::<u32>(), 16, "{sizes:?}");
    }
}
