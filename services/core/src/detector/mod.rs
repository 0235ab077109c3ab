//! The detector: telemetry, logs and agent events in; classified, correlated
//! failure events out. Pure and event-time driven: the clock of a cluster is
//! the event time its nodes have reached (robust to one node's clock running
//! ahead, see [`ClusterView::clock`]), the watermark trails it by the allowed
//! lateness, and every timer (heartbeat deadline, correlation window, hang)
//! fires off the watermark. Idle ticks ([`AgentEventKind::Idle`]) move the
//! clock of a cluster whose inputs went quiet.
//!
//! The four detection methods (see docs/detector.md) plus correlation:
//! log rules ([`rules`]), metric rules ([`metric_rules`]), heartbeat loss and
//! process supervision (here), statistical monitoring ([`progress`]), and
//! [`correlate`].

pub mod config;
pub mod correlate;
pub mod metric_rules;
pub mod progress;
pub mod rules;

use std::collections::{BTreeMap, BTreeSet};

use crate::records::{
    AgentEvent, AgentEventKind, DetectionMethod, Evidence, FailureEvent, LogRecord, TelemetryBatch,
};
use crate::taxonomy::{FailureKind, Severity};

use config::ms;
pub use config::{CounterRule, DetectorConfig, GaugeRule};
use correlate::{Candidate, Correlator, Group, Offer};
use metric_rules::MetricState;
use progress::{IterationDone, JobProgress, ProgressSignal};
pub use rules::{Classified, LogRules, RulesError};

/// 2000-01-01T00:00:00Z: nothing a running cluster reports is older.
pub const MIN_EVENT_MS: i64 = 946_684_800_000;
/// 2100-01-01T00:00:00Z: nothing is newer.
pub const MAX_EVENT_MS: i64 = 4_102_444_800_000;

/// Where an observation came from; `index` numbers the observations one
/// external record expands into, so failure ids stay unique.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub index: u32,
}

/// One thing the detector observes.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    Log(LogRecord),
    Telemetry(TelemetryBatch),
    Agent(AgentEvent),
}

impl Observation {
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
}

/// One input: an observation and its source record.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectorInput {
    pub source: Source,
    pub observation: Observation,
    /// The consumer had nothing newer on this record's partition. A
    /// partition that is behind holds the timers' watermark back to its own
    /// newest event time; a caught-up one does not (it may be silent because
    /// its nodes died). Feeds that deliver in order pass `true`.
    pub caught_up: bool,
}

/// What the detector produces for one input.
#[derive(Debug, Clone, PartialEq)]
pub enum DetectorOutput {
    Failure(FailureEvent),
    /// The input (or part of it) is unusable; dead-letter it with this reason.
    Rejected(String),
}

/// Counters an operator wants; the service exports them as metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DetectorStats {
    pub failures: u64,
    /// Candidates that became evidence of an event already emitted.
    pub absorbed: u64,
    pub rejected: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct NodeView {
    last_heartbeat_ms: Option<i64>,
    /// The cluster's clock when that heartbeat was applied: deadlines run
    /// from here, so a node whose own clock runs slow is not silent.
    heard_ms: Option<i64>,
    heartbeat_evidence: Option<Evidence>,
    /// Reported lost; cleared by a heartbeat newer than the report.
    lost_at_ms: Option<i64>,
    /// The job this node last reported, to fill in logs that name none.
    job: Option<String>,
}

/// How far one source partition has been read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct PartitionClock {
    newest_ms: Option<i64>,
    /// The consumer has unread records on it.
    behind: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct ClusterView {
    /// The cluster's clock: never goes back.
    newest_ms: Option<i64>,
    /// Newest event time per reporting node, and the same ranked, for
    /// [`ClusterView::clock`].
    node_times: BTreeMap<String, i64>,
    ranked: BTreeSet<(i64, String)>,
    /// Partitions (by topic) that carried this cluster's records.
    sources: BTreeMap<String, BTreeSet<i32>>,
    nodes: BTreeMap<String, NodeView>,
    /// (heartbeat deadline, node) of every watched node, soonest first: the
    /// timers fire by popping the front, not by scanning every node.
    deadlines: BTreeSet<(i64, String)>,
    jobs: BTreeMap<String, JobProgress>,
    job_nodes: BTreeMap<String, BTreeSet<String>>,
    correlator: Correlator,
    metrics: MetricState,
}

/// The detector of every cluster it has seen.
#[derive(Debug)]
pub struct Detector {
    config: DetectorConfig,
    rules: LogRules,
    clusters: BTreeMap<String, ClusterView>,
    /// Per topic and partition: the newest event time read and whether the
    /// consumer has caught up with it.
    clocks: BTreeMap<String, BTreeMap<i32, PartitionClock>>,
    /// How many clocks are behind; none (in-order feeds, a consumer that
    /// keeps up) spares the timers the scan of a cluster's partitions.
    behind: usize,
    /// Silence is no evidence right now (the service lost its broker):
    /// heartbeat and hang timers wait; see [`Detector::hold_silence_timers`].
    silence_timers_held: bool,
    stats: DetectorStats,
}

impl Detector {
    pub fn new(config: DetectorConfig, rules: LogRules) -> Detector {
        Detector {
            config,
            rules,
            clusters: BTreeMap::new(),
            clocks: BTreeMap::new(),
            behind: 0,
            silence_timers_held: false,
            stats: DetectorStats::default(),
        }
    }

    /// Holds (or releases) the timers that read silence as failure: heartbeat
    /// deadlines and job hangs. While the service cannot read from its broker,
    /// or shortly after, when producers are still flushing what they queued
    /// during the outage, partitions catch up in no particular order and a
    /// node can look silent only because its records are not in yet; an
    /// outage of the pipeline must not isolate nodes. Records are still
    /// applied while held (a heartbeat moves its node's deadline), and
    /// evidence-based detection (log rules, metric thresholds, correlation)
    /// goes on. On release the next input fires whatever the watermark has
    /// passed, so a node that really died in the outage is still reported.
    /// The service decides when (it knows about connections); the core only
    /// obeys, so the same inputs and holds give the same outputs.
    pub fn hold_silence_timers(&mut self, held: bool) {
        self.silence_timers_held = held;
    }

    /// Whether silence timers are held.
    pub fn silence_timers_held(&self) -> bool {
        self.silence_timers_held
    }

    /// Forgets everything learnt from the stream (after a rebalance, when
    /// this instance may no longer read some nodes); rules and config stay.
    pub fn reset(&mut self) {
        self.clusters.clear();
        self.clocks.clear();
        self.behind = 0;
    }

    pub fn config(&self) -> &DetectorConfig {
        &self.config
    }

    pub fn rules(&self) -> &LogRules {
        &self.rules
    }

    pub fn stats(&self) -> DetectorStats {
        self.stats
    }

    /// Partitions whose latest record was read while more were known to be
    /// on them: they hold the watermark back.
    pub fn behind_partitions(&self) -> Vec<(String, i32)> {
        if self.behind == 0 {
            return Vec::new();
        }
        self.clocks
            .iter()
            .flat_map(|(topic, partitions)| {
                partitions
                    .iter()
                    .filter(|(_, clock)| clock.behind)
                    .map(move |(p, _)| (topic.clone(), *p))
            })
            .collect()
    }

    /// The service found `partition` read to its end after all (its
    /// latest record looked behind when read, and nothing followed): it no
    /// longer holds the watermark back. Only the live service knows this;
    /// replay reads every partition to its end anyway.
    pub fn mark_caught_up(&mut self, topic: &str, partition: i32) {
        if let Some(clock) = self
            .clocks
            .get_mut(topic)
            .and_then(|c| c.get_mut(&partition))
            && clock.behind
        {
            clock.behind = false;
            self.behind -= 1;
        }
    }

    /// The clusters that wait on an idle tick, with their clocks: a timer
    /// is pending (a heartbeat deadline, held symptoms, a job's hang) and
    /// every partition that carried the cluster's records has been read to
    /// its end. A cluster still being caught up on gets no tick: its own
    /// records will move its clock.
    pub fn idle_candidates(&self) -> Vec<(String, i64)> {
        self.clusters
            .iter()
            .filter(|(_, view)| {
                !view.deadlines.is_empty()
                    || view.correlator.holds_any()
                    || view
                        .jobs
                        .values()
                        .any(|j| j.hang_deadline_ms(&self.config).is_some())
            })
            .filter(|(_, view)| {
                view.sources.iter().all(|(topic, partitions)| {
                    partitions.iter().all(|p| {
                        !self
                            .clocks
                            .get(topic)
                            .and_then(|c| c.get(p))
                            .is_some_and(|clock| clock.behind)
                    })
                })
            })
            .filter_map(|(name, view)| Some((name.clone(), view.newest_ms?)))
            .collect()
    }

    /// Applies one input; returns the failures it completes, in order.
    pub fn apply(&mut self, input: &DetectorInput) -> Vec<DetectorOutput> {
        let mut outputs = Vec::new();
        let obs = &input.observation;
        if obs.cluster().is_empty() || obs.node().is_empty() {
            self.stats.rejected += 1;
            return vec![DetectorOutput::Rejected(
                "record names no cluster or no node".into(),
            )];
        }
        let view = self.clusters.entry(obs.cluster().to_string()).or_default();
        let mut rejected = Vec::new();
        let mut candidates = Vec::new();
        let mut accepted_ms: Option<i64> = None;
        match obs {
            Observation::Log(record) => {
                if let Err(reason) = check_time(view.newest_ms, record.time_ms, &self.config) {
                    rejected.push(reason);
                } else {
                    view.advance(&record.node, record.time_ms, &self.config);
                    accepted_ms = accepted_ms.max(Some(record.time_ms));
                    candidates.extend(classify_log(
                        &self.rules,
                        &self.config,
                        view,
                        record,
                        &input.source,
                    ));
                }
            }
            Observation::Telemetry(batch) => {
                for sample in &batch.samples {
                    if let Err(reason) = check_time(view.newest_ms, sample.time_ms, &self.config) {
                        rejected.push(format!("sample `{}`: {reason}", sample.name));
                        continue;
                    }
                    match view
                        .metrics
                        .observe(&self.config, &self.rules, &batch.node, sample)
                    {
                        Ok(found) => {
                            view.advance(&batch.node, sample.time_ms, &self.config);
                            accepted_ms = accepted_ms.max(Some(sample.time_ms));
                            for (kind, rule) in found {
                                let job = sample.job.clone().or_else(|| {
                                    view.nodes.get(&batch.node).and_then(|n| n.job.clone())
                                });
                                candidates.push(Candidate {
                                    kind,
                                    severity: kind.default_severity(),
                                    method: DetectionMethod::MetricRule,
                                    rule: Some(rule),
                                    node: Some(batch.node.clone()),
                                    gpu: sample.gpu,
                                    job,
                                    rank: sample.rank,
                                    time_ms: sample.time_ms,
                                    evidence: vec![evidence(
                                        &input.source,
                                        &batch.node,
                                        &format!(
                                            "{}{} = {}",
                                            sample.name,
                                            label_text(sample),
                                            sample.value
                                        ),
                                        self.config.excerpt_bytes,
                                    )],
                                });
                            }
                        }
                        Err(reason) => rejected.push(format!("sample `{}`: {reason}", sample.name)),
                    }
                }
            }
            Observation::Agent(event) if event.idle_tick => {
                // Not a node's report: only the clock moves.
                if let Err(reason) = check_time(view.newest_ms, event.time_ms, &self.config) {
                    rejected.push(reason);
                } else {
                    view.newest_ms = view.newest_ms.max(Some(event.time_ms));
                }
            }
            Observation::Agent(event) => {
                if let Err(reason) = check_time(view.newest_ms, event.time_ms, &self.config) {
                    rejected.push(reason);
                } else if let Err(reason) = validate_agent(event) {
                    rejected.push(reason);
                } else {
                    view.advance(&event.node, event.time_ms, &self.config);
                    accepted_ms = accepted_ms.max(Some(event.time_ms));
                    candidates.extend(on_agent(&self.config, view, event, &input.source));
                }
            }
        }
        let Source {
            topic, partition, ..
        } = &input.source;
        // An idle tick says nothing about the partition it sits on: the
        // detector that wrote it applies it at once, before reading it back.
        let tick = matches!(obs, Observation::Agent(e) if e.idle_tick);
        if !tick
            && !view
                .sources
                .get(topic)
                .is_some_and(|p| p.contains(partition))
        {
            view.sources
                .entry(topic.clone())
                .or_default()
                .insert(*partition);
        }
        if !tick {
            let clock = match self.clocks.get_mut(topic) {
                Some(partitions) => partitions.entry(*partition).or_default(),
                None => self
                    .clocks
                    .entry(topic.clone())
                    .or_default()
                    .entry(*partition)
                    .or_default(),
            };
            clock.newest_ms = clock.newest_ms.max(accepted_ms);
            match (clock.behind, input.caught_up) {
                (false, false) => self.behind += 1,
                (true, true) => self.behind -= 1,
                _ => {}
            }
            clock.behind = !input.caught_up;
        }
        for reason in rejected.iter().take(1) {
            self.stats.rejected += 1;
            let more = rejected.len() - 1;
            outputs.push(DetectorOutput::Rejected(if more > 0 {
                format!("{reason} (and {more} more)")
            } else {
                reason.clone()
            }));
        }
        let mut emitted = Vec::new();
        for c in candidates {
            self.offer(obs.cluster(), c, &mut emitted);
        }
        self.fire_timers(obs.cluster(), &mut emitted);
        let view = self.clusters.get_mut(obs.cluster()).expect("created above");
        let detected_ms = view.newest_ms.unwrap_or(0);
        for (n, (candidate, severity)) in emitted.into_iter().enumerate() {
            self.stats.failures += 1;
            let Source {
                topic,
                partition,
                offset,
                index,
            } = &input.source;
            outputs.push(DetectorOutput::Failure(FailureEvent {
                id: format!(
                    "f:{}:{topic}:{partition}:{offset}:{index}:{n}",
                    obs.cluster()
                ),
                cluster: obs.cluster().to_string(),
                node: candidate.node,
                gpu: candidate.gpu,
                job: candidate.job,
                rank: candidate.rank,
                kind: candidate.kind,
                severity,
                method: candidate.method,
                rule: candidate.rule,
                evidence: candidate.evidence,
                first_evidence_ms: candidate.time_ms,
                detected_ms: detected_ms.max(candidate.time_ms),
            }));
        }
        outputs
    }

    fn offer(&mut self, cluster: &str, c: Candidate, emitted: &mut Vec<(Candidate, Severity)>) {
        let view = self.clusters.get_mut(cluster).expect("created by apply");
        match view.correlator.offer(c, &self.config) {
            Offer::Emit(c) => self.emit(cluster, c, emitted),
            Offer::Held => {}
            Offer::Absorbed => self.stats.absorbed += 1,
        }
    }

    /// Fires every timer the cluster's watermark has passed.
    fn fire_timers(&mut self, cluster: &str, emitted: &mut Vec<(Candidate, Severity)>) {
        let (config, clusters, clocks) = (&self.config, &mut self.clusters, &self.clocks);
        let view = clusters.get_mut(cluster).expect("created by apply");
        let Some(newest) = view.newest_ms else { return };
        let clocks = if self.behind > 0 { Some(clocks) } else { None };
        // The newest time every partition still being read has reached:
        // a node whose heartbeats sit unread in a lagging partition is not
        // silent, only behind.
        let behind = clocks.and_then(|clocks| {
            view.sources
                .iter()
                .filter_map(|(topic, partitions)| clocks.get(topic).map(|c| (c, partitions)))
                .flat_map(|(c, partitions)| partitions.iter().filter_map(|p| c.get(p)))
                .filter(|clock| clock.behind)
                .filter_map(|clock| clock.newest_ms)
                .min()
        });
        let watermark = behind.map_or(newest, |b| b.min(newest)) - ms(config.allowed_lateness_s);
        let mut due = Vec::new();
        let held = self.silence_timers_held;
        // Heartbeat loss: pop the deadlines the watermark has passed.
        while !held
            && view
                .deadlines
                .first()
                .is_some_and(|(at, _)| *at < watermark)
        {
            let (at, name) = view.deadlines.pop_first().expect("checked");
            let Some(node) = view.nodes.get_mut(&name) else {
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
                    node: Some(name),
                    gpu: None,
                    job: node.job.clone(),
                    rank: None,
                    time_ms: node.last_heartbeat_ms.unwrap_or(at),
                    evidence: node.heartbeat_evidence.iter().cloned().collect(),
                },
            ));
        }
        // No progress for hang_factor × the mean iteration time.
        for (job, progress) in view.jobs.iter_mut().filter(|_| !held) {
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
                },
            ));
        }
        due.sort_by_key(|(at, _)| *at);
        let groups = view.correlator.expired(watermark);
        for (_, c) in due {
            self.offer(cluster, c, emitted);
        }
        for group in groups {
            let c = self.resolve_group(cluster, group, newest);
            self.emit(cluster, c, emitted);
        }
        let (config, clusters) = (&self.config, &mut self.clusters);
        let view = clusters.get_mut(cluster).expect("created by apply");
        view.correlator.prune(watermark, config);
    }

    /// Emits a candidate (a root cause, or a resolved group, which is not
    /// held again): bounds its evidence, stops a lost node's heartbeat timer,
    /// and applies node escalation.
    fn emit(&mut self, cluster: &str, mut c: Candidate, emitted: &mut Vec<(Candidate, Severity)>) {
        let view = self.clusters.get_mut(cluster).expect("created by apply");
        c.evidence.truncate(self.config.max_evidence);
        if c.kind == FailureKind::LostConnection
            && let Some(node) = &c.node
        {
            view.mark_lost(node, c.time_ms, ms(self.config.heartbeat_deadline_s));
        }
        // The failure explains the job's stall: no hang on top of it until
        // the job completes an iteration after it.
        if let Some(progress) = c.job.as_ref().and_then(|job| view.jobs.get_mut(job)) {
            progress.stall_reported_ms = progress.stall_reported_ms.max(Some(c.time_ms));
        }
        let severity = view.correlator.emitted(&c, &self.config);
        emitted.push((c, severity));
    }

    /// One event for a group of symptoms: a silent peer of the job if there
    /// is one (the node that died and made every other rank time out), else
    /// the dominant symptom, on the one reporting node if there is only one.
    fn resolve_group(&self, cluster: &str, group: Group, newest: i64) -> Candidate {
        let view = &self.clusters[cluster];
        let first = group.members[0].clone();
        let evidence: Vec<Evidence> = group
            .members
            .iter()
            .flat_map(|m| m.evidence.clone())
            .collect();
        let reporters = group.reporters();
        if let Some(job) = &group.job {
            let silent: Vec<&String> = view
                .job_nodes
                .get(job)
                .into_iter()
                .flatten()
                .filter(|n| !reporters.contains(&n.as_str()))
                .filter(|n| {
                    view.nodes.get(*n).is_some_and(|v| {
                        // Silent against the watermark, as deadlines are:
                        // a heartbeat up to the lateness late still counts.
                        v.lost_at_ms.is_none()
                            && v.heard_ms.is_some_and(|t| {
                                t + ms(self.config.suspect_after_s)
                                    < newest - ms(self.config.allowed_lateness_s)
                            })
                    })
                })
                .collect();
            if silent.len() == 1 {
                let node = silent[0];
                return Candidate {
                    kind: FailureKind::LostConnection,
                    severity: Severity::Sev1,
                    method: DetectionMethod::Heartbeat,
                    rule: Some("correlation.silent_peer".into()),
                    node: Some(node.clone()),
                    gpu: None,
                    job: Some(job.clone()),
                    rank: None,
                    time_ms: first.time_ms,
                    evidence,
                };
            }
        }
        let kind = group.dominant_kind();
        let sample = group
            .members
            .iter()
            .find(|m| m.kind == kind)
            .unwrap_or(&first);
        let single = reporters.len() == 1;
        Candidate {
            kind,
            severity: sample.severity,
            method: sample.method,
            rule: sample.rule.clone(),
            node: if single { sample.node.clone() } else { None },
            gpu: if single { sample.gpu } else { None },
            job: group.job.clone(),
            rank: if group.members.len() == 1 {
                sample.rank
            } else {
                None
            },
            time_ms: group
                .members
                .iter()
                .map(|m| m.time_ms)
                .min()
                .unwrap_or(first.time_ms),
            evidence,
        }
    }
}

impl ClusterView {
    /// Records that `node` reported `time_ms` and moves the clock.
    fn advance(&mut self, node: &str, time_ms: i64, config: &DetectorConfig) {
        match self.node_times.get_mut(node) {
            Some(t) if *t >= time_ms => return,
            Some(t) => {
                self.ranked.remove(&(*t, node.to_string()));
                *t = time_ms;
            }
            None => {
                self.node_times.insert(node.to_string(), time_ms);
            }
        }
        self.ranked.insert((time_ms, node.to_string()));
        self.newest_ms = self.newest_ms.max(self.clock(config));
    }

    /// The event time the cluster has reached. With three or more nodes
    /// that is the second newest node's time, so one node whose clock runs
    /// ahead cannot make every other node look silent; but never more than
    /// `max_clock_skew_s` behind the newest, so a cluster in which one node
    /// survives still sees the others go silent.
    fn clock(&self, config: &DetectorConfig) -> Option<i64> {
        let mut newest_first = self.ranked.iter().rev().map(|(t, _)| *t);
        let newest = newest_first.next()?;
        if self.ranked.len() < 3 {
            return Some(newest);
        }
        let second = newest_first.next().unwrap_or(newest);
        Some(second.max(newest - ms(config.max_clock_skew_s)))
    }

    /// Marks `node` reported lost at `at`: its heartbeat timer stops.
    fn mark_lost(&mut self, node: &str, at: i64, deadline_ms: i64) {
        if let Some(view) = self.nodes.get_mut(node) {
            if let (Some(last), None) = (view.heard_ms, view.lost_at_ms) {
                self.deadlines
                    .remove(&(last + deadline_ms, node.to_string()));
            }
            view.lost_at_ms = Some(view.lost_at_ms.map_or(at, |t| t.max(at)));
        }
    }
}

fn check_time(newest: Option<i64>, time_ms: i64, config: &DetectorConfig) -> Result<(), String> {
    if !(MIN_EVENT_MS..=MAX_EVENT_MS).contains(&time_ms) {
        return Err(format!("event time {time_ms} ms is outside 2000..2100"));
    }
    if let Some(newest) = newest
        && time_ms > newest + ms(config.max_future_skew_s)
    {
        return Err(format!(
            "event time {time_ms} ms is {} s ahead of the cluster's newest record",
            (time_ms - newest) / 1000
        ));
    }
    Ok(())
}

fn validate_agent(event: &AgentEvent) -> Result<(), String> {
    if let Some(t) = event.iteration_time_ms
        && !(t.is_finite() && t >= 0.0)
    {
        return Err(format!(
            "iteration_time_ms: {t} is not a finite non-negative number"
        ));
    }
    Ok(())
}

fn classify_log(
    rules: &LogRules,
    config: &DetectorConfig,
    view: &mut ClusterView,
    record: &LogRecord,
    source: &Source,
) -> Option<Candidate> {
    let found = rules.classify(&record.line)?;
    let job = record
        .job
        .clone()
        .or_else(|| view.nodes.get(&record.node).and_then(|n| n.job.clone()));
    if let Some(job) = &job {
        view.job_nodes
            .entry(job.clone())
            .or_default()
            .insert(record.node.clone());
    }
    Some(Candidate {
        kind: found.kind,
        severity: found.severity,
        method: DetectionMethod::LogRule,
        rule: Some(found.rule),
        node: Some(found.node.unwrap_or_else(|| record.node.clone())),
        gpu: record.gpu.or(found.gpu),
        job,
        rank: record.rank.or(found.rank),
        time_ms: record.time_ms,
        evidence: vec![evidence(
            source,
            &record.node,
            &record.line,
            config.excerpt_bytes,
        )],
    })
}

fn on_agent(
    config: &DetectorConfig,
    view: &mut ClusterView,
    event: &AgentEvent,
    source: &Source,
) -> Vec<Candidate> {
    let node = view.nodes.entry(event.node.clone()).or_default();
    if let Some(job) = &event.job {
        node.job = Some(job.clone());
        view.job_nodes
            .entry(job.clone())
            .or_default()
            .insert(event.node.clone());
    }
    match event.kind {
        AgentEventKind::Heartbeat => {
            if node.last_heartbeat_ms.is_none_or(|t| event.time_ms > t) {
                let deadline = ms(config.heartbeat_deadline_s);
                if let (Some(heard), None) = (node.heard_ms, node.lost_at_ms) {
                    view.deadlines
                        .remove(&(heard + deadline, event.node.clone()));
                }
                // Applied after the clock moved, so never behind the event.
                let heard = view.newest_ms.unwrap_or(event.time_ms);
                node.last_heartbeat_ms = Some(event.time_ms);
                node.heard_ms = Some(heard);
                node.heartbeat_evidence = Some(evidence(
                    source,
                    &event.node,
                    "last heartbeat",
                    config.excerpt_bytes,
                ));
                // A node heard from after it was reported lost is back.
                if node.lost_at_ms.is_some_and(|lost| event.time_ms > lost) {
                    node.lost_at_ms = None;
                }
                if node.lost_at_ms.is_none() {
                    view.deadlines
                        .insert((heard + deadline, event.node.clone()));
                }
            }
            Vec::new()
        }
        AgentEventKind::ProcessExit => {
            let code = event.exit_code.unwrap_or(0);
            let clean_signal = event
                .signal
                .is_some_and(|s| config.clean_signals.contains(&s))
                || config.clean_signals.iter().any(|s| code == 128 + s);
            if (code == 0 && event.signal.is_none()) || clean_signal {
                if let Some(job) = &event.job {
                    view.jobs.remove(job); // finished or stopped on purpose
                }
                return Vec::new();
            }
            let what = match (event.exit_code, event.signal) {
                (_, Some(signal)) => format!("process exited on signal {signal}"),
                (Some(code), None) => format!("process exited with code {code}"),
                (None, None) => "process exited".to_string(),
            };
            vec![Candidate {
                kind: FailureKind::ExitedAbnormally,
                severity: Severity::Sev2,
                method: DetectionMethod::ProcessSupervision,
                rule: Some("process.exit".into()),
                node: Some(event.node.clone()),
                gpu: None,
                job: event.job.clone(),
                rank: event.rank,
                time_ms: event.time_ms,
                evidence: vec![evidence(source, &event.node, &what, config.excerpt_bytes)],
            }]
        }
        AgentEventKind::IterationDone => {
            let Some(job) = &event.job else {
                return Vec::new();
            };
            let progress = view.jobs.entry(job.clone()).or_default();
            let signals = progress.iteration(
                &IterationDone {
                    rank: event.rank,
                    node: &event.node,
                    iteration: event.iteration,
                    time_ms: event.iteration_time_ms,
                    event_ms: event.time_ms,
                },
                config,
            );
            signals
                .into_iter()
                .map(|signal| {
                    let (kind, node, rule, text) = match signal {
                        ProgressSignal::SlowIteration { time_ms, mean_ms } => (
                            FailureKind::TaskHang,
                            None,
                            "progress.slow_iteration",
                            format!("iteration took {time_ms:.0} ms, mean {mean_ms:.0} ms"),
                        ),
                        ProgressSignal::Straggler {
                            node,
                            mean_ms,
                            median_ms,
                        } => (
                            FailureKind::Straggler,
                            Some(node),
                            "progress.straggler",
                            format!("rank mean {mean_ms:.0} ms against median {median_ms:.0} ms"),
                        ),
                    };
                    Candidate {
                        kind,
                        severity: kind.default_severity(),
                        method: DetectionMethod::Statistical,
                        rule: Some(rule.into()),
                        rank: if node.is_some() { event.rank } else { None },
                        node,
                        gpu: None,
                        job: Some(job.clone()),
                        time_ms: event.time_ms,
                        evidence: vec![evidence(source, &event.node, &text, config.excerpt_bytes)],
                    }
                })
                .collect()
        }
        AgentEventKind::Unknown => Vec::new(),
    }
}

fn label_text(sample: &crate::records::MetricSample) -> String {
    if sample.labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = sample
        .labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// Evidence for a source record with an excerpt cut at a char boundary.
pub fn evidence(source: &Source, node: &str, text: &str, limit: usize) -> Evidence {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Evidence {
        topic: source.topic.clone(),
        partition: source.partition,
        offset: source.offset,
        node: Some(node.to_string()),
        excerpt: text[..end].to_string(),
    }
}
