//! The whole loop in one thread, as fast as the CPU allows: the simulated
//! cluster feeds the same core `Detector` and `Planner` the services run,
//! commands pass the executor's `Gate` and go to the simulator's action
//! handler. No broker, no clock: a run is a function of its inputs.

//!
//! This file holds the loop and its clock; `detect` feeds the detector and
//! hands its failures on, `commands` carries the planner's commands out.

mod commands;
mod detect;

use std::collections::BTreeMap;

use unicron_core::detector::{Detector, DetectorConfig, rules::LogRules};
use unicron_core::executor::Gate;
use unicron_core::planner::{Planner, PlannerConfig};
use unicron_core::signing::CommandSigner;
use unicron_core::{
    AgentEvent, ClusterEvent, Command, CommandResult, Decision, FailureEvent, LogRecord,
    TelemetryBatch,
};

use crate::model::Sim;
use crate::truth::Summary;

/// Counts of what crossed each edge of the loop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flow {
    pub records: u64,
    pub failures: u64,
    pub decisions: u64,
    pub commands: u64,
    pub rejected_commands: u64,
}

/// One record of the loop as it would be on its topic (partition 0, at
/// the offset the loop gave it), for archives and benchmarks.
#[derive(Debug, Clone, PartialEq)]
pub enum Logged {
    Telemetry(TelemetryBatch),
    Log(LogRecord),
    Agent(AgentEvent),
    Cluster(ClusterEvent),
    Failure(FailureEvent),
    Decision(Decision),
    Command(Command),
    Result(CommandResult),
}

impl Logged {
    /// The topic's name without a prefix, as the loop's trigger ids use it.
    pub fn topic(&self) -> &'static str {
        match self {
            Logged::Telemetry(_) => "telemetry",
            Logged::Log(_) => "logs",
            Logged::Agent(_) => "agent",
            Logged::Cluster(_) => "cluster",
            Logged::Failure(_) => "failures",
            Logged::Decision(_) => "decisions",
            Logged::Command(_) => "commands",
            Logged::Result(_) => "command-results",
        }
    }
}

/// Detector, planner, executor gate and simulator wired in memory.
pub struct Offline {
    pub sim: Sim,
    detector: Detector,
    planner: Planner,
    gate: Gate,
    offsets: BTreeMap<&'static str, i64>,
    pub flow: Flow,
    /// Every record in offset order per topic, when recording.
    pub log: Option<Vec<Logged>>,
    /// Failures of these kinds reach the planner only this long after their
    /// first evidence: a baseline that learns of them late.
    delay: Option<DetectionDelay>,
    held: Vec<unicron_core::FailureEvent>,
    /// Sparse feed: the time the detector's clock was last moved to.
    clock_ms: i64,
}

/// How late a baseline learns of some kinds of failure.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectionDelay {
    pub kinds: Vec<unicron_core::FailureKind>,
    pub delay_ms: i64,
    /// Kinds the baseline never learns of from unicron's detector (a hang
    /// found by its statistics): what else the failure causes reaches it.
    pub ignored: Vec<unicron_core::FailureKind>,
}

impl Offline {
    /// The loop for `sim`. Unless `planner` sets an isolation limit, every
    /// node may be isolated: the loop compares recovery policies under one
    /// failure sequence, often far denser than a real cluster's, and the
    /// blast radius would refuse the same isolations under every policy.
    pub fn new(sim: Sim, detector: DetectorConfig, mut planner: PlannerConfig) -> Offline {
        if planner.max_isolations_per_hour.is_none() {
            planner.max_isolations_per_hour = Some(sim.config().nodes.max(1));
        }
        let signer = CommandSigner::from_seed("offline", [7; 32]);
        let keys = BTreeMap::from([("offline".to_string(), signer.verifying_key())]);
        let cluster = sim.config().cluster.clone();
        Offline {
            sim,
            detector: Detector::new(detector, LogRules::builtin()),
            planner: Planner::new(planner, signer),
            gate: Gate::new(cluster, keys, 3_600_000),
            offsets: BTreeMap::new(),
            flow: Flow::default(),
            log: None,
            delay: None,
            held: Vec::new(),
            clock_ms: i64::MIN,
        }
    }

    /// Decisions without their state digest (see
    /// [`Planner::without_digests`]): for evaluations, not for archives.
    pub fn without_digests(mut self) -> Offline {
        self.planner = self.planner.without_digests();
        self
    }

    /// Holds failures of `delay.kinds` back until `delay_ms` after their
    /// first evidence.
    pub fn with_detection_delay(mut self, delay: DetectionDelay) -> Offline {
        self.delay = Some(delay);
        self
    }

    /// Keeps every record of the run in `log`.
    pub fn recording(mut self) -> Offline {
        self.log = Some(Vec::new());
        self
    }

    fn keep(&mut self, record: impl FnOnce() -> Logged) {
        if let Some(log) = &mut self.log {
            log.push(record());
        }
    }

    fn next_offset(&mut self, topic: &'static str) -> i64 {
        let offset = self.offsets.entry(topic).or_default();
        *offset += 1;
        *offset - 1
    }

    /// Runs until `sim_s` simulated seconds after the start: tick by tick,
    /// or, with a sparse feed, from one event to the next (every tick
    /// while the detector has a timer pending, so timers fire on time).
    pub fn run_for(&mut self, sim_s: f64) -> Summary {
        let end = self.sim.config().start_ms + (sim_s * 1000.0) as i64;
        while self.sim.now_ms() < end {
            let next = self.next_step(end);
            let emissions = self.sim.advance_to(next);
            for emission in emissions {
                self.feed(emission);
            }
            if self.sim.is_sparse() {
                self.move_clock(self.sim.now_ms());
            }
            self.release_held();
        }
        Summary::new(self.sim.truth(), self.sim.config(), self.sim.downtime_s())
    }

    /// The next tick to run to: the simulation's next event, the next tick
    /// while a detector timer waits, or the release of a held failure.
    fn next_step(&self, end: i64) -> i64 {
        let now = self.sim.now_ms();
        let tick = now + 1_000;
        if !self.sim.is_sparse() {
            return tick;
        }
        let mut next = self.sim.next_event_ms();
        if !self.detector.idle_candidates().is_empty() {
            next = next.min(tick);
        }
        let start = self.sim.config().start_ms;
        let on_tick = |t: i64| crate::model::tick_at_or_after(start, t).max(tick);
        if let Some(due) = self.held.iter().map(|f| f.detected_ms).min() {
            next = next.min(on_tick(due));
        }
        // The detector rejects records further ahead of its clock than
        // max_future_skew_s: an idle tick at least half as often keeps a
        // failure after a long quiet span from looking like a bad clock.
        let skew_ms = (self.detector.config().max_future_skew_s * 500.0) as i64;
        if self.clock_ms > i64::MIN && skew_ms > 0 {
            next = next.min(on_tick(self.clock_ms + skew_ms));
        }
        next.min(on_tick(end))
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod sparse_tests;

/// Jobs whose replicas span nodes, end to end.
#[cfg(test)]
mod replica_tests;

/// The goodput split of a run's log against the simulator's accounting.
#[cfg(test)]
mod goodput_tests;
