//! unicron and Kubernetes. What the API server says about nodes, pods and
//! training workloads (JobSet, Kubeflow's PyTorchJob, Job), read through
//! watches; what unicron tells it (cordon, taint and evict; restart, pause
//! and resume a workload) through its API; and, behind the `testing`
//! feature, a real control plane on loopback for tests.
//!
//! Every API call has a timeout; a failed call is an error naming the verb
//! and the resource, never taken for success, and a failed watch is
//! "unknown", never "healthy".

pub mod actions;
pub mod client;
pub mod error;
pub mod metrics;
pub mod settings;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tracker;
pub mod view;
pub mod watcher;
pub mod workload;

pub use self::metrics::METRICS;
pub use actions::{Evictions, Isolation};
pub use client::{ApiSettings, Kube};
pub use error::KubeError;
pub use settings::WatchSettings;
pub use watcher::run_watcher;
