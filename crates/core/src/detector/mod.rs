//! The detector: telemetry, logs and agent events in; classified, correlated
//! failure events out. Pure and event-time driven: the clock of a cluster is
//! the event time its nodes have reached (robust to one node's clock running
//! ahead, see `clock`), the watermark trails it by the allowed
//! lateness, and every timer (heartbeat deadline, correlation window, hang)
//! fires off the watermark. Idle ticks ([`AgentEvent::idle_tick`]) move the
//! clock of a cluster whose inputs went quiet.
//!
//! The four detection methods (see docs/detector.md) plus correlation:
//! log rules ([`rules`]), metric rules ([`metric_rules`]), heartbeat loss
//! (`timers`) and process supervision (`observe`), statistical monitoring
//! ([`progress`]), and [`correlate`]. Here an input is applied step by
//! step: observed, its source's clock moved, candidates offered, timers
//! fired.

mod clock;
pub mod config;
pub mod correlate;
pub mod learned;
pub mod markers;
pub mod metric_rules;
mod observation;
mod observe;
pub mod progress;
mod round;
pub mod rules;
pub mod templates;
mod timers;

use std::collections::{BTreeMap, BTreeSet};

use crate::records::{DetectionMethod, Evidence, FailureEvent};
use crate::taxonomy::{FailureKind, Severity};

use clock::{ClusterClock, SourceClocks};
pub use clock::{MAX_EVENT_MS, MIN_EVENT_MS};
use config::ms;
pub use config::{CounterRule, DetectorConfig, GaugeRule};
use correlate::{Candidate, Correlator, Group, Offer};
use metric_rules::MetricState;
pub use observation::Observation;
use progress::JobProgress;
pub use round::{IDLE_TICK_NODE, ROUND_UNCLASSIFIED, RoundOutput};
pub use rules::{Classified, Explanation, LogRules, RulesError};
use timers::HeartbeatDeadlines;

/// Where an observation came from; `index` numbers the observations one
/// external record expands into, so failure ids stay unique.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub index: u32,
}

/// One input: an observation and its source record.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectorInput {
    pub source: SourceRecord,
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
    /// The node's number among the cluster's heartbeat deadlines; set by
    /// its first heartbeat.
    timer: Option<u32>,
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

#[derive(Debug, Clone, Default, PartialEq)]
struct ClusterView {
    clock: ClusterClock,
    /// Partitions (by topic) that carried this cluster's records.
    sources: BTreeMap<String, BTreeSet<i32>>,
    nodes: BTreeMap<String, NodeView>,
    deadlines: HeartbeatDeadlines,
    jobs: BTreeMap<String, JobProgress>,
    job_nodes: BTreeMap<String, BTreeSet<String>>,
    correlator: Correlator,
    metrics: MetricState,
    /// This round's unclassified error lines ([`Detector::take_unclassified`]).
    unclassified: templates::RoundTemplates,
}

/// The detector of every cluster it has seen.
#[derive(Debug)]
pub struct Detector {
    config: DetectorConfig,
    rules: LogRules,
    clusters: BTreeMap<String, ClusterView>,
    clocks: SourceClocks,
    /// Silence is no evidence right now (the service lost its broker):
    /// heartbeat and hang timers wait; see [`Detector::hold_silence_timers`].
    silence_timers_held: bool,
    /// The latest round's read time ([`crate::DetectorRound::read_ms`]).
    read_ms: i64,
    stats: DetectorStats,
}

impl Detector {
    pub fn new(config: DetectorConfig, rules: LogRules) -> Detector {
        Detector {
            config,
            rules,
            clusters: BTreeMap::new(),
            clocks: SourceClocks::default(),
            silence_timers_held: false,
            read_ms: 0,
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
        self.clocks.behind_partitions()
    }

    /// How far the input partition furthest behind trails the newest in
    /// event time (see the service's lag guard), ms.
    pub fn partition_delay_ms(&self) -> i64 {
        self.clocks.delay_ms()
    }

    /// The service found `partition` read to its end after all (its
    /// latest record looked behind when read, and nothing followed): it no
    /// longer holds the watermark back. Only the live service knows this;
    /// replay reads every partition to its end anyway.
    pub fn mark_caught_up(&mut self, topic: &str, partition: i32) {
        self.clocks.mark_caught_up(topic, partition);
    }

    /// The service found `partition` to have unread records, or could not
    /// confirm where it ends, after the newest record read from it looked
    /// like its end: a partition the consumer has fallen behind on holds
    /// the watermark back, so nodes whose heartbeats wait there are not
    /// silent. Recorded in the round.
    pub fn mark_behind(&mut self, topic: &str, partition: i32) {
        self.clocks.mark_behind(topic, partition);
    }

    /// Whether a partition holds the watermark back (`None`: never read).
    pub fn partition_behind(&self, topic: &str, partition: i32) -> Option<bool> {
        self.clocks.is_behind(topic, partition)
    }

    /// The clusters that wait on an idle tick, with their clocks: a timer
    /// is pending (a heartbeat deadline, held symptoms, a job's hang) and
    /// every partition that carried the cluster's records has been read to
    /// its end. A cluster still being caught up on gets no tick: its own
    /// records will move its clock.
    pub fn idle_candidates(&self) -> Vec<(String, i64)> {
        self.clusters
            .iter()
            .filter(|(_, view)| timers::pending(view, &self.config))
            .filter(|(_, view)| self.clocks.all_read(&view.sources))
            .filter_map(|(name, view)| Some((name.clone(), view.clock.now()?)))
            .collect()
    }

    /// Applies one input; returns the failures it completes, in order.
    pub fn apply(&mut self, input: &DetectorInput) -> Vec<DetectorOutput> {
        let obs = &input.observation;
        if obs.cluster().is_empty() || obs.node().is_empty() {
            self.stats.rejected += 1;
            return vec![DetectorOutput::Rejected(
                "record names no cluster or no node".into(),
            )];
        }
        // Looked up before inserting: a known cluster costs no allocation.
        if !self.clusters.contains_key(obs.cluster()) {
            self.clusters
                .insert(obs.cluster().to_string(), ClusterView::default());
        }
        let view = self
            .clusters
            .get_mut(obs.cluster())
            .expect("inserted above");
        let observed = observe::observe(&self.config, &self.rules, view, input);
        // An idle tick says nothing about the partition it sits on: the
        // detector that wrote it applies it at once, before reading it back.
        if !matches!(obs, Observation::Agent(e) if e.idle_tick) {
            view.note_source(&input.source);
            self.clocks
                .read(&input.source, observed.accepted_ms, input.caught_up);
        }
        let mut outputs = Vec::new();
        if let Some(rejection) = rejection(&observed.rejected) {
            self.stats.rejected += 1;
            outputs.push(rejection);
        }
        let mut pass = ClusterPass {
            config: &self.config,
            read_ms: self.read_ms,
            view,
            stats: &mut self.stats,
            emitted: Vec::new(),
        };
        for c in observed.candidates {
            pass.offer(c);
        }
        if let Some(newest) = pass.view.clock.now() {
            let watermark = self
                .clocks
                .watermark(newest, &pass.view.sources, &self.config);
            pass.fire_timers(watermark, self.silence_timers_held);
        }
        let emitted = std::mem::take(&mut pass.emitted);
        let detected_ms = pass.view.clock.now().unwrap_or(0);
        for (candidate, severity) in emitted {
            self.stats.failures += 1;
            outputs.push(DetectorOutput::Failure(failure_event(
                obs.cluster(),
                candidate,
                severity,
                detected_ms,
            )));
        }
        outputs
    }
}

/// One output for the unusable parts of an input, naming the first.
fn rejection(rejected: &[String]) -> Option<DetectorOutput> {
    let (first, rest) = rejected.split_first()?;
    Some(DetectorOutput::Rejected(if rest.is_empty() {
        first.clone()
    } else {
        format!("{first} (and {} more)", rest.len())
    }))
}

/// The failure a candidate makes. Its id is derived from what was found,
/// never from the record that happened to complete it, so the same failure
/// gets the same id whatever order partitions were read in and however
/// often a record is redelivered (the planner drops the repeat).
fn failure_event(
    cluster: &str,
    candidate: Candidate,
    severity: Severity,
    detected_ms: i64,
) -> FailureEvent {
    let mut f = FailureEvent {
        id: String::new(),
        cluster: cluster.to_string(),
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
        slowdown: candidate.slowdown,
    };
    f.id = failure_id(&f);
    f
}

/// `f:{cluster}:{kind}:{node}:{first evidence ms}:{digest}`, the digest
/// covering the rest of what identifies the failure (job, rank, GPU,
/// severity, method, rule). Readable in a log line, stable across
/// versions of Rust (sha256, not the std hasher).
pub fn failure_id(f: &FailureEvent) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in [
        f.job.as_deref().unwrap_or("-"),
        &f.rank.map_or("-".into(), |r| r.to_string()),
        &f.gpu.map_or("-".into(), |g| g.to_string()),
        f.severity.symbol(),
        f.method.symbol(),
        f.rule.as_deref().unwrap_or("-"),
    ] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let digest: String = hash.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!(
        "f:{}:{}:{}:{}:{digest}",
        f.cluster,
        f.kind.symbol(),
        f.node.as_deref().unwrap_or("-"),
        f.first_evidence_ms
    )
}

impl ClusterView {
    /// Notes that `source`'s partition carries this cluster's records.
    fn note_source(&mut self, source: &SourceRecord) {
        let SourceRecord {
            topic, partition, ..
        } = source;
        if !self
            .sources
            .get(topic)
            .is_some_and(|p| p.contains(partition))
        {
            self.sources
                .entry(topic.clone())
                .or_default()
                .insert(*partition);
        }
    }
}

/// One cluster while an input is applied: candidates offered to its
/// correlator, its timers fired, and the failures that emits.
struct ClusterPass<'a> {
    config: &'a DetectorConfig,
    read_ms: i64,
    view: &'a mut ClusterView,
    stats: &'a mut DetectorStats,
    emitted: Vec<(Candidate, Severity)>,
}

impl ClusterPass<'_> {
    fn offer(&mut self, c: Candidate) {
        match self.view.correlator.offer(c, self.read_ms, self.config) {
            Offer::Emit(c) => self.emit(c),
            Offer::Held => {}
            Offer::Absorbed => self.stats.absorbed += 1,
        }
    }

    /// Fires every timer `watermark` has passed (the heartbeat and hang
    /// timers unless `silence_held`).
    fn fire_timers(&mut self, watermark: i64, silence_held: bool) {
        // How far silence is evidence; `None` while held.
        let silence =
            (!silence_held).then(|| timers::silence_watermark(self.view, watermark, self.config));
        let due = match silence {
            Some(silence) => timers::due(self.view, silence, self.config),
            None => Vec::new(),
        };
        // A job's hang with its symptoms still settling: the symptoms are
        // the verdict, and the hang is not reported on top of them.
        let hung: BTreeSet<&str> = due
            .iter()
            .filter(|c| c.kind == FailureKind::TaskHang)
            .filter_map(|c| c.job.as_deref())
            .collect();
        let explained = if hung.is_empty() {
            Vec::new()
        } else {
            self.view.correlator.take_settling(&hung, watermark)
        };
        let explained_jobs: BTreeSet<String> =
            explained.iter().filter_map(|g| g.job.clone()).collect();
        for group in explained {
            let c = self.resolve_group(group, silence);
            self.emit(c);
        }
        let groups = self
            .view
            .correlator
            .expired(watermark, self.read_ms, self.config);
        for c in due {
            if c.kind == FailureKind::TaskHang
                && c.job.as_ref().is_some_and(|j| explained_jobs.contains(j))
            {
                self.stats.absorbed += 1;
                continue;
            }
            self.offer(c);
        }
        for group in groups {
            let c = self.resolve_group(group, silence);
            self.emit(c);
        }
        self.view.correlator.prune(watermark, self.config);
    }

    /// Emits a candidate (a root cause, or a resolved group, which is not
    /// held again): bounds its evidence, stops a lost node's heartbeat timer,
    /// and applies node escalation.
    fn emit(&mut self, mut c: Candidate) {
        let view = &mut *self.view;
        c.evidence.truncate(self.config.max_evidence);
        if c.kind == FailureKind::LostConnection
            && let Some(node) = &c.node
        {
            view.mark_lost(node, c.time_ms, self.config);
        }
        // The failure explains the job's stall: no hang on top of it until
        // the job completes an iteration after it.
        if let Some(progress) = c.job.as_ref().and_then(|job| view.jobs.get_mut(job)) {
            progress.stall_reported_ms = progress.stall_reported_ms.max(Some(c.time_ms));
        }
        let severity = view.correlator.emitted(&c, self.config);
        self.emitted.push((c, severity));
    }

    /// One event for a group of symptoms: a silent peer of the job if there
    /// is one (the node that died and made every other rank time out), else
    /// the dominant symptom, on the one reporting node if there is only one.
    /// Silence is judged as the heartbeat timers judge it (`silence`, `None`
    /// while they are held): a peer whose heartbeats wait in a partition
    /// that is behind is not silent.
    fn resolve_group(&self, group: Group, silence: Option<i64>) -> Candidate {
        let view = &*self.view;
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
                        v.lost_at_ms.is_none()
                            && v.heard_ms.zip(silence).is_some_and(|(t, silence)| {
                                t + ms(self.config.suspect_after_s) < silence
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
                    slowdown: None,
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
            slowdown: if single { sample.slowdown } else { None },
        }
    }
}

/// Evidence for a source record with an excerpt cut at a char boundary.
pub fn evidence(source: &SourceRecord, node: &str, text: &str, limit: usize) -> Evidence {
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
