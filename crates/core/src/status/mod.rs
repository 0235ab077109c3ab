//! What the status page shows, derived from the log with no I/O.
//!
//! Node health and job placement are the planner's own state, re-derived
//! the way `unicron replay` does it: each recorded decision names the input
//! it was taken on, and applying those inputs in decision order to a shadow
//! [`Planner`](crate::planner::Planner) rebuilds the planner's state exactly. So every planner
//! instance (and `unicron up`) can show every cluster, not only the ones it
//! owns, and the page never shows a state the planner did not have.
//!
//! Records arrive from five topics in no particular order across topics: a
//! decision may be read before its trigger. Decisions wait, per cluster and
//! in order, until their trigger is read; a trigger that never comes (it
//! fell out of retention before the page started) is skipped after
//! [`MAX_WAITING`] later decisions, and counted.
//!
//! On-call reads incidents, not records: an [`IncidentLog`] groups each
//! failure with the decisions, commands and results it caused, newest
//! first by event time, with decisions that change nothing folded into the
//! chain. Everything kept is bounded, so the view stays small with 100
//! clusters and a long log.

mod clusters;
mod detectors;
mod display;
mod incident;
mod incident_log;
mod shadow;
mod timeline;
mod waf;

#[cfg(test)]
mod tests;

pub use clusters::{ClusterSummary, ClusterView, JobCounts, NodeCounts, NodeStatus};
pub use incident::{
    CHAIN, ChainCommand, ChainDecision, ChainResult, CommandOutcome, Incident, IncidentState,
};
pub use incident_log::{INCIDENTS, INCIDENTS_PER_CLUSTER, IncidentLog, PENDING_PARTS, UNLINKED};
pub use shadow::{MAX_WAITING, PENDING_INPUTS, SERIES};
pub use timeline::{Entry, EntryKind, TIMELINE};
pub use waf::{FailureMark, JobView, WafPoint};

use detectors::DetectorRounds;
use display::{command_summary, decision_summary, failure_summary, result_summary};
use shadow::Shadow;
use timeline::Timeline;

use crate::planner::{InputEvent, PlannerConfig, SNAPSHOT_REPORT};
use crate::records::{Command, Decision, DetectorRound};

/// One record read from the log, with where it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub record: Record,
}

/// The records the page follows.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A planner input: a failure, a cluster event or a command result.
    Input(InputEvent),
    Decision(Decision),
    Command(Command),
}

/// The page's model: feed it every record with [`StatusView::apply`].
pub struct StatusView {
    shadow: Shadow,
    timeline: Timeline,
    incidents: IncidentLog,
    detectors: DetectorRounds,
    goodput: crate::goodput::Goodput,
}

impl StatusView {
    /// A view whose shadow planner uses `config` (the planner's own).
    pub fn new(config: PlannerConfig) -> StatusView {
        StatusView {
            goodput: crate::goodput::Goodput::new(config.node_gpus),
            shadow: Shadow::new(config),
            timeline: Timeline::new(),
            incidents: IncidentLog::new(),
            detectors: DetectorRounds::default(),
        }
    }

    /// Takes one detector round: whether its detector holds the heartbeat
    /// and hang timers (lost broker connection, or the lag guard).
    pub fn apply_round(&mut self, round: &DetectorRound) {
        self.detectors.apply(round);
    }

    /// The detector instances whose latest round held the silence timers:
    /// their node losses and hangs wait until they catch up.
    pub fn detector_timers_held(&self) -> Vec<String> {
        self.detectors.timers_held()
    }

    /// Error-marked log lines no rule took, by template, newest first: of
    /// `cluster`, or of all clusters; at most `limit`.
    pub fn unclassified(
        &self,
        cluster: Option<&str>,
        limit: usize,
    ) -> Vec<crate::records::UnclassifiedTemplate> {
        self.detectors.unclassified(cluster, limit)
    }

    /// Takes one record into the view.
    pub fn apply(&mut self, read: Read) {
        self.incidents.apply(&read.record);
        self.goodput.apply(&read.record);
        let position = (read.topic, read.partition, read.offset);
        match read.record {
            Record::Input(event) => {
                self.push_input_entry(&event);
                self.shadow.take_input(position, event);
            }
            Record::Decision(decision) => {
                // Snapshot reports change what restores can use, nothing an
                // operator reads: applied, not listed.
                if decision.trigger.kind != SNAPSHOT_REPORT {
                    self.timeline.push(
                        EntryKind::Decision,
                        &decision.cluster,
                        decision.time_ms,
                        &decision.id,
                        decision_summary(&decision),
                        &decision,
                    );
                }
                self.shadow.take_decision(decision);
            }
            Record::Command(command) => {
                let summary = command_summary(&command);
                let unsigned = Command {
                    signature: Vec::new(),
                    ..command
                };
                self.timeline.push(
                    EntryKind::Command,
                    &unsigned.cluster,
                    unsigned.time_ms,
                    &unsigned.id,
                    summary,
                    &unsigned,
                );
            }
        }
    }

    fn push_input_entry(&mut self, event: &InputEvent) {
        match event {
            InputEvent::Failure(f) => {
                self.shadow.mark_failure(f);
                self.timeline.push(
                    EntryKind::Failure,
                    &f.cluster,
                    f.detected_ms,
                    &f.id,
                    failure_summary(f),
                    f,
                );
            }
            InputEvent::Result(r) => {
                self.timeline.push(
                    EntryKind::Result,
                    &r.cluster,
                    r.time_ms,
                    &r.command_id,
                    result_summary(r),
                    r,
                );
            }
            // Inventory changes show through the decisions they cause.
            InputEvent::Cluster(_) => {}
        }
    }

    /// Timeline entries with `seq > after`, oldest first, at most `limit`.
    pub fn timeline_after(&self, after: u64, limit: usize) -> Vec<Entry> {
        self.timeline.after(after, limit, |_| true)
    }

    /// The same, of the clusters `keep` allows: up to `limit` of theirs,
    /// however many of other clusters' entries lie between.
    pub fn timeline_after_of(
        &self,
        after: u64,
        limit: usize,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<Entry> {
        self.timeline.after(after, limit, |e| keep(&e.cluster))
    }

    /// The newest timeline position (0 before the first entry).
    pub fn last_seq(&self) -> u64 {
        self.timeline.last_seq()
    }

    /// Incidents newest first by detection time (see [`IncidentLog::incidents`]).
    pub fn incidents(&self, cluster: Option<&str>, limit: usize) -> Vec<Incident> {
        self.incidents.incidents(cluster, limit)
    }

    /// The incident model itself.
    /// Every job's wall time by cause, by (cluster, job).
    pub fn goodput(&self) -> &crate::goodput::Goodput {
        &self.goodput
    }

    pub fn incident_log(&self) -> &IncidentLog {
        &self.incidents
    }
}
