//! The remote-write receiver's metrics, each declared once (see
//! `unicron_bus::metrics::Metric`).

use unicron_bus::metrics::Metric;

/// Requests answered, by HTTP `status`.
pub const REQUESTS: Metric = Metric::counter(
    "unicron_remote_write_requests_total",
    "Remote-write requests answered, by HTTP status.",
);
/// Samples published to the telemetry topic (acknowledged).
pub const SAMPLES: Metric = Metric::counter(
    "unicron_remote_write_samples_total",
    "Samples published to the telemetry topic and acknowledged.",
);
/// Series not published, by `reason` (`no_node`, `no_name`).
pub const SERIES_SKIPPED: Metric = Metric::counter(
    "unicron_remote_write_series_skipped_total",
    "Remote-write series not published, by reason (no_node, no_name).",
);
/// Samples not published, by `reason` (`stale`: Prometheus' stale marker;
/// `too_large`: one sample over `kafka.max_record_bytes`).
pub const SAMPLES_SKIPPED: Metric = Metric::counter(
    "unicron_remote_write_samples_skipped_total",
    "Remote-write samples not published, by reason (stale, too_large).",
);
/// Requests refused before any sample was published, by `reason`
/// (`missing`, `malformed`, `unknown_token`: 401; `foreign_cluster`: a
/// series of a cluster the token does not write, 403).
pub const REJECTED: Metric = Metric::counter(
    "unicron_remote_write_rejected_total",
    "Remote-write requests refused for their credentials or for a cluster their token does not write, by reason.",
);
/// Seconds from a request's arrival to its answer.
pub const REQUEST_SECONDS: Metric = Metric::histogram(
    "unicron_remote_write_request_seconds",
    "Seconds from a remote-write request's arrival to its answer.",
);

/// Every metric the receiver exports.
pub const METRICS: &[Metric] = &[
    REQUESTS,
    SAMPLES,
    SERIES_SKIPPED,
    SAMPLES_SKIPPED,
    REJECTED,
    REQUEST_SECONDS,
];
