//! The simulated cluster as a state machine with no I/O: `advance_to` moves
//! simulated time in one-second ticks and returns what the cluster emitted
//! (with a sparse feed it jumps over the ticks where nothing happens, see
//! [`Sim::with_sparse_feed`]);
//! `act` answers an executor's action; `observe_failure` tells the ground
//! truth what the detector reported. Every choice comes from one seeded
//! generator, and actions take effect at a time derived from the command,
//! so the same seed and the same control plane give the same run.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use unicron_core::executor::{ActionRequest, ActionResponse, Outcome};
use unicron_core::{
    AgentEvent, AgentEventKind, ClusterEvent, ClusterEventKind, CommandAction, FailureEvent,
    FailureKind, LogRecord, MetricSample, Severity, TelemetryBatch,
};

use crate::config::{Arrivals, NcclTimeoutShows, SimConfig};
use crate::faults::{self, TraceEntry};
use crate::profiles::Model;
use crate::truth::{Fault, Truth};

const TICK_MS: i64 = 1_000;
/// Iterations a sparse feed reports for a job that hangs (each for every
/// rank): enough for the detector to trust its mean
/// (`hang_min_iterations`, 5 by default).
const SPARSE_ITERATIONS: u64 = 8;

/// A gauge's base value and the spread of its noise.
type Level = (f64, f64);

/// DCGM gauges per GPU: (name, (base, spread) when busy, (base, spread)
/// when idle). Temperatures stay below the detector's 90 °C thermal rule.
const GAUGES: [(&str, Level, Level); 4] = [
    ("DCGM_FI_DEV_GPU_UTIL", (93.0, 6.0), (0.0, 0.0)),
    ("DCGM_FI_DEV_GPU_TEMP", (62.0, 10.0), (35.0, 3.0)),
    ("DCGM_FI_DEV_POWER_USAGE", (350.0, 50.0), (60.0, 5.0)),
    ("DCGM_FI_DEV_FB_USED", (71_000.0, 1_000.0), (0.0, 0.0)),
];
const SIGTERM: i32 = 15;
const SIGABRT: i32 = 6;

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

/// An action accepted and waiting for its effect time.
#[derive(Debug, Clone)]
struct Scheduled {
    request: ActionRequest,
}

/// The whole simulated cluster.
#[derive(Debug)]
pub struct Sim {
    config: SimConfig,
    rng: ChaCha8Rng,
    now: i64,
    started: bool,
    nodes: BTreeMap<String, Node>,
    jobs: BTreeMap<String, Job>,
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
    /// Sparse feed: nodes with a fault whose heartbeats are reported.
    watched: BTreeSet<String>,
    /// Isolated nodes by repair time, so a tick need not scan every node.
    repairs: BTreeSet<(i64, String)>,
}

impl Sim {
    /// A cluster of `config.nodes` idle nodes and `config.jobs` submitted
    /// jobs; failures from `trace` if given, else from the taxonomy mix.
    pub fn new(config: SimConfig, trace: Option<Vec<TraceEntry>>) -> Sim {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let mut nodes = BTreeMap::new();
        for name in config.node_names() {
            let offset = rng.random_range(0..1_000);
            nodes.insert(
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
            );
        }
        let jobs = plan_jobs(&config);
        let mut fault_rng = ChaCha8Rng::seed_from_u64(config.seed ^ 0x5eed_fa11);
        let mean_ms = config.mean_interval_s() * 1000.0;
        let next_random_fault = (trace.is_none() && mean_ms > 0.0)
            .then(|| config.start_ms + interval(&mut fault_rng, config.arrivals, mean_ms));
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
            nodes,
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
        self.jobs.iter().all(|(id, job)| {
            job.phase != Phase::Pending
                || self
                    .scheduled
                    .values()
                    .any(|s| s.request.job.as_deref() == Some(id.as_str()))
        })
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

    /// Sparse feed: runs the ticks up to `until` at once, where nothing but
    /// training happens: jobs progress and checkpoint as tick by tick.
    fn quiet_until(&mut self, until: i64) {
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

    /// A node's cluster event, now.
    fn node_event(&self, kind: ClusterEventKind, node: &str) -> Emission {
        let mut event = ClusterEvent::new(self.config.cluster.clone(), self.now, kind);
        event.node = Some(node.to_string());
        event.gpus = Some(self.config.gpus_per_node as i32);
        Emission::Cluster(event)
    }

    /// Node joins and job submissions at the start.
    fn announce(&mut self, out: &mut Vec<Emission>) {
        for name in self.nodes.keys() {
            out.push(self.node_event(ClusterEventKind::NodeJoined, name));
        }
        for (id, job) in &self.jobs {
            out.push(Emission::Cluster(ClusterEvent {
                cluster: self.config.cluster.clone(),
                time_ms: self.now,
                kind: ClusterEventKind::JobSubmitted,
                node: None,
                gpus: None,
                job_id: Some(id.clone()),
                job: Some(job.model.spec(
                    job.weight,
                    job.max_gpus,
                    self.config.gpus_per_node,
                    self.config.checkpoint_interval_s,
                )),
                address: None,
                launch: None,
                reason: None,
                snapshot_address: None,
                snapshots: Vec::new(),
                restored: None,
            }));
        }
    }

    fn tick(&mut self, out: &mut Vec<Emission>) {
        let now = self.now;
        let due: Vec<(i64, String)> = self
            .scheduled
            .range(..=(now, String::from("\u{10ffff}")))
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let scheduled = self.scheduled.remove(&key).expect("listed");
            self.apply(&scheduled.request, out);
        }
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

    fn finish_transitions(&mut self) {
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

    /// Where `request` restores its job from: the replica it names, unless
    /// this cluster's restarts (or reconfigurations) always roll back.
    fn restore_from<'a>(&self, request: &'a ActionRequest) -> Option<&'a str> {
        let rolls_back = match request.action {
            CommandAction::Restart => self.config.restart_rolls_back,
            _ => self.config.reconfigure_rolls_back,
        };
        if rolls_back {
            None
        } else {
            request.restore_from.as_deref()
        }
    }

    /// Resolves fault `index` of job `job_id` by `action`: its downtime
    /// runs until the job runs again.
    fn resolve(&mut self, index: usize, job_id: Option<&str>, action: CommandAction) {
        self.truth.resolve(index, self.now, action);
        if let Some(job) = job_id.and_then(|id| self.jobs.get_mut(id))
            && !job.recovering.contains(&index)
        {
            job.recovering.push(index);
        }
    }

    fn repair_nodes(&mut self, out: &mut Vec<Emission>) {
        let mut due = Vec::new();
        while let Some((at, _)) = self.repairs.first()
            && *at <= self.now
        {
            due.push(self.repairs.pop_first().expect("peeked").1);
        }
        // In node order, as a scan of every node would find them.
        due.sort();
        for name in due {
            let node = self.nodes.get_mut(&name).expect("isolated nodes exist");
            node.state = NodeState::Up;
            node.fault = None;
            node.next_heartbeat = self.now;
            // Repaired (rebooted, the GPU replaced): DCGM's volatile error
            // counters start again from zero, not from the fault's count.
            node.ecc_dbe.iter_mut().for_each(|c| *c = 0.0);
            out.push(self.node_event(ClusterEventKind::NodeRepaired, &name));
        }
    }

    fn inject_due(&mut self, out: &mut Vec<Emission>) {
        let start = self.config.start_ms;
        while let Some(entry) = self.trace.front() {
            if entry.at_ms(start) > self.now {
                break;
            }
            let entry = self.trace.pop_front().expect("peeked");
            self.inject(Some(&entry.node), entry.kind, out);
            self.truth.offered.push(entry);
        }
        let (arrivals, mean_ms) = (self.config.arrivals, self.config.mean_interval_s() * 1000.0);
        while let Some(at) = self.next_random_fault
            && at <= self.now
        {
            let from = match arrivals {
                Arrivals::Poisson => at,
                // A demo failure waits for a running job to hit.
                Arrivals::Demo if self.eligible_nodes().is_empty() => break,
                Arrivals::Demo => self.now,
            };
            let kind = self.next_kind();
            self.inject(None, kind, out);
            self.next_random_fault =
                Some(from + interval(&mut self.fault_rng, arrivals, mean_ms).max(TICK_MS));
        }
    }

    /// When NCCL's watchdog ends `job`'s hang, if it hangs and the watchdog
    /// has not fired yet. A hang shows no other sign: without the watchdog
    /// a hang the detector's statistics miss (a job fewer than
    /// `hang_min_iterations` iterations into a start) would stall the job
    /// for the rest of the run, which no real cluster does.
    fn watchdog_due(&self, job: &Job) -> Option<i64> {
        let index = job.fault?;
        let fault = &self.truth.faults[index];
        (self.stalls(fault.kind) && job.watchdog_fired != Some(index))
            .then_some(fault.injected_ms + self.config.collective_timeout_ms())
    }

    /// Whether a failure of `kind` stalls its job silently until the
    /// collective timeout: a hang, and an NCCL timeout modelled as the
    /// stall it is.
    fn stalls(&self, kind: FailureKind) -> bool {
        kind == FailureKind::TaskHang
            || (kind == FailureKind::NcclTimeout
                && self.config.nccl_timeout == NcclTimeoutShows::Stall)
    }

    /// Stalls nothing has acted on by the collective timeout: the hung rank
    /// logs the watchdog's timeout and aborts (PyTorch's default on a
    /// timed-out collective), which the control plane sees as a crashed
    /// process.
    fn fire_watchdogs(&mut self, out: &mut Vec<Emission>) {
        let due: Vec<(String, usize)> = self
            .jobs
            .iter()
            .filter(|(id, job)| {
                self.watchdog_due(job).is_some_and(|at| at <= self.now)
                    && !self
                        .scheduled
                        .values()
                        .any(|s| s.request.job.as_deref() == Some(id.as_str()))
            })
            .map(|(id, job)| (id.clone(), job.fault.expect("a hang is a fault")))
            .collect();
        let timeout_ms = self.config.collective_timeout_ms();
        for (id, index) in due {
            let node = self.truth.faults[index].node.clone();
            let job = self.jobs.get_mut(&id).expect("listed");
            job.watchdog_fired = Some(index);
            let rank = job.nodes.iter().position(|n| *n == node).unwrap_or(0) as u32;
            out.push(Emission::Log(LogRecord {
                cluster: self.config.cluster.clone(),
                node: node.clone(),
                time_ms: self.now,
                source: "training".into(),
                job: Some(id.clone()),
                rank: Some(rank as i32),
                gpu: None,
                line: format!(
                    "[E ProcessGroupNCCL.cpp:475] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=52311, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={timeout_ms}) ran for {} milliseconds before timing out.",
                    timeout_ms + 86
                ),
                attributes: BTreeMap::new(),
            }));
            out.push(self.exit(&node, &id, rank, None, Some(SIGABRT)));
        }
    }

    /// The kind of the next random failure: from the mix, except that demo
    /// arrivals first show each severity once.
    fn next_kind(&mut self) -> FailureKind {
        if self.demo_severities.is_empty() {
            return faults::pick(self.fault_rng.random());
        }
        let i = self.fault_rng.random_range(0..self.demo_severities.len());
        let severity = self.demo_severities.remove(i);
        faults::pick_with(severity, self.fault_rng.random())
    }

    /// Healthy nodes of running jobs: where a failure can strike.
    fn eligible_nodes(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.state == NodeState::Up && n.fault.is_none())
            .filter(|(_, n)| {
                n.job
                    .as_ref()
                    .and_then(|j| self.jobs.get(j))
                    .is_some_and(|j| j.phase == Phase::Running && j.fault.is_none())
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Injects `kind` on `node`, or on a random node of a running job.
    fn inject(&mut self, node: Option<&str>, kind: FailureKind, out: &mut Vec<Emission>) {
        // Drawn whether or not they are used: one fault, two draws.
        let (target, gpu): (f64, u32) = (
            self.fault_rng.random(),
            self.fault_rng.random_range(0..self.config.gpus_per_node),
        );
        let eligible = self.eligible_nodes();
        let name = match node {
            Some(name) if eligible.iter().any(|n| n == name) => name.to_string(),
            Some(_) => {
                self.truth.skipped += 1;
                return;
            }
            None if eligible.is_empty() => {
                self.truth.skipped += 1;
                return;
            }
            None => eligible[((target * eligible.len() as f64) as usize).min(eligible.len() - 1)]
                .clone(),
        };
        let job_id = self.nodes[&name]
            .job
            .clone()
            .expect("eligible nodes run a job");
        let rank = self.jobs[&job_id]
            .nodes
            .iter()
            .position(|n| *n == name)
            .unwrap_or(0) as u32;
        if self.sparse {
            self.sparse_history(&name, &job_id, kind, out);
        }
        let index = self.truth.faults.len();
        self.truth.faults.push(Fault::new(
            index,
            kind,
            &name,
            Some(job_id.clone()),
            gpu,
            self.now,
        ));
        let mut shown = faults::manifest(kind, &name, gpu, rank);
        if self.stalls(kind) {
            // Its line, if any, is the watchdog's at the collective timeout.
            shown.lines.clear();
        }
        let node = self.nodes.get_mut(&name).expect("chosen from the map");
        node.fault = Some(index);
        if let Some(counter) = shown.counter
            && counter == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
        {
            node.ecc_dbe[gpu as usize] += 1.0;
        }
        if shown.node_down {
            node.state = NodeState::Down;
        }
        let job = self.jobs.get_mut(&job_id).expect("node's job exists");
        job.phase = Phase::Stalled;
        job.fault = Some(index);
        for line in shown.lines {
            out.push(Emission::Log(LogRecord {
                cluster: self.config.cluster.clone(),
                node: name.clone(),
                time_ms: self.now,
                source: if line.starts_with("kernel:") {
                    "kmsg".into()
                } else {
                    "training".into()
                },
                job: Some(job_id.clone()),
                rank: Some(rank as i32),
                gpu: Some(gpu as i32),
                line,
                attributes: BTreeMap::new(),
            }));
        }
        if let Some(code) = shown.exit_code {
            out.push(self.exit(&name, &job_id, rank, Some(code), None));
        }
    }

    /// Sparse feed: what the detector would know of `node` and its job
    /// just before a failure: the node's heartbeat of the last tick (it is
    /// watched from now on) and, for a hang, the job's recent iterations.
    fn sparse_history(
        &mut self,
        node: &str,
        job_id: &str,
        kind: FailureKind,
        out: &mut Vec<Emission>,
    ) {
        if self.watched.insert(node.to_string()) {
            let mut beat = AgentEvent::new(
                &self.config.cluster,
                node,
                self.now - TICK_MS,
                AgentEventKind::Heartbeat,
            );
            beat.job = Some(job_id.to_string());
            out.push(Emission::Agent(beat));
        }
        let job = &self.jobs[job_id];
        if !self.stalls(kind) {
            return;
        }
        let Some(at) = job.last_completion_ms else {
            return;
        };
        let gpus = job.nodes.len() as u32 * self.config.gpus_per_node;
        let iteration_ms = job.model.iteration_s(gpus) / self.config.throughput_factor * 1000.0;
        let first = job
            .iteration
            .saturating_sub(job.iterations_seen.min(SPARSE_ITERATIONS));
        // Every rank's, as the ticked feed reports them: the detector
        // counts rank reports, so a job of many nodes is trusted after its
        // first iteration, a one-node job after `hang_min_iterations`.
        for iteration in first + 1..=job.iteration {
            for (rank, node) in job.nodes.iter().enumerate() {
                let mut done = AgentEvent::new(
                    &self.config.cluster,
                    node,
                    at,
                    AgentEventKind::IterationDone,
                );
                done.job = Some(job_id.to_string());
                done.rank = Some(rank as i32);
                done.iteration = Some(iteration as i64);
                done.iteration_time_ms = Some(iteration_ms);
                out.push(Emission::Agent(done));
            }
        }
    }

    /// Sparse feed: heartbeats of the watched nodes; a node whose fault is
    /// cleared leaves the watch (the detector stops its deadline, as for a
    /// departing agent).
    fn watched_signals(&mut self, out: &mut Vec<Emission>) {
        let watched: Vec<String> = self.watched.iter().cloned().collect();
        for name in watched {
            let node = &self.nodes[&name];
            let kind = if node.fault.is_none() {
                self.watched.remove(&name);
                AgentEventKind::Leaving
            } else if matches!(
                node.state,
                NodeState::Down | NodeState::Isolated { dark: true, .. }
            ) {
                continue;
            } else {
                AgentEventKind::Heartbeat
            };
            let mut event = AgentEvent::new(&self.config.cluster, &name, self.now, kind);
            event.job = node.job.clone();
            out.push(Emission::Agent(event));
        }
    }

    fn exit(
        &self,
        node: &str,
        job: &str,
        rank: u32,
        code: Option<i32>,
        signal: Option<i32>,
    ) -> Emission {
        Emission::Agent(AgentEvent {
            cluster: self.config.cluster.clone(),
            node: node.to_string(),
            time_ms: self.now,
            kind: AgentEventKind::ProcessExit,
            job: Some(job.to_string()),
            rank: Some(rank as i32),
            exit_code: code,
            signal,
            iteration: None,
            iteration_time_ms: None,
            idle_tick: false,
            worker: None,
        })
    }

    fn gpus_of(&self, job: &Job) -> u32 {
        job.nodes.len() as u32 * self.config.gpus_per_node
    }

    fn progress_jobs(&mut self, out: &mut Vec<Emission>) {
        let gpn = self.config.gpus_per_node;
        let checkpoint_ms = self.config.checkpoint_interval_s * 1000;
        let factor = self.config.throughput_factor;
        for (id, job) in &mut self.jobs {
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
                        job: Some(id.clone()),
                        rank: Some(rank as i32),
                        exit_code: None,
                        signal: None,
                        iteration: Some(job.iteration as i64),
                        iteration_time_ms: Some(iteration_s * 1000.0 * jitter),
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
                        job: Some(id.clone()),
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

    /// Heartbeats, DCGM telemetry and benign log noise of every node.
    fn node_signals(&mut self, out: &mut Vec<Emission>) {
        let now = self.now;
        let cluster = self.config.cluster.clone();
        let hb_ms = (self.config.heartbeat_interval_s * 1000.0) as i64;
        let telemetry_ms = (self.config.telemetry_interval_s * 1000.0) as i64;
        let noise_ms = self.config.noise_interval_s * 1000.0;
        for (name, node) in &mut self.nodes {
            if matches!(
                node.state,
                NodeState::Down | NodeState::Isolated { dark: true, .. }
            ) {
                continue;
            }
            let running = node
                .job
                .as_ref()
                .and_then(|j| self.jobs.get(j))
                .filter(|j| j.phase == Phase::Running);
            if node.next_heartbeat <= now {
                node.next_heartbeat += hb_ms.max(TICK_MS);
                out.push(Emission::Agent(AgentEvent {
                    cluster: cluster.clone(),
                    node: name.clone(),
                    time_ms: now,
                    kind: AgentEventKind::Heartbeat,
                    job: node.job.clone(),
                    rank: None,
                    exit_code: None,
                    signal: None,
                    iteration: None,
                    iteration_time_ms: None,
                    idle_tick: false,
                    worker: None,
                }));
            }
            if matches!(node.state, NodeState::Isolated { .. }) {
                continue;
            }
            if node.next_telemetry <= now {
                node.next_telemetry += telemetry_ms.max(TICK_MS);
                let busy = running.is_some();
                let mut samples = Vec::with_capacity(node.ecc_dbe.len() * 5 + 1);
                for (gpu, dbe) in node.ecc_dbe.iter().enumerate() {
                    let noise = self.rng.random::<f64>();
                    let gauge = |metric: &str, value: f64| MetricSample {
                        name: metric.into(),
                        value,
                        time_ms: now,
                        gpu: Some(gpu as i32),
                        job: node.job.clone(),
                        rank: None,
                        labels: BTreeMap::from([("Hostname".to_string(), name.clone())]),
                    };
                    for (metric, (busy_base, busy_span), (idle_base, idle_span)) in GAUGES {
                        let (base, span) = if busy {
                            (busy_base, busy_span)
                        } else {
                            (idle_base, idle_span)
                        };
                        samples.push(gauge(metric, base + span * noise));
                    }
                    samples.push(gauge("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", *dbe));
                }
                if let Some(job) = running {
                    let rank = job.nodes.iter().position(|n| n == name).unwrap_or(0);
                    samples.push(MetricSample {
                        name: "training_iteration_time_ms".into(),
                        value: job
                            .model
                            .iteration_s(job.nodes.len() as u32 * node.ecc_dbe.len() as u32)
                            * 1000.0,
                        time_ms: now,
                        gpu: None,
                        job: node.job.clone(),
                        rank: Some(rank as i32),
                        labels: BTreeMap::new(),
                    });
                }
                out.push(Emission::Telemetry(TelemetryBatch {
                    cluster: cluster.clone(),
                    node: name.clone(),
                    source: "dcgm-exporter".into(),
                    samples,
                }));
            }
            if node.next_noise <= now {
                node.next_noise += faults::exponential_ms(&mut self.rng, noise_ms).max(TICK_MS);
                let line = faults::NOISE[self.rng.random_range(0..faults::NOISE.len())];
                out.push(Emission::Log(LogRecord {
                    cluster: cluster.clone(),
                    node: name.clone(),
                    time_ms: now,
                    source: "syslog".into(),
                    job: node.job.clone(),
                    rank: None,
                    gpu: None,
                    line: line.to_string(),
                    attributes: BTreeMap::new(),
                }));
            }
        }
    }

    /// Answers an action now and schedules its effect; a repeated command
    /// id gets the first answer again and acts once (the HTTP contract's
    /// idempotency).
    pub fn act(&mut self, request: &ActionRequest) -> ActionResponse {
        if let Some(answer) = self.answered.get(&request.command_id) {
            self.truth.duplicate_requests += 1;
            return answer.clone();
        }
        let dispatch = (self.config.dispatch_s * 1000.0) as i64;
        let wanted = request.time_ms.saturating_add(dispatch);
        // The tick at `now` has run: an effect due then is already late.
        if wanted <= self.now {
            self.truth.late_actions += 1;
        }
        let apply_at = wanted.max(self.now + TICK_MS);
        let answer = match self.judge(request) {
            Ok(duration_ms) => {
                self.truth.count_action(request.action);
                self.scheduled.insert(
                    (apply_at, request.command_id.clone()),
                    Scheduled {
                        request: request.clone(),
                    },
                );
                ActionResponse {
                    status: Outcome::Succeeded,
                    reason: None,
                    duration_ms: Some(duration_ms),
                    completed_ms: Some(apply_at + duration_ms),
                }
            }
            Err(reason) => {
                self.truth.failed_actions += 1;
                ActionResponse {
                    status: Outcome::Failed,
                    reason: Some(reason),
                    duration_ms: Some(0),
                    completed_ms: Some(apply_at),
                }
            }
        };
        self.answered
            .insert(request.command_id.clone(), answer.clone());
        answer
    }

    /// Whether the action can work, and how long it takes (ms).
    fn judge(&self, request: &ActionRequest) -> Result<i64, String> {
        if request.cluster != self.config.cluster {
            return Err(format!("unknown cluster `{}`", request.cluster));
        }
        let t = &self.config.transitions;
        let ms = |s: f64| (s * 1000.0) as i64;
        let job = || {
            let id = request.job.as_deref().ok_or("the action names no job")?;
            self.jobs
                .get(id)
                .ok_or_else(|| format!("no such job `{id}`"))
        };
        let fault_of = |job: &Job| job.fault.map(|i| &self.truth.faults[i]);
        match request.action {
            CommandAction::Reattempt => {
                let job = job()?;
                match fault_of(job) {
                    Some(f) if faults::needs(f.kind) != Severity::Sev3 => Err(format!(
                        "fault persists: {} on {} needs {}",
                        f.kind,
                        f.node,
                        faults::needs(f.kind)
                    )),
                    _ => Ok(ms(t.reattempt_s)),
                }
            }
            CommandAction::Restart => {
                let job = job()?;
                match fault_of(job) {
                    Some(f)
                        if faults::needs(f.kind) == Severity::Sev1
                            && job.nodes.contains(&f.node) =>
                    {
                        Err(format!(
                            "{} failed again on restart: {} needs the node taken out",
                            f.node, f.kind
                        ))
                    }
                    _ => Ok(ms(restart_s(t, self.restore_from(request)))),
                }
            }
            CommandAction::IsolateNode => {
                let node = request.nodes.first().ok_or("isolate_node names no node")?;
                if !self.nodes.contains_key(node) {
                    return Err(format!("no such node `{node}`"));
                }
                Ok(0)
            }
            CommandAction::Reconfigure | CommandAction::Resume => {
                let job = job()?;
                for node in &request.nodes {
                    match self.nodes.get(node).map(|n| n.state) {
                        None => return Err(format!("no such node `{node}`")),
                        Some(NodeState::Down) => return Err(format!("node `{node}` is down")),
                        Some(_) => {}
                    }
                }
                let base = if job.phase == Phase::Pending {
                    t.resume_s
                } else if request.action == CommandAction::Resume {
                    t.resume_s.max(restart_s(t, self.restore_from(request)))
                } else {
                    t.reconfigure_s
                };
                Ok(ms(base))
            }
            CommandAction::Pause => job().map(|_| 0),
            // The simulated scheduler has no drain to lift: the repair
            // already put the node back.
            CommandAction::ReturnNode => {
                let node = request.nodes.first().ok_or("return_node names no node")?;
                if !self.nodes.contains_key(node) {
                    return Err(format!("no such node `{node}`"));
                }
                Ok(0)
            }
            CommandAction::Unknown => Err("unknown action".into()),
        }
    }

    /// The effect of an accepted action, at its effect time.
    fn apply(&mut self, request: &ActionRequest, out: &mut Vec<Emission>) {
        let t = self.config.transitions.clone();
        let ms = |s: f64| (s * 1000.0) as i64;
        let now = self.now;
        match request.action {
            CommandAction::IsolateNode => {
                let name = &request.nodes[0];
                let repair_at = now + ms(self.config.repair_s);
                let node = self.nodes.get_mut(name).expect("judged");
                if !matches!(node.state, NodeState::Isolated { .. }) {
                    node.state = NodeState::Isolated {
                        repair_at,
                        dark: node.state == NodeState::Down,
                    };
                    self.repairs.insert((repair_at, name.clone()));
                }
                let (fault, job_of) = (node.fault.take(), node.job.clone());
                if let Some(index) = fault {
                    self.resolve(index, job_of.as_deref(), request.action);
                }
                let node = self.nodes.get_mut(name).expect("judged");
                if let Some(job_id) = node.job.take()
                    && let Some(job) = self.jobs.get_mut(&job_id)
                {
                    job.nodes.retain(|n| n != name);
                    if job
                        .fault
                        .is_some_and(|i| self.truth.faults[i].node == *name)
                    {
                        job.fault = None;
                    }
                    if job.phase == Phase::Running {
                        job.phase = Phase::Stalled;
                    }
                }
            }
            CommandAction::Reattempt => {
                let id = request.job.as_deref().unwrap_or_default();
                let Some(job) = self.jobs.get_mut(id) else {
                    return;
                };
                if let Some(index) = job.fault.take() {
                    self.resolve(index, Some(id), request.action);
                    self.clear_node_fault(index);
                }
                let job = self.jobs.get_mut(id).expect("looked up");
                if job.phase != Phase::Pending && job.phase != Phase::Paused {
                    job.phase = Phase::Transition {
                        until: now + ms(t.reattempt_s),
                    };
                }
            }
            CommandAction::Restart => {
                let id = request.job.as_deref().unwrap_or_default().to_string();
                if !self.jobs.contains_key(&id) {
                    return;
                }
                self.stop_processes(&id, out);
                let job = self.jobs.get_mut(&id).expect("checked");
                if let Some(index) = job.fault.take() {
                    self.resolve(index, Some(&id), request.action);
                    self.clear_node_fault(index);
                }
                let restore_from = self.restore_from(request).map(str::to_string);
                let job = self.jobs.get_mut(&id).expect("checked");
                restore(job, restore_from.as_deref());
                if !job.nodes.is_empty() {
                    job.phase = Phase::Transition {
                        until: now + ms(restart_s(&t, restore_from.as_deref())),
                    };
                }
            }
            CommandAction::Reconfigure | CommandAction::Resume => {
                let id = request.job.as_deref().unwrap_or_default().to_string();
                if !self.jobs.contains_key(&id) {
                    return;
                }
                let first_start = self.jobs[&id].phase == Phase::Pending;
                self.stop_processes(&id, out);
                let usable: Vec<String> = request
                    .nodes
                    .iter()
                    .filter(|n| self.nodes.get(*n).is_some_and(|n| n.state == NodeState::Up))
                    .cloned()
                    .collect();
                for node in self.nodes.values_mut() {
                    if node.job.as_deref() == Some(id.as_str()) {
                        node.job = None;
                    }
                }
                for name in &usable {
                    let node = self.nodes.get_mut(name).expect("filtered");
                    if let Some(other) = node.job.replace(id.clone())
                        && let Some(job) = self.jobs.get_mut(&other)
                    {
                        job.nodes.retain(|n| n != name);
                    }
                }
                let job = self.jobs.get_mut(&id).expect("checked");
                if let Some(index) = job.fault.take() {
                    self.resolve(index, Some(&id), request.action);
                    self.clear_node_fault(index);
                }
                let restore_from = self.restore_from(request).map(str::to_string);
                let job = self.jobs.get_mut(&id).expect("checked");
                if !first_start {
                    restore(job, restore_from.as_deref());
                }
                job.nodes = usable;
                let base = if first_start {
                    t.resume_s
                } else if request.action == CommandAction::Resume {
                    t.resume_s.max(restart_s(&t, restore_from.as_deref()))
                } else {
                    t.reconfigure_s
                };
                job.phase = if job.nodes.is_empty() {
                    Phase::Paused
                } else {
                    Phase::Transition {
                        until: now + ms(base),
                    }
                };
            }
            CommandAction::Pause => {
                let id = request.job.as_deref().unwrap_or_default().to_string();
                if !self.jobs.contains_key(&id) {
                    return;
                }
                self.stop_processes(&id, out);
                for node in self.nodes.values_mut() {
                    if node.job.as_deref() == Some(id.as_str()) {
                        node.job = None;
                    }
                }
                let job = self.jobs.get_mut(&id).expect("checked");
                job.nodes.clear();
                job.phase = Phase::Paused;
            }
            CommandAction::ReturnNode | CommandAction::Unknown => {}
        }
    }

    /// A fault fixed by an action on its job no longer marks its node
    /// (unless the node itself is broken: SEV1 stays until isolation).
    fn clear_node_fault(&mut self, index: usize) {
        let fault = &self.truth.faults[index];
        if let Some(node) = self.nodes.get_mut(&fault.node)
            && node.fault == Some(index)
        {
            node.fault = None;
        }
    }

    /// SIGTERM to every rank of a job that has processes: a requested stop,
    /// which the detector must not take for a failure.
    fn stop_processes(&mut self, id: &str, out: &mut Vec<Emission>) {
        let job = &self.jobs[id];
        if matches!(job.phase, Phase::Pending | Phase::Paused) {
            return;
        }
        let exits: Vec<Emission> = job
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                self.nodes
                    .get(*n)
                    .is_some_and(|n| n.state != NodeState::Down)
            })
            .map(|(rank, node)| self.exit(node, id, rank as u32, None, Some(SIGTERM)))
            .collect();
        if !exits.is_empty()
            && let Some(job) = self.jobs.get_mut(id)
        {
            job.iterations_seen = 0;
        }
        out.extend(exits);
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
            .map(|(id, j)| (id.clone(), j.downtime_ms as f64 / 1000.0))
            .collect()
    }
}

/// Rolls a job back to its checkpoint unless it restores from a replica.
fn restore(job: &mut Job, restore_from: Option<&str>) {
    let from_replica = restore_from.is_some_and(|r| r.starts_with("replica:"));
    if !from_replica {
        job.iteration = job.checkpoint_iteration;
    }
    job.partial = 0.0;
}

fn restart_s(t: &crate::config::Transitions, restore_from: Option<&str>) -> f64 {
    if restore_from.is_some_and(|r| r.starts_with("replica:")) {
        t.restart_replica_s
    } else {
        t.restart_checkpoint_s
    }
}

/// The first tick (of a run started at `start_ms`) at or after `t_ms`:
/// when a tick-by-tick run finds something due at `t_ms`.
pub fn tick_at_or_after(start_ms: i64, t_ms: i64) -> i64 {
    start_ms - (start_ms - t_ms).div_euclid(TICK_MS) * TICK_MS
}

/// The time to the next random failure, ms.
fn interval(rng: &mut ChaCha8Rng, arrivals: Arrivals, mean_ms: f64) -> i64 {
    match arrivals {
        Arrivals::Poisson => faults::exponential_ms(rng, mean_ms),
        Arrivals::Demo => (rng.random_range(0.5..1.5) * mean_ms) as i64,
    }
}

/// Jobs sized to fill the cluster: each gets the nodes of one replica,
/// then the rest go round-robin.
fn plan_jobs(config: &SimConfig) -> BTreeMap<String, Job> {
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
        crate::config::Workload::Uniform => 1,
        crate::config::Workload::Heterogeneous => m.replica_gpus.div_ceil(gpn),
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
    use crate::config::Workload;

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
