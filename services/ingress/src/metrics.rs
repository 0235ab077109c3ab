//! The ingress's metrics, each declared once (see `unicron_bus::metrics::Metric`).

use unicron_bus::metrics::Metric;

/// Records passed on to the shared topics, by `topic` (shared name).
pub const FORWARDED: Metric = Metric::counter(
    "unicron_ingress_forwarded_total",
    "Records of a cluster's own topics passed on to the shared topics, by shared topic.",
);
/// Records refused, by `reason` (`foreign_cluster`).
pub const REJECTED: Metric = Metric::counter(
    "unicron_ingress_rejected_total",
    "Records of a cluster's own topics refused and dead-lettered, by reason.",
);

/// Every metric of the ingress.
pub const METRICS: &[Metric] = &[FORWARDED, REJECTED];
