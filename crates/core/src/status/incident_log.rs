//! The incidents of the log, one per failure, linked whatever order the
//! topics are read in and bounded however long the run.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::Record;
use super::incident::{ChainCommand, ChainDecision, Incident, chain_command, chain_decision};
use crate::planner::InputEvent;
use crate::records::{CommandResult, FailureEvent};

/// Incidents kept in all (the newest by detection time win): with 100
/// clusters the page and its API stay a few MB whatever the run's length.
pub const INCIDENTS: usize = 500;
/// Incidents kept per cluster, so one flapping cluster cannot push every
/// other cluster's incidents out of [`INCIDENTS`].
pub const INCIDENTS_PER_CLUSTER: usize = 50;
/// Decisions, commands and results kept while the failure or command they
/// belong to has not been read yet (the oldest go first).
pub const PENDING_PARTS: usize = 20_000;
/// Commands remembered as caused by no failure, so their results and the
/// decisions on them are dropped rather than parked.
pub const UNLINKED: usize = 20_000;

/// What an incident record links to before its incident is known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Link {
    /// (cluster, failure id)
    Failure(String, String),
    /// (cluster, command id)
    Command(String, String),
}

#[derive(Debug, Clone)]
enum Part {
    Decision(ChainDecision),
    Command(ChainCommand),
    Result(CommandResult),
}

/// Incidents from the log, one per failure, whatever order the topics are
/// read in; bounded by [`INCIDENTS`] and [`INCIDENTS_PER_CLUSTER`]. The
/// status page and `unicron explain --incidents` both use it.
#[derive(Debug, Default)]
pub struct IncidentLog {
    /// By (cluster, failure id).
    incidents: BTreeMap<(String, String), Incident>,
    /// (detected, cluster, id): newest last.
    order: BTreeSet<(i64, String, String)>,
    by_cluster: BTreeMap<String, BTreeSet<(i64, String)>>,
    /// (cluster, command id) → failure id, for commands in a kept incident.
    /// Visible to the module's tests, which check it stays bounded.
    pub(super) command_failure: BTreeMap<(String, String), String>,
    /// Records whose failure or command is not read yet, by arrival.
    parked: BTreeMap<u64, (Link, Part)>,
    parked_by: BTreeMap<Link, Vec<u64>>,
    next_park: u64,
    /// Commands caused by no failure (job starts, returns), oldest first.
    unlinked: BTreeSet<(String, String)>,
    unlinked_order: VecDeque<(String, String)>,
    /// Newest detection time per cluster, kept past eviction.
    last_ms: BTreeMap<String, i64>,
}

impl IncidentLog {
    pub fn new() -> IncidentLog {
        IncidentLog::default()
    }

    /// Takes one record; records that belong to no failure are ignored.
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Input(InputEvent::Failure(f)) => self.on_failure(f),
            Record::Input(InputEvent::Result(r)) => {
                let link = Link::Command(r.cluster.clone(), r.command_id.clone());
                self.attach(link, Part::Result(r.clone()));
            }
            Record::Input(InputEvent::Cluster(_)) => {}
            Record::Decision(d) => {
                let link = match d.trigger.kind.as_str() {
                    "failure" => Link::Failure(d.cluster.clone(), d.trigger.ref_id.clone()),
                    "command_result" => Link::Command(d.cluster.clone(), d.trigger.ref_id.clone()),
                    // Cluster events: inventory, not incidents.
                    _ => return,
                };
                self.attach(link, Part::Decision(chain_decision(d)));
            }
            Record::Command(c) => {
                // The planner puts the failure first and the input's
                // place last; a command with only the latter has no failure.
                let failure = match c.causation.split_last() {
                    Some((_, before)) => before.first(),
                    None => None,
                };
                let Some(failure) = failure else {
                    self.unlink(&c.cluster, &c.id);
                    return;
                };
                let link = Link::Failure(c.cluster.clone(), failure.clone());
                self.attach(link, Part::Command(chain_command(c)));
            }
        }
    }

    /// Incidents newest first by detection time, of one cluster or all.
    pub fn incidents(&self, cluster: Option<&str>, limit: usize) -> Vec<Incident> {
        let pick = |cluster: &str, id: &str| {
            self.incidents
                .get(&(cluster.to_string(), id.to_string()))
                .cloned()
        };
        match cluster {
            Some(c) => self
                .by_cluster
                .get(c)
                .into_iter()
                .flat_map(|set| set.iter().rev())
                .filter_map(|(_, id)| pick(c, id))
                .take(limit)
                .collect(),
            None => self
                .order
                .iter()
                .rev()
                .filter_map(|(_, c, id)| pick(c, id))
                .take(limit)
                .collect(),
        }
    }

    /// One incident by cluster and failure id.
    pub fn incident(&self, cluster: &str, id: &str) -> Option<&Incident> {
        self.incidents.get(&(cluster.to_string(), id.to_string()))
    }

    /// Incidents kept, in all.
    pub fn len(&self) -> usize {
        self.incidents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.incidents.is_empty()
    }

    /// Records parked for a failure or command not read yet.
    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    /// (unresolved, kept) incidents of a cluster and its newest detection time.
    pub(super) fn cluster_counts(&self, cluster: &str) -> (usize, usize, Option<i64>) {
        let kept = self.by_cluster.get(cluster);
        let open = kept
            .into_iter()
            .flatten()
            .filter_map(|(_, id)| self.incident(cluster, id))
            .filter(|i| i.state.unresolved())
            .count();
        (
            open,
            kept.map_or(0, BTreeSet::len),
            self.last_ms.get(cluster).copied(),
        )
    }

    fn on_failure(&mut self, f: &FailureEvent) {
        let key = (f.cluster.clone(), f.id.clone());
        if self.incidents.contains_key(&key) {
            return; // re-delivered
        }
        let last = self
            .last_ms
            .entry(f.cluster.clone())
            .or_insert(f.detected_ms);
        *last = (*last).max(f.detected_ms);
        self.incidents.insert(key, Incident::new(f));
        self.order
            .insert((f.detected_ms, f.cluster.clone(), f.id.clone()));
        let mine = self.by_cluster.entry(f.cluster.clone()).or_default();
        mine.insert((f.detected_ms, f.id.clone()));
        if mine.len() > INCIDENTS_PER_CLUSTER
            && let Some((t, id)) = mine.pop_first()
        {
            self.forget(t, &f.cluster, &id);
        }
        while self.order.len() > INCIDENTS {
            let Some((t, cluster, id)) = self.order.first().cloned() else {
                break;
            };
            self.forget(t, &cluster, &id);
        }
        // An incident evicted at once leaves its parts parked, as before.
        if self
            .incidents
            .contains_key(&(f.cluster.clone(), f.id.clone()))
        {
            let link = Link::Failure(f.cluster.clone(), f.id.clone());
            for part in self.unpark(&link) {
                self.attach(link.clone(), part);
            }
        }
    }

    fn forget(&mut self, detected_ms: i64, cluster: &str, id: &str) {
        self.order
            .remove(&(detected_ms, cluster.to_string(), id.to_string()));
        if let Some(mine) = self.by_cluster.get_mut(cluster) {
            mine.remove(&(detected_ms, id.to_string()));
            if mine.is_empty() {
                self.by_cluster.remove(cluster);
            }
        }
        if let Some(incident) = self
            .incidents
            .remove(&(cluster.to_string(), id.to_string()))
        {
            for c in &incident.commands {
                self.command_failure
                    .remove(&(cluster.to_string(), c.id.clone()));
            }
        }
    }

    /// The failure a link resolves to, if its incident is kept.
    fn resolve(&self, link: &Link) -> Option<(String, String)> {
        let key = match link {
            Link::Failure(cluster, id) => (cluster.clone(), id.clone()),
            Link::Command(cluster, id) => {
                let failure = self.command_failure.get(&(cluster.clone(), id.clone()))?;
                (cluster.clone(), failure.clone())
            }
        };
        self.incidents.contains_key(&key).then_some(key)
    }

    fn attach(&mut self, link: Link, part: Part) {
        if let Link::Command(cluster, id) = &link
            && self.unlinked.contains(&(cluster.clone(), id.clone()))
        {
            return;
        }
        let Some(key) = self.resolve(&link) else {
            self.park(link, part);
            return;
        };
        let Some(incident) = self.incidents.get_mut(&key) else {
            return;
        };
        match part {
            Part::Decision(d) => incident.add_decision(d),
            Part::Result(r) => incident.add_result(&r),
            Part::Command(c) => {
                let id = c.id.clone();
                if incident.add_command(c) {
                    self.command_failure
                        .insert((key.0.clone(), id.clone()), key.1.clone());
                    let waiting = Link::Command(key.0, id);
                    for part in self.unpark(&waiting) {
                        self.attach(waiting.clone(), part);
                    }
                }
            }
        }
    }

    fn park(&mut self, link: Link, part: Part) {
        let seq = self.next_park;
        self.next_park += 1;
        self.parked_by.entry(link.clone()).or_default().push(seq);
        self.parked.insert(seq, (link, part));
        while self.parked.len() > PENDING_PARTS {
            let Some((seq, (link, _))) = self.parked.pop_first() else {
                break;
            };
            if let Some(seqs) = self.parked_by.get_mut(&link) {
                seqs.retain(|s| *s != seq);
                if seqs.is_empty() {
                    self.parked_by.remove(&link);
                }
            }
        }
    }

    /// The parts waiting for `link`, in arrival order.
    fn unpark(&mut self, link: &Link) -> Vec<Part> {
        self.parked_by
            .remove(link)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|seq| self.parked.remove(&seq).map(|(_, part)| part))
            .collect()
    }

    fn unlink(&mut self, cluster: &str, command: &str) {
        let key = (cluster.to_string(), command.to_string());
        self.unpark(&Link::Command(key.0.clone(), key.1.clone()));
        if self.unlinked.insert(key.clone()) {
            self.unlinked_order.push_back(key);
        }
        while self.unlinked_order.len() > UNLINKED {
            if let Some(old) = self.unlinked_order.pop_front() {
                self.unlinked.remove(&old);
            }
        }
    }
}
