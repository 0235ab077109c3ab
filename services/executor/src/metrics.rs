//! The executor's metrics, each declared once (see `unicron_bus::metrics::Metric`).

use unicron_bus::metrics::Metric;

/// Results published, by `action` and `status`.
pub const COMMANDS: Metric = Metric::counter(
    "unicron_executor_commands_total",
    "Results published, by action and status (accepted, succeeded, failed, rejected).",
);
/// Commands refused without acting, by `reason`.
pub const REJECTIONS: Metric = Metric::counter(
    "unicron_executor_rejections_total",
    "Commands refused without acting, by reason (unsigned, forged, foreign, expired, unknown_action).",
);
/// Commands seen again after they were handled.
pub const DUPLICATES: Metric = Metric::counter(
    "unicron_executor_duplicates_total",
    "Commands seen again after they were handled, not acted on.",
);
/// Backend attempts retried.
pub const RETRIES: Metric = Metric::counter(
    "unicron_executor_retries_total",
    "Backend attempts retried after a transient error.",
);
/// Time from the first backend attempt to the final answer.
pub const BACKEND_SECONDS: Metric = Metric::histogram(
    "unicron_executor_backend_seconds",
    "Time from the first backend attempt to the final answer, retries included, seconds.",
);

/// Every metric the executor exports.
pub const METRICS: &[Metric] = &[COMMANDS, REJECTIONS, DUPLICATES, RETRIES, BACKEND_SECONDS];
