//! The timers that read silence as failure, fired by the watermark:
//! heartbeat deadlines (a node stopped reporting) and hangs (a job stopped
//! completing iterations).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::config::{DetectorConfig, ms};
use super::correlate::Candidate;
use super::{ClusterView, NodeView, SourceRecord, evidence};
use crate::records::{AgentEvent, DetectionMethod};
use crate::taxonomy::{FailureKind, Severity};

/// (heartbeat deadline, node) of every watched node, soonest first: the
/// timers fire by popping the front, not by scanning every node. Nodes are
/// numbered in the order the cluster first heard them (most deadlines tie
/// on the second, and a number compares without reading a name); what
/// fires is put back in name order ([`lost_nodes`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct HeartbeatDeadlines {
    due: BTreeSet<(i64, u32)>,
    names: Vec<Arc<str>>,
}

impl HeartbeatDeadlines {
    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }

    /// `node`'s number, given at its first heartbeat.
    fn number(&mut self, node: &mut NodeView, name: &str) -> u32 {
        *node.timer.get_or_insert_with(|| {
            self.names.push(Arc::from(name));
            (self.names.len() - 1) as u32
        })
    }

    fn start(&mut self, at: i64, number: u32) {
        self.due.insert((at, number));
    }

    fn stop(&mut self, at: i64, number: u32) {
        self.due.remove(&(at, number));
    }

    /// A heartbeat of `node` (named by `event`), heard when the cluster's
    /// clock reads `now`. A newer one than the last restarts the deadline,
    /// from `now`: a node whose own clock runs slow is not silent.
    pub fn heartbeat(
        &mut self,
        node: &mut NodeView,
        event: &AgentEvent,
        now: Option<i64>,
        source: &SourceRecord,
        config: &DetectorConfig,
    ) {
        if node.last_heartbeat_ms.is_some_and(|t| event.time_ms <= t) {
            return; // not newer than the last
        }
        let deadline = ms(config.heartbeat_deadline_s);
        let number = self.number(node, &event.node);
        if let (Some(heard), None) = (node.heard_ms, node.lost_at_ms) {
            self.stop(heard + deadline, number);
        }
        // Applied after the clock moved, so never behind the event.
        let heard = now.unwrap_or(event.time_ms);
        node.last_heartbeat_ms = Some(event.time_ms);
        node.heard_ms = Some(heard);
        match &mut node.heartbeat_evidence {
            // The same partition's stream: only the position moves.
            Some(e) if e.topic == source.topic => {
                e.partition = source.partition;
                e.offset = source.offset;
            }
            slot => {
                *slot = Some(evidence(
                    source,
                    &event.node,
                    "last heartbeat",
                    config.excerpt_bytes,
                ))
            }
        }
        // A node heard from after it was reported lost is back.
        if node.lost_at_ms.is_some_and(|lost| event.time_ms > lost) {
            node.lost_at_ms = None;
        }
        if node.lost_at_ms.is_none() {
            self.start(heard + deadline, number);
        }
    }

    /// The soonest deadline if the watermark has passed it, removed.
    fn pop_passed(&mut self, watermark: i64) -> Option<(i64, Arc<str>)> {
        if self.due.first().is_some_and(|(at, _)| *at < watermark) {
            let (at, number) = self.due.pop_first()?;
            Some((at, self.names[number as usize].clone()))
        } else {
            None
        }
    }
}

impl ClusterView {
    /// `node`'s agent left on purpose: its heartbeat timer stops without a
    /// failure, and it no longer counts for the cluster's clock. A
    /// heartbeat later watches it again.
    pub(super) fn depart(&mut self, node: &str, config: &DetectorConfig) {
        if let Some(view) = self.nodes.get_mut(node)
            && let Some(heard) = view.heard_ms.take()
            && view.lost_at_ms.is_none()
            && let Some(number) = view.timer
        {
            self.deadlines
                .stop(heard + ms(config.heartbeat_deadline_s), number);
        }
        self.forget(node, config);
    }

    /// Stops counting `node` for the clock. The clock may jump forward:
    /// while `node` was silent it held the clock back (`ClusterClock`), and
    /// the deadlines of nodes heard meanwhile were set against that
    /// trailing clock; each moves to where it would be had the clock not
    /// trailed (the node's own heartbeat time, at most the new clock), or a
    /// node heard a moment ago would be found lost at the jump.
    fn forget(&mut self, node: &str, config: &DetectorConfig) {
        let before = self.clock.now();
        self.clock.forget(node, config);
        let (Some(before), Some(after)) = (before, self.clock.now()) else {
            return;
        };
        if after <= before {
            return;
        }
        let deadline = ms(config.heartbeat_deadline_s);
        for view in self.nodes.values_mut() {
            let (Some(heard), Some(last), None, Some(number)) = (
                view.heard_ms,
                view.last_heartbeat_ms,
                view.lost_at_ms,
                view.timer,
            ) else {
                continue;
            };
            let rebased = last.min(after);
            if rebased > heard {
                self.deadlines.stop(heard + deadline, number);
                self.deadlines.start(rebased + deadline, number);
                view.heard_ms = Some(rebased);
            }
        }
    }

    /// Marks `node` reported lost at `at`: its heartbeat timer stops.
    pub(super) fn mark_lost(&mut self, node: &str, at: i64, config: &DetectorConfig) {
        if let Some(view) = self.nodes.get_mut(node) {
            if let (Some(last), None, Some(number)) = (view.heard_ms, view.lost_at_ms, view.timer) {
                self.deadlines
                    .stop(last + ms(config.heartbeat_deadline_s), number);
            }
            view.lost_at_ms = Some(view.lost_at_ms.map_or(at, |t| t.max(at)));
        }
        // A lost node's last time no longer counts as a clock that runs
        // behind: with it, two silent nodes of three would hold the clock
        // back by max_clock_skew_s and hide the second loss that long.
        self.forget(node, config);
    }
}

/// Whether a timer of `view` is pending: a heartbeat deadline, held
/// symptoms (a correlation window) or a job's hang.
pub(super) fn pending(view: &ClusterView, config: &DetectorConfig) -> bool {
    !view.deadlines.is_empty()
        || view.correlator.holds_any()
        || view
            .jobs
            .values()
            .any(|j| j.hang_deadline_ms(config).is_some())
}

/// The heartbeat and hang timers of `view` the silence watermark
/// ([`silence_watermark`]) has passed, in deadline order.
pub(super) fn due(
    view: &mut ClusterView,
    watermark: i64,
    config: &DetectorConfig,
) -> Vec<Candidate> {
    let mut due = lost_nodes(view, watermark);
    hung_jobs(view, watermark, config, &mut due);
    due.sort_by_key(|(at, _)| *at);
    due.into_iter().map(|(_, c)| c).collect()
}

/// How far silence timers may go: the watermark, but no further than the
/// newest time a node reported (less the lateness), so a node is silent only
/// next to one that is heard; when every node is silent, idle ticks carry
/// it on `all_silent_grace_s` behind the watermark; and just after such a
/// spell, no further than its start (`ClusterClock::recovering`).
pub(super) fn silence_watermark(
    view: &ClusterView,
    watermark: i64,
    config: &DetectorConfig,
) -> i64 {
    let Some(heard) = view.clock.newest_reported() else {
        return watermark - ms(config.all_silent_grace_s);
    };
    let judged = watermark
        .min(heard - ms(config.allowed_lateness_s))
        .max(watermark - ms(config.all_silent_grace_s));
    match view.clock.recovering(config) {
        // Nodes are heard again after every one was silent: silence that
        // began in the spell waits until they have been heard a while.
        Some(before) => judged.min(before),
        None => judged,
    }
}

/// Heartbeat loss: pops the deadlines the watermark has passed.
fn lost_nodes(view: &mut ClusterView, watermark: i64) -> Vec<(i64, Candidate)> {
    let mut due = Vec::new();
    while let Some((at, name)) = view.deadlines.pop_passed(watermark) {
        let Some(node) = view.nodes.get_mut(&*name) else {
            continue;
        };
        node.lost_at_ms = Some(at);
        due.push((
            at,
            Candidate {
                kind: FailureKind::LostConnection,
                severity: Severity::Sev1,
                method: DetectionMethod::Heartbeat,
                rule: Some("heartbeat.deadline".into()),
                node: Some(name.to_string()),
                gpu: None,
                job: node.job.clone(),
                rank: None,
                time_ms: node.last_heartbeat_ms.unwrap_or(at),
                evidence: node.heartbeat_evidence.iter().cloned().collect(),
                slowdown: None,
            },
        ));
    }
    // Deadlines that tie fire in name order, whatever order the nodes
    // were first heard in.
    due.sort_by(|(a, x), (b, y)| (a, &x.node).cmp(&(b, &y.node)));
    due
}

/// No progress for hang_factor × the mean iteration time. `due` holds the
/// nodes lost by this watermark.
fn hung_jobs(
    view: &mut ClusterView,
    watermark: i64,
    config: &DetectorConfig,
    due: &mut Vec<(i64, Candidate)>,
) {
    for (job, progress) in view.jobs.iter_mut() {
        let Some(at) = progress.hang_deadline_ms(config) else {
            continue;
        };
        if at >= watermark {
            continue;
        }
        // Timers that fire together (after a hold, or a sparse feed)
        // act in deadline order, as they would one at a time: a node of
        // the job lost before its hang deadline explains the stall.
        if let Some((_, lost)) = due
            .iter()
            .find(|(lost_at, c)| *lost_at < at && c.job.as_deref() == Some(job.as_str()))
        {
            progress.stall_reported_ms = Some(lost.time_ms);
            continue;
        }
        progress.stall_reported_ms = Some(at);
        due.push((
            at,
            Candidate {
                kind: FailureKind::TaskHang,
                severity: Severity::Sev2,
                method: DetectionMethod::Statistical,
                rule: Some("progress.stalled".into()),
                node: progress.laggard().map(str::to_string),
                gpu: None,
                job: Some(job.clone()),
                rank: None,
                time_ms: progress.last_progress_ms.unwrap_or(at),
                evidence: Vec::new(),
                slowdown: None,
            },
        ));
    }
}
