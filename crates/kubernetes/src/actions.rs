//! What the executor does through the API server: isolate a node (cordon,
//! taint, evict the job's pods), give it back, and restart, pause or resume
//! a workload. Every write is conditional on the resourceVersion it read
//! (a 409 is read again and retried), and every answer is checked: nothing
//! is taken for success.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, DeleteParams, DynamicObject, EvictParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::client::Kube;
use crate::error::KubeError;
use crate::view::{self, ISOLATED_TAINT, ISOLATION_ANNOTATION, STOPPED_BY};
use crate::workload::{WorkloadKind, WorkloadView};

/// Writes of one object retried on 409 Conflict, each on a fresh read.
const CONFLICT_ATTEMPTS: u32 = 5;

/// How pods leave an isolated node.
#[derive(Debug, Clone, PartialEq)]
pub struct Evictions {
    /// Attempts of one eviction a PodDisruptionBudget refuses (429).
    pub attempts: u32,
    /// Wait before the second attempt; doubled after each.
    pub first_delay: Duration,
    /// Delete a pod at once (grace 0) when its node is not Ready: its
    /// kubelet cannot confirm the eviction, so the pod would stay
    /// Terminating and its controller would not replace it.
    pub force_on_unready: bool,
}

impl Default for Evictions {
    fn default() -> Self {
        Evictions {
            attempts: 5,
            first_delay: Duration::from_millis(500),
            force_on_unready: true,
        }
    }
}

/// One node's isolation: the failure behind it and the command doing it.
pub struct Isolation<'a> {
    pub node: &'a str,
    pub failure: &'a str,
    pub command_id: &'a str,
    /// The job the planner takes the node from (noted on the node; every
    /// workload pod leaves it).
    pub job: Option<&'a str>,
}

impl Kube {
    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    async fn node(&self, name: &str) -> Result<Node, KubeError> {
        let nodes = self.nodes();
        self.call("get", &format!("node {name}"), nodes.get(name))
            .await
    }

    /// Cordons the node, taints it `unicron.io/isolated=<failure>:NoSchedule`
    /// (so nothing lands there, whoever schedules it) and evicts the
    /// workload pods on it. A node someone else holds keeps their cordon and
    /// taints; the pods still leave it.
    pub async fn isolate(
        &self,
        isolation: &Isolation<'_>,
        evictions: &Evictions,
    ) -> Result<String, KubeError> {
        let name = isolation.node;
        let mut done = String::new();
        for attempt in 1..=CONFLICT_ATTEMPTS {
            let node = self.node(name).await?;
            if view::unicron_taint(&node).is_some() {
                done = format!("{name} already isolated by unicron");
                break;
            }
            if let Some(theirs) = view::held_by_others(&node) {
                done = format!("left as it is: {name} is {theirs} by someone else");
                break;
            }
            let mut taints = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            taints.push(Taint {
                key: ISOLATED_TAINT.to_string(),
                value: Some(view::taint_value(isolation.failure)),
                effect: "NoSchedule".to_string(),
                time_added: None,
            });
            let patch = json!({
                "metadata": {
                    "resourceVersion": node.metadata.resource_version,
                    "annotations": { ISOLATION_ANNOTATION: format!(
                        "failure {} command {} job {}",
                        isolation.failure,
                        isolation.command_id,
                        isolation.job.unwrap_or("-")
                    ) },
                },
                "spec": { "unschedulable": true, "taints": taints },
            });
            match self.patch_node(name, &patch).await {
                Ok(()) => {
                    done = format!(
                        "{name} cordoned and tainted {ISOLATED_TAINT}={}:NoSchedule",
                        view::taint_value(isolation.failure)
                    );
                    break;
                }
                Err(e) if e.code() == Some(409) && attempt < CONFLICT_ATTEMPTS => continue,
                Err(e) => return Err(e),
            }
        }
        let node = self.node(name).await?;
        let force = evictions.force_on_unready && !view::is_ready(&node);
        let evicted = self
            .evict_from(name, isolation.command_id, evictions, force)
            .await?;
        if evicted.is_empty() {
            done.push_str("; no workload pod on it");
        } else {
            done.push_str(&format!(
                "; {} {}",
                if force {
                    "evicted and force-deleted (node not Ready)"
                } else {
                    "evicted"
                },
                evicted.join(", ")
            ));
        }
        Ok(done)
    }

    async fn patch_node(&self, name: &str, patch: &serde_json::Value) -> Result<(), KubeError> {
        let nodes = self.nodes();
        self.call(
            "patch",
            &format!("node {name}"),
            nodes.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await
        .map(|_| ())
    }

    /// Uncordons the node and removes unicron's taint, only where unicron's
    /// taint is: a cordon or taint of someone else's is never undone.
    pub async fn give_back(&self, name: &str) -> Result<String, KubeError> {
        for attempt in 1..=CONFLICT_ATTEMPTS {
            let node = self.node(name).await?;
            if view::unicron_taint(&node).is_none() {
                return Ok(match view::held_by_others(&node) {
                    Some(theirs) => format!("left as it is: {name} is {theirs} by someone else"),
                    None => format!("{name} is not isolated by unicron"),
                });
            }
            let taints: Vec<Taint> = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t.key != ISOLATED_TAINT)
                .collect();
            let patch = json!({
                "metadata": {
                    "resourceVersion": node.metadata.resource_version,
                    "annotations": { ISOLATION_ANNOTATION: null },
                },
                "spec": { "unschedulable": null, "taints": taints },
            });
            match self.patch_node(name, &patch).await {
                Ok(()) => return Ok(format!("{name} uncordoned, {ISOLATED_TAINT} removed")),
                Err(e) if e.code() == Some(409) && attempt < CONFLICT_ATTEMPTS => continue,
                Err(e) => return Err(e),
            }
        }
        unreachable_conflicts(name)
    }

    /// The workload pods on `node` in the watched namespaces: every pod a
    /// job label names, the command's job's and any other's. An isolated
    /// node is emptied whatever the planner believes runs there (on
    /// Kubernetes the scheduler, not the planner, places pods of workloads
    /// without agents).
    async fn pods_on(&self, node: &str) -> Result<Vec<Pod>, KubeError> {
        let mut found = Vec::new();
        for namespace in &self.namespaces {
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
            let listed = self
                .call(
                    "list",
                    &format!("pods in namespace {namespace}"),
                    pods.list(&ListParams::default().fields(&format!("spec.nodeName={node}"))),
                )
                .await?;
            found.extend(listed.items.into_iter().filter(|pod| {
                pod.metadata.deletion_timestamp.is_none()
                    && view::job_of(
                        pod.metadata.labels.as_ref(),
                        pod.metadata.annotations.as_ref(),
                    )
                    .is_some()
            }));
        }
        Ok(found)
    }

    /// Marks each pod as stopped by `command_id`, then evicts it through the
    /// Eviction API; a PodDisruptionBudget's 429 is retried as `evictions`
    /// says. `force`: then deleted with no grace. The pods' names.
    async fn evict_from(
        &self,
        node: &str,
        command_id: &str,
        evictions: &Evictions,
        force: bool,
    ) -> Result<Vec<String>, KubeError> {
        let mut evicted = Vec::new();
        for pod in self.pods_on(node).await? {
            let (Some(name), Some(namespace)) =
                (pod.metadata.name.clone(), pod.metadata.namespace.clone())
            else {
                continue;
            };
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            let what = format!("pod {namespace}/{name}");
            let mark = json!({ "metadata": { "annotations": { STOPPED_BY: command_id } } });
            match self
                .call(
                    "patch",
                    &what,
                    pods.patch(&name, &PatchParams::default(), &Patch::Merge(&mark)),
                )
                .await
            {
                Err(e) if e.code() == Some(404) => continue,
                other => other.map(|_| ())?,
            }
            let mut delay = evictions.first_delay;
            let mut attempt = 1;
            loop {
                match self
                    .call(
                        "create",
                        &format!("eviction of {what}"),
                        pods.evict(&name, &EvictParams::default()),
                    )
                    .await
                {
                    Ok(_) => break,
                    Err(e) if e.code() == Some(404) => break,
                    Err(e) if e.code() == Some(429) && attempt < evictions.attempts => {
                        tracing::info!(pod = %what, attempt, "eviction refused by a disruption budget; retrying");
                        tokio::time::sleep(delay).await;
                        delay *= 2;
                        attempt += 1;
                    }
                    Err(KubeError::Api {
                        code: 429, message, ..
                    }) => {
                        return Err(KubeError::Api {
                            verb: "create".into(),
                            resource: format!("eviction of {what}"),
                            code: 429,
                            reason: "TooManyRequests".into(),
                            message: format!(
                                "refused {attempt} times by a PodDisruptionBudget: {message}"
                            ),
                        });
                    }
                    Err(e) => return Err(e),
                }
            }
            if force {
                let now = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                };
                match self.call("delete", &what, pods.delete(&name, &now)).await {
                    Ok(_) => {}
                    Err(e) if e.code() == Some(404) => {}
                    Err(e) => return Err(e),
                }
            }
            evicted.push(format!("{namespace}/{name}"));
        }
        Ok(evicted)
    }

    /// The workload running `job` in the watched namespaces, looked up by
    /// kind (JobSet, PyTorchJob, Job) and name; a kind whose API the server
    /// does not serve is skipped.
    pub async fn workload(
        &self,
        job: &str,
        gpu_resource: &str,
    ) -> Result<Option<WorkloadView>, KubeError> {
        for namespace in &self.namespaces {
            for kind in WorkloadKind::ALL {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), namespace, &kind.api_resource());
                let what = format!("{} {namespace}/{job}", kind.name());
                match self.call("get", &what, api.get_opt(job)).await {
                    Ok(Some(object)) => {
                        if let Ok(Some(view)) = WorkloadView::of(kind, &object, gpu_resource) {
                            return Ok(Some(view));
                        }
                    }
                    Ok(None) => {}
                    // The kind's API is not served here (no CRD).
                    Err(e) if e.code() == Some(404) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(None)
    }

    /// Restarts a workload through its own controller: suspended (the
    /// controller stops every pod; pods stopped by a suspension are no
    /// failures, so no backoff and no backoff limit spent), then, once the
    /// controller says `Suspended`, resumed: every pod starts again, as a
    /// collective job must, and the scheduler keeps them off the nodes
    /// unicron isolated. The same for JobSet, PyTorchJob and Job.
    pub async fn restart(&self, workload: &WorkloadView) -> Result<String, KubeError> {
        self.suspend(workload, true).await?;
        let (api, what) = self.workload_api(workload);
        let deadline = tokio::time::Instant::now() + 3 * self.timeout;
        loop {
            let object = self.call("get", &what, api.get(&workload.name)).await?;
            if suspended_condition(&object) {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                // Left suspended: the executor's retry resumes it.
                return Err(KubeError::Timeout {
                    verb: "suspend".into(),
                    resource: what,
                    seconds: (3 * self.timeout).as_secs_f64(),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.suspend(workload, false).await?;
        Ok(format!(
            "{what} restarted: suspended until its controller stopped every pod, then resumed"
        ))
    }

    fn workload_api(&self, workload: &WorkloadView) -> (Api<DynamicObject>, String) {
        let api = Api::namespaced_with(
            self.client.clone(),
            &workload.namespace,
            &workload.kind.api_resource(),
        );
        let what = format!(
            "{} {}/{}",
            workload.kind.name(),
            workload.namespace,
            workload.name
        );
        (api, what)
    }

    /// Sets the workload's `suspend` flag (a suspended Job or JobSet has
    /// its pods deleted by its controller; resuming creates them again).
    pub async fn suspend(
        &self,
        workload: &WorkloadView,
        suspend: bool,
    ) -> Result<String, KubeError> {
        let (api, what) = self.workload_api(workload);
        let patch = workload.kind.suspend_patch(suspend);
        self.call(
            "patch",
            &what,
            api.patch(
                &workload.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            ),
        )
        .await?;
        Ok(format!(
            "{what} {}",
            if suspend { "suspended" } else { "resumed" }
        ))
    }
}

/// Whether the workload's controller reports it `Suspended` (Job, JobSet
/// and the training operator all set that condition).
fn suspended_condition(object: &DynamicObject) -> bool {
    object
        .data
        .pointer("/status/conditions")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(serde_json::Value::as_str) == Some("Suspended")
                && c.get("status").and_then(serde_json::Value::as_str) == Some("True")
        })
}

fn unreachable_conflicts(name: &str) -> Result<String, KubeError> {
    Err(KubeError::Api {
        verb: "patch".into(),
        resource: format!("node {name}"),
        code: 409,
        reason: "Conflict".into(),
        message: format!("changed by someone else {CONFLICT_ATTEMPTS} times in a row"),
    })
}
