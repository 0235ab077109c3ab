//! The whole loop in one thread, as fast as the CPU allows: the simulated
//! cluster feeds the same core `Detector` and `Planner` the services run,
//! commands pass the executor's `Gate` and go to the simulator's action
//! handler. No broker, no clock: a run is a function of its inputs.

use std::collections::BTreeMap;

use unicron_core::detector::{
    Detector, DetectorConfig, DetectorInput, DetectorOutput, Observation, Source, rules::LogRules,
};
use unicron_core::executor::{ActionRequest, Gate, Outcome, result};
use unicron_core::planner::{Input, InputEvent, Output, Planner, PlannerConfig};
use unicron_core::signing::CommandSigner;
use unicron_core::{
    AgentEvent, ClusterEvent, Command, CommandResult, CommandStatus, Decision, FailureEvent,
    LogRecord, TelemetryBatch,
};

use crate::model::{Emission, Sim};
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

    /// Hands the planner every held failure whose time has come.
    fn release_held(&mut self) {
        let now = self.sim.now_ms();
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|f| f.detected_ms <= now);
        self.held = keep;
        for failure in due {
            self.report(failure);
        }
    }

    fn report(&mut self, failure: FailureEvent) {
        self.sim.observe_failure(&failure);
        self.keep(|| Logged::Failure(failure.clone()));
        let offset = self.next_offset("failures");
        self.plan(Input {
            topic: "failures".into(),
            partition: 0,
            offset,
            event: InputEvent::Failure(failure),
        });
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

    /// Sparse feed: moves the detector's clock to `time_ms` with an idle
    /// tick (with every record, the nodes' heartbeats move it), firing the
    /// timers it passes.
    fn move_clock(&mut self, time_ms: i64) {
        if time_ms <= self.clock_ms {
            return;
        }
        self.clock_ms = time_ms;
        let cluster = self.sim.config().cluster.clone();
        let offset = self.next_offset("agent");
        let outputs = self.detector.apply(&DetectorInput {
            source: Source {
                topic: "agent".into(),
                partition: 0,
                offset,
                index: 0,
            },
            observation: Observation::Agent(AgentEvent::idle(&cluster, "offline", time_ms)),
            caught_up: true,
        });
        self.failures(outputs);
    }

    fn feed(&mut self, emission: Emission) {
        self.flow.records += 1;
        let (topic, observation) = match emission {
            Emission::Cluster(event) => {
                self.keep(|| Logged::Cluster(event.clone()));
                let offset = self.next_offset("cluster");
                self.plan(Input {
                    topic: "cluster".into(),
                    partition: 0,
                    offset,
                    event: InputEvent::Cluster(event),
                });
                return;
            }
            Emission::Log(r) => ("logs", Observation::Log(r)),
            Emission::Telemetry(r) => ("telemetry", Observation::Telemetry(r)),
            Emission::Agent(r) => ("agent", Observation::Agent(r)),
        };
        self.keep(|| match &observation {
            Observation::Log(r) => Logged::Log(r.clone()),
            Observation::Telemetry(r) => Logged::Telemetry(r.clone()),
            Observation::Agent(r) => Logged::Agent(r.clone()),
        });
        if self.sim.is_sparse() {
            let time_ms = match &observation {
                Observation::Log(r) => r.time_ms,
                Observation::Agent(r) => r.time_ms,
                Observation::Telemetry(_) => i64::MIN,
            };
            self.move_clock(time_ms);
        }
        let offset = self.next_offset(topic);
        let outputs = self.detector.apply(&DetectorInput {
            source: Source {
                topic: topic.into(),
                partition: 0,
                offset,
                index: 0,
            },
            observation,
            caught_up: true,
        });
        self.failures(outputs);
    }

    /// Hands the detector's failures on, or holds them (a late baseline).
    fn failures(&mut self, outputs: Vec<DetectorOutput>) {
        for output in outputs {
            if let DetectorOutput::Failure(mut failure) = output {
                if self
                    .delay
                    .as_ref()
                    .is_some_and(|d| d.ignored.contains(&failure.kind))
                {
                    continue;
                }
                self.flow.failures += 1;
                match &self.delay {
                    Some(d) if d.kinds.contains(&failure.kind) => {
                        // The timeout runs from when the job stalled, which
                        // may be before this evidence (the watchdog's own
                        // abort comes at the timeout).
                        let stalled = self
                            .sim
                            .stalled_since(&failure)
                            .map_or(failure.first_evidence_ms, |t| {
                                t.min(failure.first_evidence_ms)
                            });
                        failure.detected_ms = (stalled + d.delay_ms).max(failure.detected_ms);
                        self.held.push(failure);
                    }
                    _ => self.report(failure),
                }
            }
        }
    }

    /// Applies one planner input and carries out its commands, feeding
    /// each result back (which may lead to more commands).
    fn plan(&mut self, input: Input) {
        let mut queue = vec![input];
        while let Some(input) = queue.pop() {
            for output in self.planner.apply(&input) {
                match output {
                    Output::Decision(decision) => {
                        self.flow.decisions += 1;
                        self.keep(|| Logged::Decision(decision));
                    }
                    Output::Command(command) => {
                        self.flow.commands += 1;
                        self.keep(|| Logged::Command(command.clone()));
                        let outcome: CommandResult = match self.gate.check(&command) {
                            Err(why) => {
                                self.flow.rejected_commands += 1;
                                result(
                                    &command,
                                    CommandStatus::Rejected,
                                    Some(why.to_string()),
                                    0,
                                    None,
                                    "offline",
                                )
                            }
                            Ok(()) => {
                                let answer = self.sim.act(&ActionRequest::new(&command, 1));
                                let status = match answer.status {
                                    Outcome::Succeeded => CommandStatus::Succeeded,
                                    Outcome::Failed => CommandStatus::Failed,
                                };
                                result(
                                    &command,
                                    status,
                                    answer.reason,
                                    answer.duration_ms.unwrap_or(0),
                                    answer.completed_ms,
                                    "offline",
                                )
                            }
                        };
                        self.keep(|| Logged::Result(outcome.clone()));
                        let offset = self.next_offset("command-results");
                        queue.push(Input {
                            topic: "command-results".into(),
                            partition: 0,
                            offset,
                            event: InputEvent::Result(outcome),
                        });
                    }
                    Output::Rejected(_) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimConfig;
    use crate::faults::parse_trace;
    use unicron_core::{CommandAction, FailureKind};

    pub(super) fn offline(config: SimConfig, trace: Option<&str>) -> Offline {
        let trace = trace.map(|t| parse_trace(t, "trace").unwrap());
        Offline::new(
            Sim::new(config, trace),
            DetectorConfig::default(),
            PlannerConfig::default(),
        )
    }

    #[test]
    fn each_severity_gets_its_action_once_and_in_bounded_time() {
        let config = SimConfig {
            mtbf_s: Some(0.0),
            ..SimConfig::default()
        };
        let trace = "time_s,node,kind\n600,node-001,nccl_timeout\n1200,node-008,cuda_error\n1800,node-014,ecc_error\n2400,node-004,lost_connection\n3000,node-010,task_hang\n";
        let mut run = offline(config, Some(trace));
        let summary = run.run_for(3_600.0);
        eprintln!("{}", summary.table());
        assert_eq!(summary.failures_injected, 5, "{}", summary.table());
        let want = [
            (FailureKind::NcclTimeout, CommandAction::Reattempt),
            (FailureKind::CudaError, CommandAction::Restart),
            (FailureKind::EccError, CommandAction::IsolateNode),
            (FailureKind::LostConnection, CommandAction::IsolateNode),
            (FailureKind::TaskHang, CommandAction::Restart),
        ];
        for (fault, (kind, action)) in summary.faults.iter().zip(want) {
            assert_eq!(fault.kind, kind);
            assert_eq!(fault.detected_as, Some(kind), "{fault:?}");
            let delay = fault.detected_ms.unwrap() - fault.injected_ms;
            assert!(delay <= 60_000, "{kind}: detected after {delay} ms");
            assert_eq!(fault.resolved_by, Some(action), "{fault:?}");
            let to_action = fault.resolved_ms.unwrap() - fault.injected_ms;
            assert!(to_action <= 90_000, "{kind}: acted on after {to_action} ms");
        }
        assert_eq!(summary.failed_actions, 0, "{}", summary.table());
        assert_eq!(summary.false_detections, 0, "{}", summary.table());
        assert_eq!(run.flow.rejected_commands, 0);
        // Two node losses and five recoveries cost something, not everything.
        assert!(
            summary.waf_fraction > 0.5 && summary.waf_fraction < 1.0,
            "{}",
            summary.waf_fraction
        );
    }

    #[test]
    fn a_repaired_node_comes_back_and_the_cluster_regains_its_ideal_rate() {
        let config = SimConfig {
            mtbf_s: Some(0.0),
            repair_s: 600.0,
            ..SimConfig::default()
        };
        let mut run = offline(
            config,
            Some("time_s,node,kind\n300,node-005,lost_connection\n"),
        );
        let summary = run.run_for(2_400.0);
        let fault = &summary.faults[0];
        assert_eq!(
            fault.resolved_by,
            Some(CommandAction::IsolateNode),
            "{fault:?}"
        );
        // Shrunk around the lost node, then grown back once it is repaired.
        assert!(
            summary
                .actions_by_kind
                .get("reconfigure")
                .copied()
                .unwrap_or(0)
                >= 2,
            "{}",
            summary.table()
        );
        let ideal = run.sim.truth().ideal_rate();
        assert!(
            (run.sim.current_rate() - ideal).abs() < ideal * 1e-9,
            "{} of {ideal}",
            run.sim.current_rate()
        );
        assert_eq!(summary.false_detections, 0, "{}", summary.table());
    }

    #[test]
    fn a_healthy_cluster_comes_close_to_the_ideal() {
        let config = SimConfig {
            mtbf_s: Some(0.0),
            ..SimConfig::default()
        };
        let summary = offline(config, None).run_for(3_600.0);
        assert_eq!(summary.failures_injected, 0);
        assert_eq!(summary.false_detections, 0, "{}", summary.table());
        // All that is lost is the two-minute start: 58/60 of the ideal.
        assert!(
            (summary.waf_fraction - 58.0 / 60.0).abs() < 0.01,
            "{}",
            summary.waf_fraction
        );
        assert_eq!(summary.actions_by_kind.get("resume"), Some(&3));
    }

    /// `unicron up`'s demonstration: whatever the seed, its first simulated
    /// half hour (a minute of real time at 30x) shows a failure of each
    /// severity injected, detected and healed, with some minutes to spare.
    #[test]
    fn demo_arrivals_heal_every_severity_early_whatever_the_seed() {
        use crate::config::{Arrivals, DEMO_MTBF_S};
        use unicron_core::Severity;
        for seed in 0..40 {
            let config = SimConfig {
                seed,
                mtbf_s: Some(DEMO_MTBF_S),
                arrivals: Arrivals::Demo,
                ..SimConfig::default()
            };
            let start = config.start_ms;
            let summary = offline(config, None).run_for(1_800.0);
            for severity in [Severity::Sev1, Severity::Sev2, Severity::Sev3] {
                let healed = summary.faults.iter().find(|f| {
                    crate::faults::needs(f.kind) == severity
                        && f.detected_ms.is_some()
                        && f.resolved_ms.is_some_and(|at| at - start <= 1_500_000)
                });
                assert!(
                    healed.is_some(),
                    "seed {seed}: no {severity} failure healed in 25 minutes\n{}",
                    summary.table()
                );
            }
            assert_eq!(
                summary.failed_actions,
                0,
                "seed {seed}\n{}",
                summary.table()
            );
            assert_eq!(
                summary.false_detections,
                0,
                "seed {seed}\n{}",
                summary.table()
            );
        }
    }

    /// Demo arrivals stay random: another seed, other times and kinds.
    #[test]
    fn demo_arrivals_differ_by_seed() {
        use crate::config::Arrivals;
        let run = |seed| {
            let config = SimConfig {
                seed,
                mtbf_s: Some(240.0),
                arrivals: Arrivals::Demo,
                ..SimConfig::default()
            };
            offline(config, None).run_for(1_800.0)
        };
        let (a, b) = (run(3), run(4));
        let shape = |s: &Summary| -> Vec<(FailureKind, i64)> {
            s.faults.iter().map(|f| (f.kind, f.injected_ms)).collect()
        };
        assert_ne!(shape(&a), shape(&b));
        assert_eq!(shape(&a), shape(&run(3)));
    }

    #[test]
    fn the_same_seed_gives_the_same_run_and_another_seed_another() {
        let config = |seed| SimConfig {
            seed,
            mtbf_s: Some(600.0),
            ..SimConfig::default()
        };
        let a = offline(config(5), None).run_for(7_200.0);
        let b = offline(config(5), None).run_for(7_200.0);
        assert_eq!(a, b);
        assert!(a.failures_injected >= 3, "{}", a.table());
        let c = offline(config(6), None).run_for(7_200.0);
        assert_ne!(a.faults, c.faults);
    }
}

#[cfg(test)]
mod sparse_tests {
    use super::*;
    use crate::evaluate::{PolicyModel, Scenario, offline_for, policies, scenarios, sim_for};
    use unicron_core::FailureKind;

    fn run(
        s: &Scenario,
        policy: &PolicyModel,
        seed: u64,
        sparse: bool,
        hours: f64,
    ) -> (Summary, Flow) {
        let mut sim = sim_for(s, policy, seed, &s.trace(seed));
        if sparse {
            sim = sim.with_sparse_feed();
        }
        let mut offline = offline_for(policy, sim);
        let summary = offline.run_for(hours * 3600.0);
        (summary, offline.flow)
    }

    /// The discrete-event loop meets the same failures, detects them as
    /// the same kinds at the same times and takes the same actions at the
    /// same times as the tick-by-tick loop with every record, under every
    /// policy; WAF agrees within 0.5% (here exactly, bar rounding).
    #[test]
    fn the_sparse_feed_decides_as_every_record_does() {
        for (name, hours, seed) in [("smoke", 6.0, 1), ("smoke", 6.0, 2), ("paper", 12.0, 3)] {
            let s = scenarios()
                .into_iter()
                .find(|s| s.name == name)
                .expect("named");
            for policy in policies(&s).iter().filter(|p| p.cannot_run.is_none()) {
                let (ticked, every) = run(&s, policy, seed, false, hours);
                let (sparse, few) = run(&s, policy, seed, true, hours);
                let what = format!("{name} seed {seed} {}", policy.name);
                assert!(ticked.failures_injected >= 2, "{what}: {}", ticked.table());
                // A stall is found by the hang statistics, which the sparse
                // feed gives a job's recent iterations at their exact mean
                // where the ticked feed jitters them by 2%: its detection
                // may move by seconds; everything else is the same.
                assert_eq!(ticked.faults.len(), sparse.faults.len(), "{what}");
                for (a, b) in ticked.faults.iter().zip(&sparse.faults) {
                    let same = |f: &crate::truth::Fault| {
                        (
                            f.kind,
                            f.node.clone(),
                            f.job.clone(),
                            f.injected_ms,
                            f.detected_as,
                            f.resolved_by,
                        )
                    };
                    assert_eq!(same(a), same(b), "{what}");
                    let moved =
                        |x: Option<i64>, y: Option<i64>| (x.unwrap_or(0) - y.unwrap_or(0)).abs();
                    let slack = if a.detected_as == Some(FailureKind::TaskHang) {
                        30_000
                    } else {
                        0
                    };
                    assert!(
                        moved(a.detected_ms, b.detected_ms) <= slack,
                        "{what}: {a:?} {b:?}"
                    );
                    assert!(
                        moved(a.running_again_ms, b.running_again_ms) <= slack,
                        "{what}: {a:?} {b:?}"
                    );
                }
                assert_eq!(ticked.actions_by_kind, sparse.actions_by_kind, "{what}");
                // The ticked feed's DCGM telemetry can report a fault a
                // second time while a late baseline leaves it standing; the
                // planner takes no action on the repeat.
                assert_eq!(every.commands, few.commands, "{what}");
                assert!(
                    every.failures >= few.failures
                        && every.failures - few.failures == every.decisions - few.decisions,
                    "{what}: {every:?} {few:?}"
                );
                if policy.late.is_empty() {
                    assert_eq!(every.failures, few.failures, "{what}");
                }
                assert_eq!(ticked.false_detections, sparse.false_detections, "{what}");
                let gap = (sparse.waf_fraction / ticked.waf_fraction - 1.0).abs();
                assert!(
                    gap < 0.005,
                    "{what}: WAF {} against {}",
                    sparse.waf_fraction,
                    ticked.waf_fraction
                );
                // What makes it fast: far fewer records.
                assert!(
                    few.records * 20 < every.records,
                    "{what}: {} against {} records",
                    few.records,
                    every.records
                );
            }
        }
    }
}

/// Jobs whose replicas span nodes, end to end.
#[cfg(test)]
mod replica_tests {
    use super::tests::offline;
    use super::*;
    use crate::config::SimConfig;
    use unicron_core::{CommandAction, FailureKind};

    /// Four heterogeneous jobs on 32 nodes: job-3 runs two 64-GPU replicas
    /// on 16 nodes, its iterations take about two minutes.
    fn heterogeneous() -> SimConfig {
        SimConfig {
            nodes: 32,
            jobs: 4,
            workload: crate::config::Workload::Heterogeneous,
            mtbf_s: Some(0.0),
            ..SimConfig::default()
        }
    }

    /// The decisions of a recorded run.
    fn decisions(run: &Offline) -> Vec<unicron_core::Decision> {
        let log = run.log.as_ref().expect("recording");
        log.iter()
            .filter_map(|r| match r {
                Logged::Decision(d) => Some(d.clone()),
                _ => None,
            })
            .collect()
    }

    /// A node of job-3 once every job is placed.
    fn flagship_node() -> String {
        let mut run = offline(heterogeneous(), None).recording();
        run.run_for(300.0);
        let placed = decisions(&run).last().unwrap().assignment.clone();
        assert_eq!(placed["job-3"].len(), 16, "{placed:?}");
        placed["job-3"][3].clone()
    }

    /// The planner's WAF for its plan after the heavy job loses a node is
    /// what the simulated cluster then runs at: the heavy job keeps both
    /// replicas (a light job gives up a node) and nothing counts a partial
    /// replica.
    #[test]
    fn the_planned_waf_is_what_the_cluster_measures_with_multi_node_replicas() {
        let trace = format!("time_s,node,kind\n600,{},ecc_error\n", flagship_node());
        let mut run = offline(heterogeneous(), Some(&trace)).recording();
        let summary = run.run_for(3_600.0);
        assert_eq!(summary.failures_injected, 1);
        let all = decisions(&run);
        let replan = all
            .iter()
            .find(|d| d.reason.contains("isolate"))
            .expect("the SEV1 re-plans");
        let chosen = &replan.alternatives[0];
        assert_eq!(chosen.allocation["job-3"], 128, "{}", replan.reason);
        for (job, gpus) in &chosen.allocation {
            let replica = crate::config::Workload::Heterogeneous
                .job(job[4..].parse().unwrap())
                .0
                .replica_gpus as i32;
            assert_eq!(gpus % replica, 0, "{job}: {gpus} GPUs");
        }
        // Every transition is over: the cluster runs what was planned.
        let measured = run.sim.current_rate();
        let predicted = all.last().unwrap().alternatives[0].waf;
        assert!(
            (measured - predicted).abs() <= 1e-9 * predicted,
            "measured {measured:e}, predicted {predicted:e}"
        );
        assert!(
            (predicted - chosen.waf).abs() <= 1e-9 * predicted,
            "{predicted:e} {:e}",
            chosen.waf
        );
    }

    /// A hang within a job's first iterations after a start is invisible to
    /// the detector's statistics; NCCL's watchdog ends it at the timeout
    /// and the job is restarted, rather than stalled for good.
    #[test]
    fn a_hang_the_statistics_miss_ends_at_the_nccl_timeout() {
        // job-3 starts at about 130 s; its first iteration ends at about 380 s.
        let trace = format!("time_s,node,kind\n300,{},task_hang\n", flagship_node());
        let mut run = offline(heterogeneous(), Some(&trace));
        let summary = run.run_for(3_600.0);
        let hang = &summary.faults[0];
        assert_eq!(hang.kind, FailureKind::TaskHang);
        assert_eq!(hang.resolved_by, Some(CommandAction::Restart), "{hang:?}");
        let after = hang.resolved_ms.unwrap() - hang.injected_ms;
        let timeout = run.sim.config().collective_timeout_ms();
        assert!(
            (timeout..timeout + 60_000).contains(&after),
            "resolved {after} ms after the hang: {hang:?}"
        );
        assert_eq!(run.sim.current_rate(), run.sim.truth().ideal_rate());
    }
}
