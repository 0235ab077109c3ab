//! Feeding the detector: the simulator's records (and, with a sparse
//! feed, idle ticks that move its clock), and its failures handed to the
//! planner, or held back for a baseline that learns of them late.

use unicron_core::AgentEvent;
use unicron_core::FailureEvent;
use unicron_core::detector::{DetectorInput, DetectorOutput, Observation, SourceRecord};
use unicron_core::planner::{Input, InputEvent};

use super::{Logged, Offline};
use crate::model::Emission;

impl Offline {
    /// Hands the planner every held failure whose time has come.
    pub(super) fn release_held(&mut self) {
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

    /// Sparse feed: moves the detector's clock to `time_ms` with an idle
    /// tick (with every record, the nodes' heartbeats move it), firing the
    /// timers it passes.
    pub(super) fn move_clock(&mut self, time_ms: i64) {
        if time_ms <= self.clock_ms {
            return;
        }
        self.clock_ms = time_ms;
        let cluster = self.sim.config().cluster.clone();
        let offset = self.next_offset("agent");
        let outputs = self.detector.apply(&DetectorInput {
            source: SourceRecord {
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

    pub(super) fn feed(&mut self, emission: Emission) {
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
            source: SourceRecord {
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
}
