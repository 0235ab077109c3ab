//! The Kubernetes crate's metrics, each declared once (see
//! `unicron_bus::metrics::Metric`).

use unicron_bus::metrics::Metric;

/// Watch events received by `kube-watch`, by `what` (nodes, pods, the
/// workload kind).
pub const WATCH_EVENTS: Metric = Metric::counter(
    "unicron_kubernetes_watch_events_total",
    "Objects kube-watch received from the API server's watches, by what (nodes, pods, JobSet, PyTorchJob, Job).",
);
/// Failed watch or list calls (API server unreachable, RBAC, an expired
/// watch that had to relist), by `what`.
pub const WATCH_ERRORS: Metric = Metric::counter(
    "unicron_kubernetes_watch_errors_total",
    "Errors of kube-watch's watches (unreachable API server, forbidden, expired watch), by what. While they last the cluster's state is unknown and nothing is published.",
);
/// Workloads whose annotations could not be read (named in the log).
pub const BAD_OBJECTS: Metric = Metric::counter(
    "unicron_kubernetes_bad_objects_total",
    "Workloads kube-watch could not read (a malformed unicron.io annotation); each is named once in the log.",
);
/// Records `kube-watch` published, by `kind` (cluster event kind, or log).
pub const PUBLISHED: Metric = Metric::counter(
    "unicron_kubernetes_published_total",
    "Records kube-watch published, by kind (node_down, node_drained, node_repaired, node_joined, job_submitted, job_updated, job_finished, log).",
);

/// Every metric the Kubernetes crate exports.
pub const METRICS: &[Metric] = &[WATCH_EVENTS, WATCH_ERRORS, BAD_OBJECTS, PUBLISHED];
