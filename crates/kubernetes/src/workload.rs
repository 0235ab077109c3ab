//! Training workloads as unicron sees them: JobSet, Kubeflow's PyTorchJob
//! and the plain Job, read as dynamic objects (no operator's Go types
//! needed). Pure: what a workload's object says; acting on it is in
//! `actions`.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;
use unicron_core::{JobSpec, ThroughputPoint};

use crate::view::JOB_ANNOTATION;

/// Set to "true" on a workload whose pods run `unicron agent`: the agents
/// announce the job and restart its workers; the watcher publishes no spec.
pub const AGENTS_ANNOTATION: &str = "unicron.io/agents";
pub const WEIGHT_ANNOTATION: &str = "unicron.io/weight";
pub const MIN_GPUS_ANNOTATION: &str = "unicron.io/min-gpus";
pub const MAX_GPUS_ANNOTATION: &str = "unicron.io/max-gpus";
pub const UNIT_GPUS_ANNOTATION: &str = "unicron.io/unit-gpus";

/// The kinds of workload unicron plans and restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WorkloadKind {
    JobSet,
    PyTorchJob,
    Job,
}

impl WorkloadKind {
    /// In the order the executor looks a job up: the most specific first,
    /// since a JobSet's children are Jobs.
    pub const ALL: [WorkloadKind; 3] = [
        WorkloadKind::JobSet,
        WorkloadKind::PyTorchJob,
        WorkloadKind::Job,
    ];

    pub fn api_resource(self) -> ApiResource {
        let (group, version, kind, plural) = match self {
            WorkloadKind::JobSet => ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
            WorkloadKind::PyTorchJob => ("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
            WorkloadKind::Job => ("batch", "v1", "Job", "jobs"),
        };
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    }

    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::JobSet => "JobSet",
            WorkloadKind::PyTorchJob => "PyTorchJob",
            WorkloadKind::Job => "Job",
        }
    }

    /// Where the workload's `suspend` flag is.
    pub fn suspend_patch(self, suspend: bool) -> Value {
        match self {
            WorkloadKind::PyTorchJob => {
                serde_json::json!({ "spec": { "runPolicy": { "suspend": suspend } } })
            }
            WorkloadKind::JobSet | WorkloadKind::Job => {
                serde_json::json!({ "spec": { "suspend": suspend } })
            }
        }
    }

    /// The condition types that mean it has ended.
    fn finished_conditions(self) -> &'static [&'static str] {
        match self {
            WorkloadKind::JobSet => &["Completed", "Failed"],
            WorkloadKind::PyTorchJob => &["Succeeded", "Failed"],
            WorkloadKind::Job => &["Complete", "Failed"],
        }
    }
}

/// A workload as the watcher publishes it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadView {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    /// The unicron job id: `unicron.io/job`, else the name.
    pub job: String,
    /// Agents in its pods announce it themselves.
    pub agents: bool,
    /// What the planner plans it with; `None` when it asks for no GPUs and
    /// says nothing of its size.
    pub spec: Option<JobSpec>,
    /// It has ended, and how (`Completed`, `Failed: reason`).
    pub finished: Option<String>,
    pub suspended: bool,
}

impl WorkloadView {
    /// `object` read as `kind`; `gpu_resource` is the resource a pod's
    /// GPUs are asked for with. `Ok(None)`: not a workload of its own (a
    /// JobSet's child Job). An error names the object and the field.
    pub fn of(
        kind: WorkloadKind,
        object: &DynamicObject,
        gpu_resource: &str,
    ) -> Result<Option<WorkloadView>, String> {
        let meta = &object.metadata;
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let name = meta.name.clone().unwrap_or_default();
        let owned = meta
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true));
        if owned {
            return Ok(None);
        }
        let at = || format!("{} {namespace}/{name}", kind.name());
        let annotations = meta.annotations.clone().unwrap_or_default();
        let job = annotations
            .get(JOB_ANNOTATION)
            .cloned()
            .unwrap_or_else(|| name.clone());
        let agents = match annotations.get(AGENTS_ANNOTATION).map(String::as_str) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(format!(
                    "{}: annotation {AGENTS_ANNOTATION}: `{other}` is not true or false",
                    at()
                ));
            }
        };
        let spec_json = object.data.get("spec").cloned().unwrap_or(Value::Null);
        let status = object.data.get("status").cloned().unwrap_or(Value::Null);
        let requested = requested_gpus(kind, &spec_json, gpu_resource);
        let spec = job_spec(&annotations, requested).map_err(|e| format!("{}: {e}", at()))?;
        let suspended = match kind {
            WorkloadKind::PyTorchJob => spec_json.pointer("/runPolicy/suspend"),
            _ => spec_json.pointer("/suspend"),
        }
        .and_then(Value::as_bool)
        .unwrap_or(false);
        let finished = status
            .get("conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| {
                c.get("status").and_then(Value::as_str) == Some("True")
                    && c.get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| kind.finished_conditions().contains(&t))
            })
            .map(|c| {
                let kind = c.get("type").and_then(Value::as_str).unwrap_or("");
                match c.get("reason").and_then(Value::as_str) {
                    Some(reason) if !reason.is_empty() => format!("{kind}: {reason}"),
                    _ => kind.to_string(),
                }
            });
        Ok(Some(WorkloadView {
            kind,
            namespace,
            name,
            job,
            agents,
            spec,
            finished,
            suspended,
        }))
    }
}

/// GPUs the workload's pods ask for in all (limits, else requests).
fn requested_gpus(kind: WorkloadKind, spec: &Value, resource: &str) -> i64 {
    let per_pod = |template: &Value| -> i64 {
        template
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                ["limits", "requests"]
                    .iter()
                    .find_map(|which| {
                        let q = c.get("resources")?.get(*which)?.get(resource)?;
                        q.as_i64()
                            .or_else(|| q.as_str().and_then(|s| s.parse().ok()))
                    })
                    .unwrap_or(0)
            })
            .sum()
    };
    let int = |v: Option<&Value>, default: i64| v.and_then(Value::as_i64).unwrap_or(default);
    let job = |job_spec: &Value| {
        int(job_spec.get("parallelism"), 1)
            * per_pod(job_spec.get("template").unwrap_or(&Value::Null))
    };
    match kind {
        WorkloadKind::Job => job(spec),
        WorkloadKind::JobSet => spec
            .get("replicatedJobs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| {
                int(r.get("replicas"), 1) * job(r.pointer("/template/spec").unwrap_or(&Value::Null))
            })
            .sum(),
        WorkloadKind::PyTorchJob => spec
            .get("pytorchReplicaSpecs")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.values())
            .map(|r| int(r.get("replicas"), 1) * per_pod(r.get("template").unwrap_or(&Value::Null)))
            .sum(),
    }
}

/// The planner's spec: sizes from the annotations, else what the pods ask
/// for; a linear throughput profile in whole units, as agents announce
/// theirs.
fn job_spec(
    annotations: &std::collections::BTreeMap<String, String>,
    requested: i64,
) -> Result<Option<JobSpec>, String> {
    let int = |key: &str| -> Result<Option<i64>, String> {
        annotations
            .get(key)
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|n| (0..=1_000_000).contains(n))
                    .ok_or_else(|| format!("annotation {key}: `{v}` is not a whole number of GPUs"))
            })
            .transpose()
    };
    let weight = match annotations.get(WEIGHT_ANNOTATION) {
        Some(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|w| w.is_finite() && *w >= 0.0)
            .ok_or_else(|| {
                format!("annotation {WEIGHT_ANNOTATION}: `{v}` is not a non-negative number")
            })?,
        None => 1.0,
    };
    let max = int(MAX_GPUS_ANNOTATION)?.unwrap_or(requested);
    let min = int(MIN_GPUS_ANNOTATION)?.unwrap_or(max);
    if max == 0 {
        return Ok(None);
    }
    if min > max {
        return Err(format!(
            "annotation {MIN_GPUS_ANNOTATION}: {min} is above the job's most GPUs {max}"
        ));
    }
    let unit = int(UNIT_GPUS_ANNOTATION)?.unwrap_or(max.min(8)).max(1);
    if max % unit != 0 || min % unit != 0 {
        return Err(format!(
            "annotation {UNIT_GPUS_ANNOTATION}: {unit} does not divide the job's sizes {min} and {max}"
        ));
    }
    let throughput = ((min / unit).max(1)..=max / unit)
        .map(|n| ThroughputPoint {
            gpus: (n * unit) as i32,
            flops: n as f64 * 1e12,
        })
        .collect();
    Ok(Some(JobSpec {
        weight,
        min_gpus: min as i32,
        max_gpus: max as i32,
        unit_gpus: unit as i32,
        dp_degree: (max / unit) as i32,
        checkpoint_interval_s: 0,
        throughput,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(kind: WorkloadKind, json: Value) -> DynamicObject {
        let mut object: DynamicObject = serde_json::from_value(json).unwrap();
        object.types = Some(kube::api::TypeMeta {
            api_version: kind.api_resource().api_version,
            kind: kind.name().into(),
        });
        object
    }

    fn jobset(annotations: Value) -> DynamicObject {
        object(
            WorkloadKind::JobSet,
            serde_json::json!({
                "metadata": { "name": "gpt", "namespace": "train", "annotations": annotations },
                "spec": { "replicatedJobs": [ { "name": "workers", "replicas": 2, "template": { "spec": {
                    "parallelism": 1,
                    "template": { "spec": { "containers": [ { "name": "t", "resources": { "limits": { "nvidia.com/gpu": 8 } } } ] } }
                } } } ] },
                "status": { "conditions": [ { "type": "Completed", "status": "False" } ] }
            }),
        )
    }

    #[test]
    fn a_jobset_is_planned_at_the_gpus_its_pods_ask_for() {
        let view = WorkloadView::of(
            WorkloadKind::JobSet,
            &jobset(serde_json::json!({})),
            "nvidia.com/gpu",
        )
        .unwrap()
        .unwrap();
        assert_eq!(view.job, "gpt");
        assert!(!view.agents && view.finished.is_none());
        let spec = view.spec.unwrap();
        assert_eq!((spec.min_gpus, spec.max_gpus, spec.unit_gpus), (16, 16, 8));
        assert_eq!(spec.throughput.len(), 1);
    }

    #[test]
    fn annotations_set_the_size_and_a_bad_one_names_object_and_field() {
        let annotations = serde_json::json!({
            "unicron.io/min-gpus": "8", "unicron.io/max-gpus": "32", "unicron.io/weight": "2.5"
        });
        let view = WorkloadView::of(WorkloadKind::JobSet, &jobset(annotations), "nvidia.com/gpu")
            .unwrap()
            .unwrap();
        let spec = view.spec.unwrap();
        assert_eq!((spec.min_gpus, spec.max_gpus, spec.weight), (8, 32, 2.5));
        assert_eq!(spec.throughput.len(), 4);
        let bad = jobset(serde_json::json!({ "unicron.io/min-gpus": "eight" }));
        assert_eq!(
            WorkloadView::of(WorkloadKind::JobSet, &bad, "nvidia.com/gpu").unwrap_err(),
            "JobSet train/gpt: annotation unicron.io/min-gpus: `eight` is not a whole number of GPUs"
        );
        let bad = jobset(serde_json::json!({ "unicron.io/agents": "yes" }));
        assert!(
            WorkloadView::of(WorkloadKind::JobSet, &bad, "nvidia.com/gpu")
                .unwrap_err()
                .contains("unicron.io/agents")
        );
    }

    #[test]
    fn a_child_job_is_its_parents_and_an_ended_job_says_how() {
        let child = object(
            WorkloadKind::Job,
            serde_json::json!({ "metadata": { "name": "gpt-workers-0", "namespace": "train",
                "ownerReferences": [ { "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "gpt", "uid": "u", "controller": true } ] } }),
        );
        assert_eq!(
            WorkloadView::of(WorkloadKind::Job, &child, "nvidia.com/gpu").unwrap(),
            None
        );
        let done = object(
            WorkloadKind::Job,
            serde_json::json!({ "metadata": { "name": "eval", "namespace": "train" },
                "spec": { "suspend": true },
                "status": { "conditions": [ { "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded" } ] } }),
        );
        let view = WorkloadView::of(WorkloadKind::Job, &done, "nvidia.com/gpu")
            .unwrap()
            .unwrap();
        assert_eq!(
            view.finished.as_deref(),
            Some("Failed: BackoffLimitExceeded")
        );
        assert!(view.suspended);
        assert_eq!(view.spec, None, "asks for no GPUs: not planned");
    }
}
