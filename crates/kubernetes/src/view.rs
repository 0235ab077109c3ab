//! What the API server's objects mean to unicron. Pure: the watcher and the
//! executor feed it objects they read, tests feed it objects they build.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use unicron_core::scheduler_view::Condition;

/// The taint unicron puts on a node it isolates (`NoSchedule`; its value
/// is the failure's id made a label value).
pub const ISOLATED_TAINT: &str = "unicron.io/isolated";
/// The annotation beside it with the failure's and the command's ids,
/// whole (a taint value cannot hold them).
pub const ISOLATION_ANNOTATION: &str = "unicron.io/isolation";
/// On a pod unicron evicts or deletes: the command that did it, so the
/// watcher does not report unicron's own action as a fault.
pub const STOPPED_BY: &str = "unicron.io/stopped-by";
/// On a pod or workload: the unicron job id, when it is not the
/// workload's name.
pub const JOB_ANNOTATION: &str = "unicron.io/job";

/// Labels that name a pod's workload, most specific first: unicron's own,
/// JobSet's, Kubeflow's training operator's, then the Job's.
const JOB_LABELS: [&str; 5] = [
    JOB_ANNOTATION,
    "jobset.sigs.k8s.io/jobset-name",
    "training.kubeflow.org/job-name",
    "batch.kubernetes.io/job-name",
    "job-name",
];

/// Taint keys the system sets: a node carrying only these is not held by
/// anyone (NotReady is seen from its Ready condition instead).
const SYSTEM_TAINT_PREFIXES: [&str; 2] =
    ["node.kubernetes.io/", "node.cloudprovider.kubernetes.io/"];

/// The node's Ready condition: `(status, reason, message)`.
fn ready(node: &Node) -> Option<(&str, &str, &str)> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((
        ready.status.as_str(),
        ready.reason.as_deref().unwrap_or(""),
        ready.message.as_deref().unwrap_or(""),
    ))
}

/// Whether the node's kubelet reports it Ready.
pub fn is_ready(node: &Node) -> bool {
    ready(node).is_some_and(|(status, _, _)| status == "True")
}

fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// unicron's isolation taint, if the node carries it.
pub fn unicron_taint(node: &Node) -> Option<&Taint> {
    taints(node).iter().find(|t| t.key == ISOLATED_TAINT)
}

/// Whether someone other than unicron and the system holds the node: a
/// cordon without unicron's taint, or a NoSchedule/NoExecute taint of
/// their own. Their reason, if so.
pub fn held_by_others(node: &Node) -> Option<String> {
    let ours = unicron_taint(node).is_some();
    let theirs: Vec<String> = taints(node)
        .iter()
        .filter(|t| t.key != ISOLATED_TAINT)
        .filter(|t| !SYSTEM_TAINT_PREFIXES.iter().any(|p| t.key.starts_with(p)))
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .map(|t| match t.value.as_deref() {
            Some(v) if !v.is_empty() => format!("{}={}:{}", t.key, v, t.effect),
            _ => format!("{}:{}", t.key, t.effect),
        })
        .collect();
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    match (theirs.is_empty(), cordoned && !ours) {
        (true, false) => None,
        (true, true) => Some("cordoned".to_string()),
        (false, cordoned) => Some(format!(
            "{}tainted {}",
            if cordoned { "cordoned and " } else { "" },
            theirs.join(", ")
        )),
    }
}

/// The planner's view of a node: down when its Ready condition is not
/// True (False: the kubelet says so; Unknown: it stopped reporting), held
/// by unicron when it carries unicron's taint, held by others when cordoned
/// or tainted by them.
pub fn condition(node: &Node) -> Condition {
    match ready(node) {
        Some(("True", _, _)) => {}
        Some((status, reason, message)) => {
            return Condition::Down(format!("Ready={status} ({reason}: {message})"));
        }
        None => return Condition::Down("no Ready condition".to_string()),
    }
    if unicron_taint(node).is_some() {
        Condition::DrainedByUnicron
    } else if let Some(why) = held_by_others(node) {
        Condition::Drained(why)
    } else {
        Condition::InService
    }
}

/// A GPU health condition that is True on a node (node-problem-detector's
/// and NVIDIA NVSentinel's are configured by type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFault {
    pub condition: String,
    pub reason: String,
    pub message: String,
    pub since_ms: Option<i64>,
}

impl GpuFault {
    /// The log line the detector classifies: the condition's type and its
    /// message (an Xid line, an NVLink or memory error as the monitor saw
    /// it).
    pub fn line(&self, node: &str) -> String {
        format!(
            "kubernetes: node {node} condition {}=True ({}): {}",
            self.condition, self.reason, self.message
        )
    }
}

/// The node's conditions among `types` whose status is True.
pub fn gpu_faults(node: &Node, types: &[String]) -> Vec<GpuFault> {
    let Some(conditions) = node.status.as_ref().and_then(|s| s.conditions.as_ref()) else {
        return Vec::new();
    };
    conditions
        .iter()
        .filter(|c| c.status == "True" && types.contains(&c.type_))
        .map(|c| GpuFault {
            condition: c.type_.clone(),
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
            since_ms: c.last_transition_time.as_ref().map(millis),
        })
        .collect()
}

/// GPUs the node offers: its allocatable `resource` (`nvidia.com/gpu`).
pub fn gpus(node: &Node, resource: &str) -> Option<i32> {
    let quantity = node.status.as_ref()?.allocatable.as_ref()?.get(resource)?;
    quantity.0.parse().ok()
}

pub(crate) fn millis(time: &Time) -> i64 {
    time.0.as_millisecond()
}

/// The unicron job an object belongs to, from its labels and annotations
/// (`unicron.io/job` first, then JobSet's, the training operator's, the
/// Job's).
pub fn job_of(
    labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<String> {
    if let Some(job) = annotations.and_then(|a| a.get(JOB_ANNOTATION)) {
        return Some(job.clone());
    }
    let labels = labels?;
    JOB_LABELS
        .iter()
        .find_map(|key| labels.get(*key).filter(|v| !v.is_empty()).cloned())
}

/// A taint value holding `id`: at most 63 characters of letters, digits,
/// '-', '_' and '.', starting and ending with a letter or digit (a
/// failure id's ':' become '.').
pub fn taint_value(id: &str) -> String {
    let mapped: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '.'
            }
        })
        .collect();
    let cut: String = mapped
        .chars()
        .rev()
        .take(63)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    cut.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// Something about a pod the detector should hear of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFault {
    /// Identifies this occurrence, so it is published once: the pod's uid,
    /// the container and its restart count.
    pub key: String,
    pub node: String,
    pub job: Option<String>,
    pub rank: Option<i32>,
    pub time_ms: Option<i64>,
    pub line: String,
}

/// What happened to `pod` that the detector classifies: containers that
/// terminated other than cleanly (OOMKilled, a non-zero exit; their last
/// state after a restart too) and an eviction by someone other than unicron.
/// A pod being deleted reports only its eviction: its containers stop
/// because of the deletion.
pub fn pod_faults(pod: &Pod) -> Vec<PodFault> {
    let meta = &pod.metadata;
    let (Some(name), Some(spec), Some(status)) = (&meta.name, &pod.spec, &pod.status) else {
        return Vec::new();
    };
    let Some(node) = spec.node_name.clone() else {
        return Vec::new();
    };
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    let uid = meta.uid.as_deref().unwrap_or(name);
    let job = job_of(meta.labels.as_ref(), meta.annotations.as_ref());
    let rank = rank_of(meta.labels.as_ref(), meta.annotations.as_ref());
    let stopped_by_unicron = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(STOPPED_BY));
    let fault = |key: String, time_ms, line| PodFault {
        key,
        node: node.clone(),
        job: job.clone(),
        rank,
        time_ms,
        line,
    };
    let mut faults = Vec::new();
    if meta.deletion_timestamp.is_some() || status.reason.as_deref() == Some("Evicted") {
        let disruption = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "DisruptionTarget" && c.status == "True");
        let evicted = status.reason.as_deref() == Some("Evicted") || disruption.is_some();
        if evicted && !stopped_by_unicron {
            let why = disruption
                .map(|c| {
                    format!(
                        "{}: {}",
                        c.reason.as_deref().unwrap_or(""),
                        c.message.as_deref().unwrap_or("")
                    )
                })
                .or_else(|| status.message.clone())
                .unwrap_or_default();
            faults.push(fault(
                format!("{uid}/evicted"),
                disruption.and_then(|c| c.last_transition_time.as_ref().map(millis)),
                format!("kubernetes: pod {namespace}/{name} on node {node} was evicted ({why}); its workers were killed"),
            ));
        }
        return faults;
    }
    for container in status.container_statuses.iter().flatten() {
        let restarts = container.restart_count;
        let current = container.state.as_ref().and_then(|s| s.terminated.as_ref());
        let last = container
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref());
        // The running container's last termination is restart N-1's.
        let terminated = [(current, restarts), (last, restarts - 1)];
        for (terminated, count) in terminated {
            let Some(t) = terminated else { continue };
            let reason = t.reason.as_deref().unwrap_or("");
            if t.exit_code == 0 && reason != "OOMKilled" {
                continue;
            }
            let line = if reason == "OOMKilled" {
                format!(
                    "kubernetes: container {} of pod {namespace}/{name} was OOMKilled (exit code {})",
                    container.name, t.exit_code
                )
            } else {
                let mut line = format!(
                    "kubernetes: container {} of pod {namespace}/{name} terminated with exit code {}",
                    container.name, t.exit_code
                );
                if let Some(signal) = t.signal.filter(|s| *s != 0) {
                    line.push_str(&format!(" (signal {signal})"));
                }
                if !reason.is_empty() {
                    line.push_str(&format!(" ({reason})"));
                }
                if let Some(message) = t.message.as_deref().filter(|m| !m.is_empty()) {
                    line.push_str(&format!(": {}", message.trim()));
                }
                line
            };
            faults.push(fault(
                format!("{uid}/{}/{count}", container.name),
                t.finished_at.as_ref().map(millis),
                line,
            ));
        }
    }
    faults
}

/// The pod's rank as its workload numbers it: JobSet's global job index
/// (one pod per child Job), else the training operator's replica index,
/// else the Job's completion index.
fn rank_of(
    labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<i32> {
    const INDEX: [&str; 3] = [
        "jobset.sigs.k8s.io/job-global-index",
        "training.kubeflow.org/replica-index",
        "batch.kubernetes.io/job-completion-index",
    ];
    INDEX.iter().find_map(|key| {
        labels
            .and_then(|l| l.get(*key))
            .or_else(|| annotations.and_then(|a| a.get(*key)))
            .and_then(|v| v.parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taint_values_are_label_values() {
        assert_eq!(
            taint_value("f:c1:unicron.logs:2:17"),
            "f.c1.unicron.logs.2.17"
        );
        let long = format!("f:{}", "x".repeat(100));
        let value = taint_value(&long);
        assert!(value.len() <= 63 && value.ends_with('x'), "{value}");
        assert_eq!(taint_value("::"), "");
    }

    #[test]
    fn a_job_is_named_by_unicron_then_jobset_then_the_operator_then_the_job() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let labels = map(&[
            ("batch.kubernetes.io/job-name", "gpt-workers-0"),
            ("jobset.sigs.k8s.io/jobset-name", "gpt"),
        ]);
        assert_eq!(job_of(Some(&labels), None).as_deref(), Some("gpt"));
        let annotations = map(&[(JOB_ANNOTATION, "llama")]);
        assert_eq!(
            job_of(Some(&labels), Some(&annotations)).as_deref(),
            Some("llama")
        );
        assert_eq!(job_of(Some(&map(&[("app", "x")])), None), None);
    }
}
