//! The agent's metrics, each declared once (see `unicron_bus::metrics::Metric`).

use unicron_bus::metrics::Metric;

/// Telemetry records dropped (broker away longer than the buffer holds,
/// or not delivered).
pub const RECORDS_DROPPED: Metric = Metric::counter(
    "unicron_agent_records_dropped_total",
    "Telemetry records dropped because the broker was away longer than the buffer holds, or not delivered.",
);
/// Worker output lines not published over `agent.max_lines_per_s`.
pub const LINES_CAPPED: Metric = Metric::counter(
    "unicron_agent_lines_capped_total",
    "Worker output lines not published because the worker exceeded agent.max_lines_per_s.",
);
/// Worker output lines cut to `agent.max_line_bytes`.
pub const LINES_TRUNCATED: Metric = Metric::counter(
    "unicron_agent_lines_truncated_total",
    "Worker output lines cut to agent.max_line_bytes.",
);
/// Bytes of in-memory snapshots held.
pub const SNAPSHOT_BYTES: Metric = Metric::gauge(
    "unicron_agent_snapshot_bytes",
    "Bytes of in-memory snapshots held (own ranks', replicas, fetched for a restore).",
);
/// `agent.snapshot_memory_limit`.
pub const SNAPSHOT_MEMORY_LIMIT: Metric = Metric::gauge(
    "unicron_agent_snapshot_memory_limit_bytes",
    "The agent's snapshot memory limit (agent.snapshot_memory_limit), bytes.",
);
/// Complete snapshots held, by `origin`.
pub const SNAPSHOTS_STORED: Metric = Metric::counter(
    "unicron_agent_snapshots_stored_total",
    "Complete snapshots held, by origin (own, replica, fetched).",
);
/// Snapshots or replicas not kept, and restores that fell back to disk,
/// by `reason`.
pub const SNAPSHOTS_REFUSED: Metric = Metric::counter(
    "unicron_agent_snapshots_refused_total",
    "Snapshots or replicas not kept, and restores that fell back to the disk checkpoint, by reason.",
);
/// Snapshot bytes sent to and kept by the replica peer.
pub const REPLICA_BYTES: Metric = Metric::counter(
    "unicron_agent_replica_bytes_total",
    "Snapshot bytes sent to and kept by the peer that holds this node's replicas.",
);
/// Time to send one replica and have it acknowledged.
pub const REPLICA_SECONDS: Metric = Metric::histogram(
    "unicron_agent_replica_seconds",
    "Time to send one replica and have it acknowledged, seconds.",
);

/// Every metric the agent exports.
pub const METRICS: &[Metric] = &[
    RECORDS_DROPPED,
    LINES_CAPPED,
    LINES_TRUNCATED,
    SNAPSHOT_BYTES,
    SNAPSHOT_MEMORY_LIMIT,
    SNAPSHOTS_STORED,
    SNAPSHOTS_REFUSED,
    REPLICA_BYTES,
    REPLICA_SECONDS,
];
