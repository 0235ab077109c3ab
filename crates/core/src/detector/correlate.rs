//! Correlation: many reports of one fault become one failure event.
//!
//! Root causes (hardware, driver, software errors, lost nodes) are emitted at
//! once. Symptoms (NCCL timeouts, network errors, abnormal exits) are what
//! every rank of a job reports when something else broke, so they are held
//! for the correlation window: a root cause in the same job or on the same
//! node absorbs them as its evidence; otherwise the group becomes one event.
//! Repeats of an emitted event within the dedupe window are absorbed too.

use crate::records::{DetectionMethod, Evidence};
use crate::taxonomy::{FailureKind, Severity};

use super::config::{DetectorConfig, ms};

/// A failure before correlation.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub kind: FailureKind,
    pub severity: Severity,
    pub method: DetectionMethod,
    pub rule: Option<String>,
    pub node: Option<String>,
    pub gpu: Option<i32>,
    pub job: Option<String>,
    pub rank: Option<i32>,
    pub time_ms: i64,
    pub evidence: Vec<Evidence>,
    /// `straggler`: how much slower than its peers.
    pub slowdown: Option<f64>,
}

/// Kinds that are usually the echo of a fault elsewhere.
pub fn is_symptom(kind: FailureKind) -> bool {
    matches!(
        kind,
        FailureKind::NcclTimeout
            | FailureKind::NetworkError
            | FailureKind::ConnectionRefused
            | FailureKind::ConnectionReset
            | FailureKind::ExitedAbnormally
    )
}

/// Rule of an exit on a signal (other than the configured clean ones).
pub const SIGNAL_RULE: &str = "process.signal";

/// Whether a candidate is held as a symptom. A process killed by a signal
/// (a crash, the OOM killer, an operator's kill) is where the fault is, not
/// an echo of it: emitted at once, it absorbs its peers' exits and
/// connection resets.
fn held_as_symptom(c: &Candidate) -> bool {
    is_symptom(c.kind) && c.rule.as_deref() != Some(SIGNAL_RULE)
}

#[derive(Debug, Clone, PartialEq)]
struct Incident {
    /// A root cause: absorbs the symptoms of its job or node.
    root: bool,
    kind: FailureKind,
    node: Option<String>,
    job: Option<String>,
    time_ms: i64,
}

impl Incident {
    fn absorbs(&self, c: &Candidate, config: &DetectorConfig) -> bool {
        let early = self.time_ms - ms(config.correlation_window_s);
        let late = self.time_ms + ms(config.dedupe_window_s);
        if c.time_ms < early || c.time_ms > late {
            return false;
        }
        let same_node = self.node.is_some() && self.node == c.node;
        let same_job = self.job.is_some() && self.job == c.job;
        let repeat = self.kind == c.kind && (same_node || (self.node.is_none() && same_job));
        let echo = held_as_symptom(c) && self.root && (same_node || same_job);
        repeat || echo
    }
}

/// Symptoms held together, keyed by job (or node when no job is known),
/// within one correlation window of event time.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub job: Option<String>,
    pub node: Option<String>,
    /// The first member's time: the window is `[opened_ms, deadline_ms]`.
    pub opened_ms: i64,
    pub deadline_ms: i64,
    /// The round's read time ([`crate::DetectorRound::read_ms`]) when the
    /// group opened: it settles from there; 0 when unknown.
    pub read_ms: i64,
    pub members: Vec<Candidate>,
}

impl Group {
    /// Whether `c` belongs here: the same job (or node), and within the
    /// window by event time. A symptom from after the window is another
    /// fault even while the group is still open because the watermark is
    /// held back (a backlog): grouping must not depend on how late the
    /// detector reads.
    fn holds(&self, c: &Candidate) -> bool {
        let same = match (&self.job, &c.job) {
            (Some(a), Some(b)) => a == b,
            (None, None) => self.node == c.node,
            _ => false,
        };
        let window = self.deadline_ms - self.opened_ms;
        same && (self.opened_ms - window..=self.deadline_ms).contains(&c.time_ms)
    }

    /// Nodes that reported a symptom in this group, in order.
    pub fn reporters(&self) -> Vec<&str> {
        let mut nodes: Vec<&str> = self
            .members
            .iter()
            .filter_map(|m| m.node.as_deref())
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// The kind most members report (ties: the one reported first).
    pub fn dominant_kind(&self) -> FailureKind {
        let mut best = (0, self.members[0].kind);
        for m in &self.members {
            let n = self.members.iter().filter(|o| o.kind == m.kind).count();
            if n > best.0 {
                best = (n, m.kind);
            }
        }
        best.1
    }
}

/// What the correlator did with a candidate.
#[derive(Debug, Clone, PartialEq)]
pub enum Offer {
    /// Emit this (possibly enriched with held symptoms).
    Emit(Candidate),
    /// Held as a symptom, or absorbed by an emitted event.
    Held,
    Absorbed,
}

/// Per-cluster correlation state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Correlator {
    incidents: Vec<Incident>,
    groups: Vec<Group>,
    /// SEV3 emission times per node, for escalation.
    sev3: std::collections::BTreeMap<String, Vec<i64>>,
}

impl Correlator {
    /// Offers a candidate; symptoms are held, repeats absorbed, roots emitted.
    /// `read_ms` is the current round's read time (0: unknown).
    pub fn offer(&mut self, mut c: Candidate, read_ms: i64, config: &DetectorConfig) -> Offer {
        if self.incidents.iter().any(|i| i.absorbs(&c, config)) {
            return Offer::Absorbed;
        }
        if held_as_symptom(&c) && config.correlation_window_s > 0.0 {
            match self.groups.iter_mut().find(|g| g.holds(&c)) {
                Some(group) => group.members.push(c),
                None => self.groups.push(Group {
                    job: c.job.clone(),
                    node: c.node.clone(),
                    opened_ms: c.time_ms,
                    deadline_ms: c.time_ms + ms(config.correlation_window_s),
                    read_ms,
                    members: vec![c],
                }),
            }
            return Offer::Held;
        }
        if !held_as_symptom(&c) {
            // A root cause takes the symptoms already held for its job/node,
            // if they are ones its incident would absorb (from one window
            // before it on): a group still open only because the watermark
            // is held back is no echo of a fault seconds after it.
            let earliest = c.time_ms - ms(config.correlation_window_s);
            let latest = c.time_ms + ms(config.dedupe_window_s);
            let mut i = 0;
            while i < self.groups.len() {
                let g = &self.groups[i];
                let related = (c.job.is_some() && g.job == c.job)
                    || (c.node.is_some() && g.job.is_none() && g.node == c.node);
                let echo = g
                    .members
                    .iter()
                    .all(|m| (earliest..=latest).contains(&m.time_ms));
                if related && echo {
                    let g = self.groups.remove(i);
                    for m in g.members {
                        c.evidence.extend(m.evidence);
                    }
                } else {
                    i += 1;
                }
            }
        }
        Offer::Emit(c)
    }

    /// Whether symptoms are held, waiting for their window to close.
    pub fn holds_any(&self) -> bool {
        !self.groups.is_empty()
    }

    /// Groups whose window closed before `watermark_ms` and that have
    /// settled by `read_ms` (the current round's read time, see
    /// [`DetectorConfig::symptom_settle_s`]), oldest first.
    pub fn expired(
        &mut self,
        watermark_ms: i64,
        read_ms: i64,
        config: &DetectorConfig,
    ) -> Vec<Group> {
        let settle = ms(config.symptom_settle_s);
        let settled = |g: &Group| g.read_ms == 0 || read_ms >= g.read_ms + settle;
        let (mut due, keep): (Vec<Group>, Vec<Group>) = std::mem::take(&mut self.groups)
            .into_iter()
            .partition(|g| g.deadline_ms < watermark_ms && settled(g));
        self.groups = keep;
        due.sort_by_key(|g| g.deadline_ms);
        due
    }

    /// The groups of `jobs` whose window `watermark_ms` has closed, still
    /// settling: a hang of their job ends the settle, since the held
    /// symptom (an NCCL timeout, say) is the more specific account of the
    /// stall than the hang timer.
    pub fn take_settling(
        &mut self,
        jobs: &std::collections::BTreeSet<&str>,
        watermark_ms: i64,
    ) -> Vec<Group> {
        let (mut due, keep): (Vec<Group>, Vec<Group>) =
            std::mem::take(&mut self.groups).into_iter().partition(|g| {
                g.deadline_ms < watermark_ms && g.job.as_deref().is_some_and(|j| jobs.contains(j))
            });
        self.groups = keep;
        due.sort_by_key(|g| g.deadline_ms);
        due
    }

    /// Records an emitted failure and returns its final severity (SEV3
    /// repeats on one node escalate to SEV2).
    pub fn emitted(&mut self, c: &Candidate, config: &DetectorConfig) -> Severity {
        self.incidents.push(Incident {
            root: !held_as_symptom(c),
            kind: c.kind,
            node: c.node.clone(),
            job: c.job.clone(),
            time_ms: c.time_ms,
        });
        let mut severity = c.severity;
        if severity == Severity::Sev3
            && config.escalation_repeats > 0
            && let Some(node) = &c.node
        {
            let window = ms(config.escalation_window_s);
            let times = self.sev3.entry(node.clone()).or_default();
            times.retain(|t| *t >= c.time_ms - window);
            if times.len() + 1 >= config.escalation_repeats {
                severity = Severity::Sev2;
            }
            times.push(c.time_ms);
        }
        severity
    }

    /// Forgets incidents too old to absorb anything at `watermark_ms`.
    pub fn prune(&mut self, watermark_ms: i64, config: &DetectorConfig) {
        let horizon = ms(config.dedupe_window_s) + ms(config.allowed_lateness_s);
        self.incidents
            .retain(|i| i.time_ms + horizon >= watermark_ms);
        let window = ms(config.escalation_window_s);
        self.sev3.retain(|_, times| {
            times.retain(|t| *t + window >= watermark_ms);
            !times.is_empty()
        });
    }
}
