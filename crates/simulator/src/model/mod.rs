//! The simulated cluster as a state machine with no I/O: `advance_to` moves
//! simulated time in one-second ticks and returns what the cluster emitted
//! (with a sparse feed it jumps over the ticks where nothing happens, see
//! [`Sim::with_sparse_feed`]);
//! `act` answers an executor's action; `observe_failure` tells the ground
//! truth what the detector reported. Every choice comes from one seeded
//! generator, and actions take effect at a time derived from the command,
//! so the same seed and the same control plane give the same run.
//!
//! This file holds the state and the clock; `injection` breaks things,
//! `emission` reports them, `actions` carries out the executor's commands,
//! `training` moves the jobs on, and `table` keeps nodes and jobs by name.

mod actions;
mod emission;
mod injection;
mod table;
mod training;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use unicron_core::executor::ActionResponse;
use unicron_core::{AgentEvent, ClusterEvent, FailureEvent, LogRecord, Severity, TelemetryBatch};

use crate::config::{Arrivals, SimConfig};
use crate::faults::{self, TraceEntry};
use crate::profiles::Model;
use crate::truth::Truth;
use actions::Scheduled;
use table::Table;

const TICK_MS: i64 = 1_000;

/// One record the cluster puts on a topic.
#[derive(Debug, Clone, PartialEq)]
pub enum Emission {
    Telemetry(TelemetryBatch),
    Log(LogRecord),
    Agent(AgentEvent),
    Cluster(ClusterEvent),
}

impl Emission {
    /// The Kafka key: the node for node records, the cluster otherwise.
    pub fn key(&self) -> &str {
        match self {
            Emission::Telemetry(t) => &t.node,
            Emission::Log(l) => &l.node,
            Emission::Agent(a) => &a.node,
            Emission::Cluster(c) => &c.cluster,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeState {
    Up,
    /// Dark: no heartbeats, no telemetry, no logs.
    Down,
    /// Taken out by an executor; back, repaired, at `repair_at`. A node
    /// that was dark stays dark until then; a live one keeps heart-beating
    /// (its host is up, its GPUs drained).
    Isolated {
        repair_at: i64,
        dark: bool,
    },
}

#[derive(Debug, Clone)]
struct Node {
    state: NodeState,
    job: Option<String>,
    /// Injected fault not yet resolved, index into the truth's faults.
    fault: Option<usize>,
    ecc_dbe: Vec<f64>,
    next_heartbeat: i64,
    next_telemetry: i64,
    next_noise: i64,
}

impl Node {
    /// Dark: down, or isolated while down.
    fn is_dark(&self) -> bool {
        matches!(
            self.state,
            NodeState::Down | NodeState::Isolated { dark: true, .. }
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Submitted, never placed.
    Pending,
    Running,
    /// Switching; runs again at `until`.
    Transition {
        until: i64,
    },
    /// Broken by a fault, or lost a node: no progress until an action.
    Stalled,
    Paused,
}

#[derive(Debug, Clone)]
struct Job {
    model: Model,
    weight: f64,
    max_gpus: u32,
    nodes: Vec<String>,
    phase: Phase,
    iteration: u64,
    /// Fraction of the current iteration done.
    partial: f64,
    checkpoint_iteration: u64,
    last_checkpoint: i64,
    fault: Option<usize>,
    downtime_ms: i64,
    /// Iterations completed since the detector last saw the job's
    /// processes stop (a clean stop resets its progress statistics).
    iterations_seen: u64,
    /// Tick of the newest completed iteration.
    last_completion_ms: Option<i64>,
    /// The hang whose NCCL watchdog has fired (index into the truth's
    /// faults): it fires once per hang.
    watchdog_fired: Option<usize>,
    /// Faults of this job resolved while it has not run since.
    recovering: Vec<usize>,
}

/// The whole simulated cluster.
#[derive(Debug)]
pub struct Sim {
    config: SimConfig,
    rng: ChaCha8Rng,
    now: i64,
    started: bool,
    nodes: Table<Node>,
    jobs: Table<Job>,
    trace: VecDeque<TraceEntry>,
    next_random_fault: Option<i64>,
    /// Demo arrivals: severities the first random failures still have to
    /// show, drawn in seeded order.
    demo_severities: Vec<Severity>,
    /// Failure times, kinds and targets draw only from this generator, so
    /// every policy run with one seed meets the same failures at the same
    /// times, whatever else differs.
    fault_rng: ChaCha8Rng,
    scheduled: BTreeMap<(i64, String), Scheduled>,
    answered: BTreeMap<String, ActionResponse>,
    truth: Truth,
    /// Emit only what a failure makes matter (see [`Sim::with_sparse_feed`]).
    sparse: bool,
    /// Sparse feed: nodes (by position) with a fault whose heartbeats are
    /// reported.
    watched: BTreeSet<usize>,
    /// Isolated nodes (by position) by repair time, so a tick need not scan
    /// every node.
    repairs: BTreeSet<(i64, usize)>,
}

impl Sim {
    /// A cluster of `config.nodes` idle nodes and `config.jobs` submitted
    /// jobs; failures from `trace` if given, else from the taxonomy mix.
    pub fn new(config: SimConfig, trace: Option<Vec<TraceEntry>>) -> Sim {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        // Drawn in the order of `node_names`, whatever order the table keeps.
        let mut nodes = Vec::new();
        for name in config.node_names() {
            let offset = rng.random_range(0..1_000);
            nodes.push((
                name,
                Node {
                    state: NodeState::Up,
                    job: None,
                    fault: None,
                    ecc_dbe: vec![0.0; config.gpus_per_node as usize],
                    next_heartbeat: config.start_ms + offset,
                    next_telemetry: config.start_ms + offset,
                    next_noise: config.start_ms
                        + faults::exponential_ms(&mut rng, config.noise_interval_s * 1000.0),
                },
            ));
        }
        let jobs = training::plan_jobs(&config);
        let mut fault_rng = ChaCha8Rng::seed_from_u64(config.seed ^ 0x5eed_fa11);
        let mean_ms = config.mean_interval_s() * 1000.0;
        let next_random_fault = (trace.is_none() && mean_ms > 0.0).then(|| {
            config.start_ms + injection::interval(&mut fault_rng, config.arrivals, mean_ms)
        });
        let demo_severities = match config.arrivals {
            Arrivals::Demo => vec![Severity::Sev1, Severity::Sev2, Severity::Sev3],
            Arrivals::Poisson => Vec::new(),
        };
        let ideal_rate = jobs
            .values()
            .map(|j| j.weight * j.model.throughput(j.max_gpus))
            .sum();
        Sim {
            now: config.start_ms,
            started: false,
            truth: Truth::new(ideal_rate, config.start_ms),
            rng,
            nodes: nodes.into_iter().collect(),
            jobs,
            trace: trace.unwrap_or_default().into(),
            next_random_fault,
            demo_severities,
            fault_rng,
            scheduled: BTreeMap::new(),
            answered: BTreeMap::new(),
            config,
            sparse: false,
            watched: BTreeSet::new(),
            repairs: BTreeSet::new(),
        }
    }

    /// The discrete-event form for policy evaluation at scale: time jumps
    /// from one event to the next (a failure, an action's effect, the end
    /// of a transition, a repair), and healthy nodes and jobs report in
    /// aggregate, by what the simulator knows, instead of record by record.
    /// What the detector still sees: every failure's log lines and exits,
    /// the heartbeats of a node from the second before its failure until
    /// its fault is cleared (then it leaves the watch, as a departing agent
    /// does), a hanging job's recent iterations, the SIGTERMs of stopped
    /// jobs, and idle ticks that move its clock (the offline loop's). What
    /// it stops exercising: heartbeat deadlines of healthy nodes, DCGM
    /// telemetry and metric rules (an ECC error is still found by its Xid
    /// line), benign log noise, progress lines, straggler statistics and
    /// per-rank iteration records. Failures, actions and their timing
    /// are the same as with every record (`docs/EVALUATION.md`).
    pub fn with_sparse_feed(mut self) -> Sim {
        self.sparse = true;
        self
    }

    /// Whether this simulation emits a sparse feed.
    pub fn is_sparse(&self) -> bool {
        self.sparse
    }

    /// The next tick at which something can happen: with every record that
    /// is the next tick; with a sparse feed the soonest of the scheduled
    /// actions, transitions, repairs and failures, or the next tick while a
    /// watched node reports.
    pub fn next_event_ms(&self) -> i64 {
        let next_tick = self.now + TICK_MS;
        if !self.sparse || !self.started || !self.watched.is_empty() {
            return next_tick;
        }
        let start = self.config.start_ms;
        let on_tick = |t: i64| tick_at_or_after(start, t).max(next_tick);
        let mut next = i64::MAX;
        if let Some(((at, _), _)) = self.scheduled.first_key_value() {
            next = next.min(on_tick(*at));
        }
        for job in self.jobs.values() {
            if let Phase::Transition { until } = job.phase {
                next = next.min(on_tick(until));
            }
        }
        if let Some((at, _)) = self.repairs.first() {
            next = next.min(on_tick(*at));
        }
        if let Some(entry) = self.trace.front() {
            next = next.min(on_tick(entry.at_ms(start)));
        }
        if let Some(at) = self.next_random_fault {
            next = next.min(on_tick(at));
        }
        if let Some(at) = self
            .jobs
            .values()
            .filter_map(|j| self.watchdog_due(j))
            .min()
        {
            next = next.min(on_tick(at));
        }
        next
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Current simulated time, ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        self.now
    }

    pub fn truth(&self) -> &Truth {
        &self.truth
    }

    /// Weighted FLOP/s the cluster achieves right now.
    pub fn current_rate(&self) -> f64 {
        self.jobs
            .values()
            .filter(|j| j.phase == Phase::Running)
            .map(|j| j.weight * j.model.throughput(self.gpus_of(j)) * self.config.throughput_factor)
            .sum()
    }

    /// Every submitted job has been placed by the control plane (its first
    /// resume is applied or scheduled). The service holds the clock until
    /// then, so a run does not depend on how long the services take to join
    /// their consumer groups.
    pub fn jobs_placed(&self) -> bool {
        self.jobs
            .iter()
            .all(|(id, job)| job.phase != Phase::Pending || self.has_pending_action(id))
    }

    /// Whether an accepted action that names job `id` waits for its effect.
    fn has_pending_action(&self, id: &str) -> bool {
        self.scheduled
            .values()
            .any(|s| s.job.as_deref() == Some(id))
    }

    /// Runs whole ticks up to `target_ms` and returns what was emitted.
    pub fn advance_to(&mut self, target_ms: i64) -> Vec<Emission> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            self.announce(&mut out);
        }
        while self.now + TICK_MS <= target_ms {
            let next = self.next_event_ms();
            if next > target_ms {
                self.quiet_until(target_ms - (target_ms - self.now) % TICK_MS);
                break;
            }
            self.quiet_until(next - TICK_MS);
            self.now = next;
            self.tick(&mut out);
        }
        out
    }

    fn tick(&mut self, out: &mut Vec<Emission>) {
        let now = self.now;
        self.apply_due(out);
        self.finish_transitions();
        self.repair_nodes(out);
        self.fire_watchdogs(out);
        self.inject_due(out);
        self.progress_jobs(out);
        if self.sparse {
            self.watched_signals(out);
        } else {
            self.node_signals(out);
        }
        self.truth.account(now, self.current_rate());
    }

    fn gpus_of(&self, job: &Job) -> u32 {
        job.nodes.len() as u32 * self.config.gpus_per_node
    }

    /// When the job (or node) `failure` names was stopped by the fault it
    /// reports: the injection of the job's open fault, if any. A baseline
    /// that learns of a failure only by the collective timeout learns of it
    /// that long after this.
    pub fn stalled_since(&self, failure: &FailureEvent) -> Option<i64> {
        let index = failure
            .job
            .as_deref()
            .and_then(|id| self.jobs.get(id))
            .and_then(|job| job.fault)
            .or_else(|| {
                failure
                    .node
                    .as_deref()
                    .and_then(|n| self.nodes.get(n))
                    .and_then(|node| node.fault)
            })?;
        Some(self.truth.faults[index].injected_ms)
    }

    /// Records the detector's report in the ground truth.
    pub fn observe_failure(&mut self, failure: &FailureEvent) {
        if failure.cluster == self.config.cluster {
            self.truth.observe(failure);
        }
    }

    /// Downtime per job so far, seconds.
    pub fn downtime_s(&self) -> BTreeMap<String, f64> {
        self.jobs
            .iter()
            .map(|(id, j)| (id.to_string(), j.downtime_ms as f64 / 1000.0))
            .collect()
    }
}

/// The first tick (of a run started at `start_ms`) at or after `t_ms`:
/// when a tick-by-tick run finds something due at `t_ms`.
pub fn tick_at_or_after(start_ms: i64, t_ms: i64) -> i64 {
    start_ms - (start_ms - t_ms).div_euclid(TICK_MS) * TICK_MS
}
