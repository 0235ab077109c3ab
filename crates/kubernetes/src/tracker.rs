//! What `kube-watch` publishes, from the watch events it receives. Pure:
//! the watcher feeds it the API server's events and the time, tests feed it
//! objects they build; it returns the records to publish.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use unicron_core::scheduler_view::{self, Condition};
use unicron_core::{ClusterEvent, ClusterEventKind, LogRecord};

use crate::settings::WatchSettings;
use crate::view;
use crate::workload::{WorkloadKind, WorkloadView};

/// One record for the bus.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// To `unicron.cluster`, keyed by cluster.
    Cluster(ClusterEvent),
    /// To `unicron.logs`, keyed by node: for the detector to classify.
    Log(LogRecord),
}

impl Record {
    /// What the record is, for the published metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Cluster(e) => match e.kind {
                ClusterEventKind::NodeDown => "node_down",
                ClusterEventKind::NodeDrained => "node_drained",
                ClusterEventKind::NodeRepaired => "node_repaired",
                ClusterEventKind::NodeJoined => "node_joined",
                ClusterEventKind::JobSubmitted => "job_submitted",
                ClusterEventKind::JobUpdated => "job_updated",
                ClusterEventKind::JobFinished => "job_finished",
                _ => "other",
            },
            Record::Log(_) => "log",
        }
    }
}

/// A workload's identity: kind, namespace, name.
type WorkloadKey = (WorkloadKind, String, String);

/// What the watcher has seen and published.
pub struct Tracker {
    settings: WatchSettings,
    nodes: BTreeMap<String, Node>,
    /// Nodes listed so far during a relist.
    listing_nodes: Option<BTreeMap<String, Node>>,
    /// The conditions last published; `None` before the first listing.
    published: Option<BTreeMap<String, Condition>>,
    announced: BTreeSet<String>,
    /// GPU conditions True per node, reported already.
    gpu_faults: BTreeMap<String, BTreeSet<String>>,
    /// Namespaces whose pods were listed once: faults there before the
    /// first listing are history, not news.
    pods_listed: BTreeSet<String>,
    /// Pod faults reported (or history), by pod uid.
    pod_faults: BTreeMap<String, BTreeSet<String>>,
    /// Pods seen during a relist, by namespace.
    listing_pods: BTreeMap<String, BTreeSet<String>>,
    /// Workloads and the spec last published (`None`: not planned).
    workloads: BTreeMap<WorkloadKey, WorkloadView>,
    listing_workloads: BTreeMap<(WorkloadKind, String), BTreeSet<String>>,
}

impl Tracker {
    pub fn new(settings: WatchSettings) -> Tracker {
        Tracker {
            settings,
            nodes: BTreeMap::new(),
            listing_nodes: None,
            published: None,
            announced: BTreeSet::new(),
            gpu_faults: BTreeMap::new(),
            pods_listed: BTreeSet::new(),
            pod_faults: BTreeMap::new(),
            listing_pods: BTreeMap::new(),
            workloads: BTreeMap::new(),
            listing_workloads: BTreeMap::new(),
        }
    }

    /// A node watch event at `now_ms`. A relist replaces the nodes only
    /// when complete, so a half-listed cluster never looks emptied.
    pub fn node(&mut self, event: Event<Node>, now_ms: i64) -> Vec<Record> {
        match event {
            Event::Init => {
                self.listing_nodes = Some(BTreeMap::new());
                return Vec::new();
            }
            Event::InitApply(node) => {
                if let (Some(listing), Some(name)) =
                    (&mut self.listing_nodes, node.metadata.name.clone())
                {
                    listing.insert(name, node);
                }
                return Vec::new();
            }
            Event::InitDone => {
                if let Some(listed) = self.listing_nodes.take() {
                    self.nodes = listed;
                }
            }
            Event::Apply(node) => {
                if let Some(name) = node.metadata.name.clone() {
                    self.nodes.insert(name, node);
                }
            }
            Event::Delete(node) => {
                if let Some(name) = &node.metadata.name {
                    self.nodes.remove(name);
                    self.announced.remove(name);
                    self.gpu_faults.remove(name);
                }
            }
        }
        self.node_records(now_ms)
    }

    fn node_records(&mut self, now_ms: i64) -> Vec<Record> {
        let cluster = self.settings.cluster.clone();
        let mut records = Vec::new();
        let now: BTreeMap<String, Condition> = self
            .nodes
            .iter()
            .map(|(name, node)| (name.clone(), view::condition(node)))
            .collect();
        if self.settings.announce_nodes {
            for (name, node) in &self.nodes {
                let gpus = view::gpus(node, &self.settings.gpu_resource).unwrap_or(0);
                if gpus > 0
                    && now[name] == Condition::InService
                    && self.announced.insert(name.clone())
                {
                    let mut joined =
                        ClusterEvent::new(&cluster, now_ms, ClusterEventKind::NodeJoined);
                    joined.node = Some(name.clone());
                    joined.gpus = Some(gpus);
                    joined.reason = Some("kubernetes: Ready".into());
                    records.push(Record::Cluster(joined));
                }
            }
        }
        for change in scheduler_view::node_changes(
            self.published.as_ref(),
            &now,
            "back in service in Kubernetes",
        ) {
            // NotReady is a fault to act on, not a node the scheduler holds:
            // Kubernetes leaves the pods there for its 300-s tolerations
            // (and then Terminating), so it goes to the detector as node
            // loss (SEV1: isolate, evict, re-plan), not as node_down.
            if change.kind == ClusterEventKind::NodeDown {
                records.push(Record::Log(LogRecord {
                    cluster: cluster.clone(),
                    node: change.subject.clone(),
                    time_ms: now_ms,
                    source: "kubernetes".into(),
                    job: None,
                    rank: None,
                    gpu: None,
                    line: format!(
                        "kubernetes: node {} NodeNotReady: {}",
                        change.subject, change.reason
                    ),
                    attributes: BTreeMap::new(),
                }));
                continue;
            }
            records.push(Record::Cluster(change.event(
                &cluster,
                now_ms,
                "kubernetes",
            )));
        }
        self.published = Some(now);
        for (name, node) in &self.nodes {
            let faults = view::gpu_faults(node, &self.settings.gpu_conditions);
            let reported = self.gpu_faults.entry(name.clone()).or_default();
            reported.retain(|c| faults.iter().any(|f| f.condition == *c));
            for fault in faults {
                if reported.insert(fault.condition.clone()) {
                    records.push(Record::Log(LogRecord {
                        cluster: cluster.clone(),
                        node: name.clone(),
                        // When kube-watch saw it: the detector's clock runs on
                        // arrival, and a condition set long ago is news now.
                        time_ms: now_ms,
                        source: "kubernetes".into(),
                        job: None,
                        rank: None,
                        gpu: None,
                        line: fault.line(name),
                        attributes: [("condition".to_string(), fault.condition.clone())]
                            .into_iter()
                            .chain(fault.since_ms.map(|t| ("at_ms".to_string(), t.to_string())))
                            .collect(),
                    }));
                }
            }
        }
        records
    }

    /// A pod watch event of `namespace` at `now_ms`.
    pub fn pod(&mut self, namespace: &str, event: Event<Pod>, now_ms: i64) -> Vec<Record> {
        let pod = match event {
            Event::Init => {
                self.listing_pods
                    .insert(namespace.to_string(), BTreeSet::new());
                return Vec::new();
            }
            Event::InitDone => {
                // Pods gone while the watch was down: forget them.
                if let Some(listed) = self.listing_pods.remove(namespace) {
                    let prefix = format!("{namespace}/");
                    self.pod_faults
                        .retain(|uid, _| !uid.starts_with(&prefix) || listed.contains(uid));
                }
                self.pods_listed.insert(namespace.to_string());
                return Vec::new();
            }
            Event::Delete(pod) => {
                if let Some(uid) = &pod.metadata.uid {
                    self.pod_faults.remove(&format!("{namespace}/{uid}"));
                }
                return Vec::new();
            }
            Event::InitApply(pod) | Event::Apply(pod) => pod,
        };
        let Some(uid) = pod
            .metadata
            .uid
            .as_ref()
            .map(|u| format!("{namespace}/{u}"))
        else {
            return Vec::new();
        };
        if let Some(listing) = self.listing_pods.get_mut(namespace) {
            listing.insert(uid.clone());
        }
        let history = !self.pods_listed.contains(namespace);
        let reported = self.pod_faults.entry(uid).or_default();
        let mut records = Vec::new();
        let pod_name = format!(
            "{namespace}/{}",
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        for fault in view::pod_faults(&pod) {
            if reported.insert(fault.key) && !history {
                records.push(Record::Log(LogRecord {
                    cluster: self.settings.cluster.clone(),
                    node: fault.node,
                    time_ms: now_ms,
                    source: "kubernetes".into(),
                    job: fault.job,
                    rank: fault.rank,
                    gpu: None,
                    line: fault.line,
                    attributes: [("pod".to_string(), pod_name.clone())]
                        .into_iter()
                        .chain(fault.time_ms.map(|t| ("at_ms".to_string(), t.to_string())))
                        .collect(),
                }));
            }
        }
        records
    }

    /// A workload watch event of `kind` in `namespace` at `now_ms`, and the
    /// workloads that could not be read (one line each, naming the object
    /// and the field).
    pub fn workload(
        &mut self,
        kind: WorkloadKind,
        namespace: &str,
        event: Event<DynamicObject>,
        now_ms: i64,
    ) -> (Vec<Record>, Vec<String>) {
        let listing_key = (kind, namespace.to_string());
        let mut records = Vec::new();
        let object = match event {
            Event::Init => {
                self.listing_workloads.insert(listing_key, BTreeSet::new());
                return (records, Vec::new());
            }
            Event::InitDone => {
                // Workloads deleted while the watch was down have finished.
                if let Some(listed) = self.listing_workloads.remove(&listing_key) {
                    let gone: Vec<WorkloadKey> = self
                        .workloads
                        .keys()
                        .filter(|(k, ns, name)| {
                            *k == kind && ns == namespace && !listed.contains(name)
                        })
                        .cloned()
                        .collect();
                    for key in gone {
                        if let Some(known) = self.workloads.remove(&key) {
                            records.extend(self.finished(&known, "deleted", now_ms));
                        }
                    }
                }
                return (records, Vec::new());
            }
            Event::Delete(object) => {
                let key = (
                    kind,
                    namespace.to_string(),
                    object.metadata.name.clone().unwrap_or_default(),
                );
                if let Some(known) = self.workloads.remove(&key) {
                    records.extend(self.finished(&known, "deleted", now_ms));
                }
                return (records, Vec::new());
            }
            Event::InitApply(object) | Event::Apply(object) => object,
        };
        let name = object.metadata.name.clone().unwrap_or_default();
        if let Some(listing) = self.listing_workloads.get_mut(&listing_key) {
            listing.insert(name.clone());
        }
        let view = match WorkloadView::of(kind, &object, &self.settings.gpu_resource) {
            Ok(Some(view)) => view,
            Ok(None) => return (records, Vec::new()),
            Err(bad) => return (records, vec![bad]),
        };
        let key = (kind, namespace.to_string(), name);
        let before = self.workloads.get(&key).cloned();
        match (&before, &view.finished) {
            (Some(b), Some(how)) if b.finished.is_none() => {
                records.extend(self.finished(&view, how, now_ms));
            }
            (_, Some(_)) => {}
            (_, None) if view.agents => {}
            (_, None) => {
                let changed = before
                    .as_ref()
                    .is_none_or(|b| b.spec != view.spec || b.finished.is_some());
                if let (true, Some(spec)) = (changed, &view.spec) {
                    let kind = if before
                        .as_ref()
                        .is_some_and(|b| b.spec.is_some() && b.finished.is_none())
                    {
                        ClusterEventKind::JobUpdated
                    } else {
                        ClusterEventKind::JobSubmitted
                    };
                    let mut event = ClusterEvent::new(&self.settings.cluster, now_ms, kind);
                    event.job_id = Some(view.job.clone());
                    event.job = Some(spec.clone());
                    event.reason = Some(format!(
                        "kubernetes: {} {}/{}",
                        view.kind.name(),
                        view.namespace,
                        view.name
                    ));
                    records.push(Record::Cluster(event));
                }
            }
        }
        self.workloads.insert(key, view);
        (records, Vec::new())
    }

    fn finished(&self, view: &WorkloadView, how: &str, now_ms: i64) -> Option<Record> {
        // Ended before (already said), or never planned nor announced.
        let unplanned = !view.agents && view.spec.is_none();
        if (view.finished.is_some() && how == "deleted") || unplanned {
            return None;
        }
        let mut event = ClusterEvent::new(
            &self.settings.cluster,
            now_ms,
            ClusterEventKind::JobFinished,
        );
        event.job_id = Some(view.job.clone());
        event.reason = Some(format!(
            "kubernetes: {} {}/{} {how}",
            view.kind.name(),
            view.namespace,
            view.name
        ));
        Some(Record::Cluster(event))
    }
}

#[cfg(test)]
mod tests;
