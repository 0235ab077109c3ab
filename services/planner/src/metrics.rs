//! The planner's metrics, each declared once (see `unicron_bus::metrics::Metric`).

use unicron_bus::metrics::Metric;

/// Time to apply one input and decide.
pub const DECISION_SECONDS: Metric = Metric::histogram(
    "unicron_planner_decision_seconds",
    "Time to apply one input and decide, seconds.",
);
/// Decisions taken, by `cluster`.
pub const DECISIONS: Metric = Metric::counter(
    "unicron_planner_decisions_total",
    "Decisions taken, by cluster.",
);
/// Commands issued, by `action`.
pub const COMMANDS: Metric = Metric::counter(
    "unicron_planner_commands_total",
    "Commands issued, by action.",
);
/// Decisions of other instances applied at a takeover.
pub const CAUGHT_UP_DECISIONS: Metric = Metric::counter(
    "unicron_planner_caught_up_decisions_total",
    "Decisions of other instances applied when taking over partitions.",
);
/// Decisions of other instances not reproduced at a takeover.
pub const CATCH_UP_DIVERGENCES: Metric = Metric::counter(
    "unicron_planner_catch_up_divergences_total",
    "Decisions of other instances this instance did not reproduce (policy or configuration differ).",
);
/// Checkpoints written.
pub const CHECKPOINTS: Metric = Metric::counter(
    "unicron_planner_checkpoints_total",
    "Checkpoints of an input partition written (manifest published).",
);
/// Partitions taken over from a checkpoint.
pub const CHECKPOINTS_RESTORED: Metric = Metric::counter(
    "unicron_planner_checkpoints_restored_total",
    "Input partitions taken over from a checkpoint ahead of the local store.",
);
/// Checkpoints not used at a takeover.
pub const CHECKPOINTS_REJECTED: Metric = Metric::counter(
    "unicron_planner_checkpoints_rejected_total",
    "Checkpoints not used because a cluster's state in them did not parse or failed admission checks.",
);
/// WAF of the chosen plan, by `cluster`.
pub const WAF: Metric = Metric::gauge(
    "unicron_planner_waf",
    "WAF of the chosen plan, by cluster (weighted FLOP/s).",
);
/// Each job's wall time by cause, from the log (status page's reader).
pub const GOODPUT: Metric = Metric::gauge(
    "unicron_goodput_seconds",
    "A job's wall time by cause (productive, snapshot, detection, recovery, redone, waiting), seconds, by cluster, job and cause.",
);

/// Every metric the planner exports.
pub const METRICS: &[Metric] = &[
    DECISION_SECONDS,
    DECISIONS,
    COMMANDS,
    CAUGHT_UP_DECISIONS,
    CATCH_UP_DIVERGENCES,
    CHECKPOINTS,
    CHECKPOINTS_RESTORED,
    CHECKPOINTS_REJECTED,
    GOODPUT,
    WAF,
];
