//! Which attribute or label names the cluster, node, GPU, job and rank.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Per input: the attribute keys to look for, first present wins. The
/// defaults cover dcgm-exporter (`Hostname`, `gpu`, `UUID` kept as a label),
/// Kubernetes (`k8s.node.name`, `k8s.pod.name`), OpenTelemetry resource
/// conventions (`host.name`) and Fluent Bit's Kubernetes filter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LabelMap {
    pub cluster: Vec<String>,
    pub node: Vec<String>,
    pub gpu: Vec<String>,
    /// Not Prometheus' `job` label: that names the scrape job, not training.
    pub job: Vec<String>,
    pub rank: Vec<String>,
    /// Cluster of records that carry none of the `cluster` keys.
    pub default_cluster: String,
}

fn keys(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

impl Default for LabelMap {
    fn default() -> Self {
        LabelMap {
            cluster: keys(&["cluster", "k8s.cluster.name", "cluster_name"]),
            node: keys(&[
                "Hostname",
                "k8s.node.name",
                "host.name",
                "hostname",
                "host",
                "node",
                "kubernetes.host",
                "nodename",
            ]),
            gpu: keys(&["gpu", "gpu_index", "device_index"]),
            job: keys(&[
                "training_job",
                "training.job",
                "job_id",
                "k8s.job.name",
                "slurm_job_id",
                "kubernetes.labels.job-name",
            ]),
            rank: keys(&["rank", "training.rank", "RANK", "local_rank_global"]),
            default_cluster: "default".into(),
        }
    }
}

/// Where each identity field came from, resolved against one attribute set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub cluster: String,
    pub node: Option<String>,
    pub gpu: Option<i32>,
    pub job: Option<String>,
    pub rank: Option<i32>,
}

impl LabelMap {
    fn pick<'a>(keys: &[String], attrs: &'a BTreeMap<String, String>) -> Option<&'a str> {
        keys.iter()
            .find_map(|k| attrs.get(k).map(String::as_str))
            .filter(|v| !v.is_empty())
    }

    /// Resolves identity from merged attributes.
    pub fn identify(&self, attrs: &BTreeMap<String, String>) -> Identity {
        Identity {
            cluster: Self::pick(&self.cluster, attrs)
                .unwrap_or(&self.default_cluster)
                .to_string(),
            node: Self::pick(&self.node, attrs).map(str::to_string),
            gpu: Self::pick(&self.gpu, attrs).and_then(|v| v.parse().ok()),
            job: Self::pick(&self.job, attrs).map(str::to_string),
            rank: Self::pick(&self.rank, attrs).and_then(|v| v.parse().ok()),
        }
    }

    /// The error for a record with no node attribute.
    pub fn missing_node(&self) -> String {
        format!("no node attribute (looked for {})", self.node.join(", "))
    }
}
