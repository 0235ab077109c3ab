//! What the detector observes: one decoded input record.

use crate::records::{AgentEvent, LogRecord, TelemetryBatch};

/// One thing the detector observes.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    Log(LogRecord),
    Telemetry(TelemetryBatch),
    Agent(AgentEvent),
}

impl Observation {
    /// Re-homes it to `cluster` (an input bound to one cluster).
    pub fn set_cluster(&mut self, cluster: &str) {
        let slot = match self {
            Observation::Log(r) => &mut r.cluster,
            Observation::Telemetry(b) => &mut b.cluster,
            Observation::Agent(e) => &mut e.cluster,
        };
        *slot = cluster.to_string();
    }

    pub fn cluster(&self) -> &str {
        match self {
            Observation::Log(r) => &r.cluster,
            Observation::Telemetry(b) => &b.cluster,
            Observation::Agent(e) => &e.cluster,
        }
    }

    pub fn node(&self) -> &str {
        match self {
            Observation::Log(r) => &r.node,
            Observation::Telemetry(b) => &b.node,
            Observation::Agent(e) => &e.node,
        }
    }

    /// The event time inputs are ordered by: the newest time it carries.
    pub fn time_ms(&self) -> i64 {
        match self {
            Observation::Log(r) => r.time_ms,
            Observation::Agent(a) => a.time_ms,
            Observation::Telemetry(t) => t.samples.iter().map(|s| s.time_ms).max().unwrap_or(0),
        }
    }
}
