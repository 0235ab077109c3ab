//! What Kubernetes tells a pod about itself, so a pod whose entrypoint is
//! `unicron agent -- python3 train.py` needs no per-pod arguments: the node
//! it runs on and its address (the downward API), the job, its node rank
//! and the job's nodes (JobSet's labels and `JOB_COMPLETION_INDEX`, the
//! training operator's `PET_*` variables, or its `RANK` and `WORLD_SIZE`
//! where it sets no `PET_*`). The pod's `MASTER_ADDR` is not used: the
//! planner's start commands are the rendezvous. docs/kubernetes.md has the
//! pod spec that provides them.

/// Where the downward API's labels file is mounted unless
/// `UNICRON_POD_LABELS` says otherwise.
pub const LABELS_FILE: &str = "/etc/podinfo/labels";

/// A pod's view of its place in a training workload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodStep {
    /// `NODE_NAME` (downward API `spec.nodeName`): the Kubernetes node,
    /// the name the planner and `kube-watch` know it by.
    pub node: Option<String>,
    /// `POD_IP` (downward API `status.podIP`), else the pod's hostname:
    /// where the other pods' workers reach this one.
    pub address: Option<String>,
    /// The workload: `unicron.io/job`, JobSet's `jobset-name`, the training
    /// operator's `job-name` label.
    pub job: Option<String>,
    /// This pod's place among the job's pods (its node rank).
    pub rank: Option<u32>,
    /// The job's pods (its nodes).
    pub nodes: Option<u32>,
    /// Workers per pod (`PET_NPROC_PER_NODE`).
    pub nproc_per_node: Option<u32>,
}

impl PodStep {
    /// `None` outside Kubernetes (`KUBERNETES_SERVICE_HOST` unset).
    /// `labels` is the downward API's labels file, if mounted.
    pub fn from_env(
        var: impl Fn(&str) -> Option<String>,
        labels: Option<&str>,
    ) -> Result<Option<PodStep>, String> {
        if var("KUBERNETES_SERVICE_HOST").is_none() {
            return Ok(None);
        }
        let set = |name: &str| var(name).filter(|v| !v.is_empty());
        let labels = labels.map(parse_labels).transpose()?.unwrap_or_default();
        let label = |key: &str| {
            labels
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let number = |what: &str, value: Option<String>| -> Result<Option<u32>, String> {
            value
                .map(|v| {
                    v.parse::<u32>()
                        .map_err(|_| format!("{what}: `{v}` is not a whole number"))
                })
                .transpose()
        };
        let job = label("unicron.io/job")
            .or_else(|| label("jobset.sigs.k8s.io/jobset-name"))
            .or_else(|| label("training.kubeflow.org/job-name"));
        // PyTorchJob: PET_NNODES may be `min:max` (elastic): the most.
        let nnodes = set("PET_NNODES").map(|v| v.rsplit(':').next().unwrap_or(&v).to_string());
        // Older training operators set only RANK and WORLD_SIZE, one
        // process per pod: then they count pods.
        let one_per_pod = set("PET_NPROC_PER_NODE").is_none();
        let nodes = match number("PET_NNODES", nnodes)? {
            Some(n) => Some(n),
            None if one_per_pod && set("WORLD_SIZE").is_some() => {
                number("WORLD_SIZE", set("WORLD_SIZE"))?
            }
            // JobSet: one pod per child Job, as JobSet lays out multi-node training.
            None => number(
                "label jobset.sigs.k8s.io/global-replicas",
                label("jobset.sigs.k8s.io/global-replicas"),
            )?,
        };
        let rank = match number("PET_NODE_RANK", set("PET_NODE_RANK"))? {
            Some(r) => Some(r),
            None if one_per_pod && set("RANK").is_some() => number("RANK", set("RANK"))?,
            None => {
                let job_index = number(
                    "label jobset.sigs.k8s.io/job-global-index",
                    label("jobset.sigs.k8s.io/job-global-index"),
                )?;
                let completion = number("JOB_COMPLETION_INDEX", set("JOB_COMPLETION_INDEX"))?;
                match (job_index, completion) {
                    (Some(j), _) => Some(j),
                    (None, c) => c,
                }
            }
        };
        Ok(Some(PodStep {
            node: set("NODE_NAME"),
            address: set("POD_IP").or_else(|| set("HOSTNAME")),
            job,
            rank,
            nodes,
            nproc_per_node: number("PET_NPROC_PER_NODE", set("PET_NPROC_PER_NODE"))?,
        }))
    }
}

/// The downward API's labels file: one `key="value"` per line, the value
/// quoted as Go quotes strings.
fn parse_labels(text: &str) -> Result<Vec<(String, String)>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| format!("pod labels: `{line}` is not key=\"value\""))?;
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .ok_or_else(|| format!("pod labels: {key}: the value is not quoted"))?;
            Ok((
                key.to_string(),
                value.replace("\\\"", "\"").replace("\\\\", "\\"),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_jobset_pod_knows_its_node_job_rank_and_world() {
        let labels = "batch.kubernetes.io/job-completion-index=\"0\"\n\
            jobset.sigs.k8s.io/global-replicas=\"4\"\n\
            jobset.sigs.k8s.io/job-global-index=\"2\"\n\
            jobset.sigs.k8s.io/jobset-name=\"gpt\"\n";
        let step = PodStep::from_env(
            env(&[
                ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
                ("NODE_NAME", "gpu-17"),
                ("POD_IP", "10.0.3.7"),
                ("JOB_COMPLETION_INDEX", "0"),
                ("HOSTNAME", "gpt-workers-2-0"),
            ]),
            Some(labels),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            step,
            PodStep {
                node: Some("gpu-17".into()),
                address: Some("10.0.3.7".into()),
                job: Some("gpt".into()),
                rank: Some(2),
                nodes: Some(4),
                nproc_per_node: None,
            }
        );
    }

    #[test]
    fn a_pytorchjob_pod_reads_the_operators_variables() {
        let labels = "training.kubeflow.org/job-name=\"llama\"\ntraining.kubeflow.org/replica-type=\"worker\"\n";
        let step = PodStep::from_env(
            env(&[
                ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
                ("PET_NNODES", "2:8"),
                ("PET_NODE_RANK", "3"),
                ("PET_NPROC_PER_NODE", "8"),
                ("HOSTNAME", "llama-worker-2"),
            ]),
            Some(labels),
        )
        .unwrap()
        .unwrap();
        assert_eq!(step.job.as_deref(), Some("llama"));
        assert_eq!(
            (step.rank, step.nodes, step.nproc_per_node),
            (Some(3), Some(8), Some(8))
        );
        assert_eq!(step.address.as_deref(), Some("llama-worker-2"));
        assert_eq!(PodStep::from_env(env(&[]), None).unwrap(), None);
        let old = PodStep::from_env(
            env(&[
                ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
                ("RANK", "1"),
                ("WORLD_SIZE", "4"),
                ("MASTER_ADDR", "llama-master-0"),
            ]),
            Some(labels),
        )
        .unwrap()
        .unwrap();
        assert_eq!((old.rank, old.nodes), (Some(1), Some(4)));
        let bad = PodStep::from_env(
            env(&[("KUBERNETES_SERVICE_HOST", "x"), ("PET_NODE_RANK", "two")]),
            None,
        );
        assert_eq!(
            bad.unwrap_err(),
            "PET_NODE_RANK: `two` is not a whole number"
        );
        assert!(
            PodStep::from_env(env(&[("KUBERNETES_SERVICE_HOST", "x")]), Some("app=web"))
                .unwrap_err()
                .contains("not quoted")
        );
    }
}
