//! The simulator's settings (`[sim]` in the configuration file).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Transition times the simulated cluster takes per action, seconds of
/// simulated time. The Unicron paper gives the default restart's parts (9 min
/// re-queue, 14 min set-up, progress since the checkpoint recomputed); the
/// rest are ASSUMPTIONS, documented in `docs/simulator.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Transitions {
    /// Retry of the failed step in place.
    pub reattempt_s: f64,
    /// Restart of the processes, state from a data-parallel peer.
    pub restart_replica_s: f64,
    /// Restart from the last checkpoint (plus the progress lost since it).
    pub restart_checkpoint_s: f64,
    /// New node set for a running job.
    pub reconfigure_s: f64,
    /// First start or resumption of a job.
    pub resume_s: f64,
}

impl Default for Transitions {
    fn default() -> Self {
        Transitions {
            reattempt_s: 30.0,
            restart_replica_s: 5.0 * 60.0,
            restart_checkpoint_s: 14.0 * 60.0,
            reconfigure_s: 6.0 * 60.0,
            resume_s: 2.0 * 60.0,
        }
    }
}

/// ASSUMPTION: one failure every 256 GPU-hours, i.e. one every two hours on
/// the paper's 128 GPUs. Neither the paper nor its summaries give a rate;
/// `unicron evaluate` sweeps multiples of it. This is "the paper setting's
/// rate" everywhere in unicron.
pub const GPU_HOURS_PER_FAILURE: f64 = 256.0;

/// `unicron up`'s mean interval between failures, simulated seconds,
/// whatever the cluster's size: a one-minute demonstration at 30x speed
/// shows several recoveries. On the default 128 GPUs that is 30x the paper
/// setting's rate; WAF at such a rate is not comparable with the paper's
/// figures.
pub const DEMO_MTBF_S: f64 = 240.0;

/// Mean seconds between failures of a cluster of `gpus` GPUs at the paper
/// setting's rate.
pub fn paper_mtbf_s(gpus: u32) -> f64 {
    GPU_HOURS_PER_FAILURE * 3_600.0 / f64::from(gpus.max(1))
}

/// How the simulator draws failures when no trace is given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Exponential intervals of mean `mtbf_s`, kinds from the taxonomy
    /// mix; a failure that finds no running job is skipped.
    #[default]
    Poisson,
    /// For demonstrations: intervals uniform in 0.5-1.5 x `mtbf_s`; the
    /// first three failures are one of each severity (SEV1, SEV2, SEV3, in
    /// seeded order, the kind drawn from the mix within it), later ones
    /// follow the mix; a failure waits for a running job rather than being
    /// skipped. Still seeded and random, but a short run always shows every
    /// kind of recovery.
    Demo,
}

/// How an injected NCCL timeout shows itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NcclTimeoutShows {
    /// The watchdog's line at the failure's time, with no stall before it:
    /// a demonstration of the SEV3 path (`unicron up`'s default).
    #[default]
    Line,
    /// What a real watchdog does: the collective stalls at the failure's
    /// time and the line comes `collective_timeout_s` later; whoever notices
    /// the stall first acts first (the evaluation).
    Stall,
}

/// Which jobs the cluster runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// GPT-3 1.3B, 2.7B, 6.7B and 13B in turn, weights 1, 2, 1.5 in turn:
    /// similar per-GPU rates and scaling.
    #[default]
    Uniform,
    /// [`crate::profiles::HETEROGENEOUS`] in turn: replicas of 8 to 64 GPUs,
    /// scaling from 80% to 99% per doubling, weights 0.5 to 8.
    Heterogeneous,
}

impl Workload {
    /// The `i`th job's model and weight.
    pub fn job(self, i: usize) -> (crate::profiles::Model, f64) {
        use crate::profiles::{HETEROGENEOUS, MODELS, WEIGHTS};
        match self {
            Workload::Uniform => (MODELS[i % MODELS.len()], WEIGHTS[i % WEIGHTS.len()]),
            Workload::Heterogeneous => HETEROGENEOUS[i % HETEROGENEOUS.len()],
        }
    }
}

/// How a day of a real trace is read for a demonstration: the faults a job
/// sees. The others (a site's stress tests, sensors) take out servers no
/// job uses; the trace's busiest day by all faults is one of stress tests.
pub const DEMONSTRATED: crate::real_trace::Reading = crate::real_trace::Reading::ChecksFindTheirOwn;

/// Everything that shapes a simulated cluster and its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Cluster id on every record.
    pub cluster: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub jobs: u32,
    /// Which jobs: similar ones, or heterogeneous ones.
    pub workload: Workload,
    /// Seed of every random choice: same seed, same run.
    pub seed: u64,
    /// Simulated seconds per real second.
    pub speed: f64,
    /// Mean simulated seconds between injected failures, when no trace is
    /// given; 0 injects none. Unset: the paper setting's rate for the
    /// cluster's size ([`paper_mtbf_s`]).
    pub mtbf_s: Option<f64>,
    /// How failure times and kinds are drawn when no trace is given.
    pub arrivals: Arrivals,
    /// Failure trace that replaces the random mix: a CSV (`time_s,node,kind`,
    /// optionally `repair_s,category`), or a real trace in the InfiniteHBD
    /// JSON format (`tools/traces/infinitehbd/fault_trace.json`), of which
    /// one day is replayed with every server folded onto these nodes.
    pub trace: Option<PathBuf>,
    /// The day of a real trace to replay, counted from 0; unset: its
    /// busiest day.
    pub trace_day: Option<u32>,
    /// Simulated seconds an isolated node takes to come back repaired.
    pub repair_s: f64,
    /// The jobs' collective timeout (NCCL's watchdog): a hang nothing acted
    /// on aborts its rank this long after it began. PyTorch's and
    /// Megatron-LM's default is 10 min; the Unicron paper's figure is 30.
    pub collective_timeout_s: f64,
    /// How an injected NCCL timeout shows itself.
    pub nccl_timeout: NcclTimeoutShows,
    /// Every restart rolls back to the checkpoint and takes
    /// `restart_checkpoint_s`, whatever replica the command names: a system
    /// with no replicas (the evaluation's baselines).
    pub restart_rolls_back: bool,
    /// Every reconfiguration and resumption rolls back to the checkpoint
    /// (Varuna's restart on every change of GPUs).
    pub reconfigure_rolls_back: bool,
    pub heartbeat_interval_s: f64,
    pub telemetry_interval_s: f64,
    /// A job logs a progress line every this many iterations.
    pub log_every_iterations: u64,
    /// Mean simulated seconds between benign noise lines per node.
    pub noise_interval_s: f64,
    pub checkpoint_interval_s: i64,
    /// An action takes effect this long (simulated) after the command's
    /// event time: the control plane's reaction time as the cluster sees it.
    /// Fixing it, rather than using arrival time, makes runs reproducible
    /// as long as the services answer within it: `dispatch_s / speed` real
    /// seconds (a third of a second by default). Later answers are counted
    /// as `late_actions`.
    pub dispatch_s: f64,
    pub transitions: Transitions,
    /// Fraction of its profiled throughput a job achieves while running: 1
    /// for plain training, less for a recovery scheme that computes
    /// redundantly (the evaluation's Bamboo-like policy).
    pub throughput_factor: f64,
    /// Where the action endpoint listens (`POST /actions`).
    pub listen: SocketAddr,
    /// Event time of the simulation's start, ms since the epoch.
    pub start_ms: i64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            cluster: "sim".into(),
            nodes: 16,
            gpus_per_node: 8,
            jobs: 3,
            workload: Workload::Uniform,
            seed: 1,
            speed: 30.0,
            mtbf_s: None,
            arrivals: Arrivals::Poisson,
            trace: None,
            trace_day: None,
            repair_s: 2.0 * 3600.0,
            collective_timeout_s: 30.0 * 60.0,
            nccl_timeout: NcclTimeoutShows::Line,
            restart_rolls_back: false,
            reconfigure_rolls_back: false,
            heartbeat_interval_s: 1.0,
            telemetry_interval_s: 15.0,
            log_every_iterations: 10,
            noise_interval_s: 120.0,
            checkpoint_interval_s: 30 * 60,
            dispatch_s: 10.0,
            transitions: Transitions::default(),
            throughput_factor: 1.0,
            listen: SocketAddr::from(([127, 0, 0, 1], 8090)),
            // 2026-01-01T00:00:00Z
            start_ms: 1_767_225_600_000,
        }
    }
}

impl SimConfig {
    /// Mean simulated seconds between random failures (0: none).
    pub fn mean_interval_s(&self) -> f64 {
        self.mtbf_s
            .unwrap_or_else(|| paper_mtbf_s(self.nodes * self.gpus_per_node))
    }

    /// [`SimConfig::collective_timeout_s`] in ms.
    pub fn collective_timeout_ms(&self) -> i64 {
        (self.collective_timeout_s * 1000.0).round() as i64
    }

    /// The nodes' names, `node-000` on (wider for 1,000 nodes or more).
    pub fn node_names(&self) -> Vec<String> {
        let width = self.nodes.saturating_sub(1).to_string().len().max(3);
        (0..self.nodes)
            .map(|i| format!("node-{i:0width$}"))
            .collect()
    }

    /// The random failure rate as a multiple of the paper setting's for
    /// this cluster's size; 0 when a trace replaces random failures or none
    /// are injected.
    pub fn rate_vs_paper(&self) -> f64 {
        let mean = self.mean_interval_s();
        if self.trace.is_some() || mean <= 0.0 {
            0.0
        } else {
            paper_mtbf_s(self.nodes * self.gpus_per_node) / mean
        }
    }

    /// The first field that makes no sense, as `sim.field: reason`.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |field: &str, why: String| Err(format!("sim.{field}: {why}"));
        if self.cluster.is_empty() {
            return bad("cluster", "empty".into());
        }
        if self.nodes == 0 || self.nodes > 4096 {
            return bad("nodes", format!("{} is not between 1 and 4096", self.nodes));
        }
        if self.gpus_per_node == 0 || self.gpus_per_node > 64 {
            return bad(
                "gpus_per_node",
                format!("{} is not between 1 and 64", self.gpus_per_node),
            );
        }
        if self.jobs == 0 {
            return bad("jobs", "must be at least 1".into());
        }
        let need: u32 = (0..self.jobs)
            .map(|i| self.workload.job(i as usize).0.replica_gpus)
            .map(|g| g.div_ceil(self.gpus_per_node))
            .sum();
        if need > self.nodes {
            return bad(
                "jobs",
                format!(
                    "{} jobs need at least {need} nodes, the cluster has {}",
                    self.jobs, self.nodes
                ),
            );
        }
        let positive = [
            ("speed", self.speed),
            ("repair_s", self.repair_s),
            ("collective_timeout_s", self.collective_timeout_s),
            ("heartbeat_interval_s", self.heartbeat_interval_s),
            ("telemetry_interval_s", self.telemetry_interval_s),
            ("noise_interval_s", self.noise_interval_s),
        ];
        for (field, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return bad(field, format!("must be a positive number, got {value}"));
            }
        }
        let t = &self.transitions;
        let non_negative = [
            ("mtbf_s", self.mtbf_s.unwrap_or(0.0)),
            ("dispatch_s", self.dispatch_s),
            ("transitions.reattempt_s", t.reattempt_s),
            ("transitions.restart_replica_s", t.restart_replica_s),
            ("transitions.restart_checkpoint_s", t.restart_checkpoint_s),
            ("transitions.reconfigure_s", t.reconfigure_s),
            ("transitions.resume_s", t.resume_s),
        ];
        for (field, value) in non_negative {
            if !(value.is_finite() && value >= 0.0) {
                return bad(field, format!("must be zero or more, got {value}"));
            }
        }
        if !(self.throughput_factor > 0.0 && self.throughput_factor <= 1.0) {
            return bad(
                "throughput_factor",
                format!("must be in (0, 1], got {}", self.throughput_factor),
            );
        }
        if self.checkpoint_interval_s <= 0 {
            return bad("checkpoint_interval_s", "must be positive".into());
        }
        if self.log_every_iterations == 0 {
            return bad("log_every_iterations", "must be at least 1".into());
        }
        if self.trace_day.is_some() && !self.real_trace() {
            return bad(
                "trace_day",
                "only for a real trace (sim.trace ending in .json)".into(),
            );
        }
        Ok(())
    }

    /// Whether `trace` names a real trace (JSON) rather than a CSV.
    fn real_trace(&self) -> bool {
        self.trace
            .as_ref()
            .is_some_and(|p| p.extension().is_some_and(|e| e == "json"))
    }

    /// How many of a real trace's servers each node stands for when its day
    /// is folded onto this cluster (1 without one): its failures come that
    /// much more often per node, as the demonstration's faster rate does.
    pub fn trace_fold(&self) -> f64 {
        if !self.real_trace() {
            return 1.0;
        }
        let servers = self
            .trace
            .as_ref()
            .and_then(|path| crate::real_trace::RealTrace::read_infinitehbd(path, 0).ok());
        servers.map_or(1.0, |t| (t.servers as f64 / f64::from(self.nodes)).max(1.0))
    }

    /// Where the failures of a run with a trace come from, for people:
    /// `from FILE (N failures)`, and for a real trace the day and how its
    /// servers land on the nodes.
    pub fn trace_label(&self) -> Option<String> {
        let path = self.trace.as_ref()?;
        let count = self.load_trace().ok().flatten().map_or(0, |t| t.len());
        if !self.real_trace() {
            return Some(format!("from {} ({count} failures)", path.display()));
        }
        let day = match self.trace_day {
            Some(day) => day.to_string(),
            None => crate::real_trace::RealTrace::read_infinitehbd(path, 0)
                .map_or("?".into(), |t| {
                    format!("{} (its busiest)", t.busiest_day(DEMONSTRATED))
                }),
        };
        Some(format!(
            "from day {day} of the real trace {}: {count} faults, every server of the trace folded onto these {} nodes, each node out for its real repair",
            path.display(),
            self.nodes
        ))
    }

    /// The failures `trace` names, if set: the CSV's, or one day of the real
    /// trace (`trace_day`, else its busiest) on this cluster's nodes, the
    /// faults a job sees ([`DEMONSTRATED`]), moved so the first comes ten
    /// minutes in.
    pub fn load_trace(&self) -> Result<Option<Vec<crate::faults::TraceEntry>>, String> {
        use crate::real_trace::{Fit, RealTrace};
        let Some(path) = &self.trace else {
            return Ok(None);
        };
        let named = |e: crate::faults::TraceError| format!("sim.trace: {e}");
        if !self.real_trace() {
            return crate::faults::read_trace(path).map(Some).map_err(named);
        }
        let trace = RealTrace::read_infinitehbd(path, 0).map_err(named)?;
        let day = self
            .trace_day
            .unwrap_or_else(|| trace.busiest_day(DEMONSTRATED));
        let days = (trace.span_s / 86_400.0).ceil() as u32;
        if day >= days {
            return Err(format!(
                "sim.trace_day: {day} is past the trace's {days} days"
            ));
        }
        let window = trace.window(f64::from(day) * 86_400.0, 86_400.0);
        let mut entries = window.entries(&self.node_names(), self.seed, DEMONSTRATED, Fit::Fold);
        // The first fault ten minutes in: the demonstration's jobs run by
        // then, and it need not wait out the quiet hours before.
        let skip = entries.first().map_or(0.0, |e| e.at_s - 600.0);
        for e in &mut entries {
            e.at_s -= skip;
        }
        Ok(Some(entries))
    }
}
