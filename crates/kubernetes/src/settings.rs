//! The `[kubernetes]` section: what `kube-watch` watches and publishes.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::client::ApiSettings;

/// Node conditions that mean a GPU fault when True, as NVIDIA's
/// NVSentinel and node-problem-detector's GPU plugins set them.
pub const DEFAULT_GPU_CONDITIONS: [&str; 7] = [
    "SysLogsXIDError",
    "SysLogsSXIDError",
    "SysLogsGPUFallenOff",
    "GpuXidError",
    "GpuNvlinkWatch",
    "GpuMemWatch",
    "GpuPcieWatch",
];

/// The `[kubernetes]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WatchSettings {
    /// The unicron cluster this Kubernetes cluster is. Required.
    pub cluster: String,
    /// A kubeconfig file; unset: `KUBECONFIG`, `~/.kube/config` or the
    /// pod's service account.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Namespaces whose pods and workloads are watched.
    pub namespaces: Vec<String>,
    /// Seconds a list or read may take.
    pub timeout_s: f64,
    /// The resource a node's GPUs are offered as.
    pub gpu_resource: String,
    /// Publish `node_joined` for each Ready node with GPUs, so the planner
    /// plans workloads without agents. With agents in the pods, they
    /// announce their nodes (with their snapshot addresses): set false.
    pub announce_nodes: bool,
    /// Node condition types that mean a GPU fault when True.
    pub gpu_conditions: Vec<String>,
}

impl Default for WatchSettings {
    fn default() -> Self {
        let api = ApiSettings::default();
        WatchSettings {
            cluster: String::new(),
            kubeconfig: api.kubeconfig,
            context: api.context,
            namespaces: api.namespaces,
            timeout_s: api.timeout_s,
            gpu_resource: "nvidia.com/gpu".to_string(),
            announce_nodes: true,
            gpu_conditions: DEFAULT_GPU_CONDITIONS
                .iter()
                .map(|c| c.to_string())
                .collect(),
        }
    }
}

impl WatchSettings {
    pub fn api(&self) -> ApiSettings {
        ApiSettings {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            namespaces: self.namespaces.clone(),
            timeout_s: self.timeout_s,
        }
    }

    /// The first setting that makes no sense, naming its field.
    pub fn validate(&self) -> Result<(), String> {
        if self.cluster.is_empty() {
            return Err(
                "kubernetes.cluster: required (the unicron cluster this Kubernetes cluster is)"
                    .into(),
            );
        }
        if self.gpu_resource.is_empty() {
            return Err("kubernetes.gpu_resource: must not be empty".into());
        }
        self.api().validate("kubernetes")
    }
}
