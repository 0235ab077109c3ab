//! The command protocol's metrics, each declared once (see
//! `unicron_bus::metrics::Metric`). Their names keep the executor's prefix:
//! the executor and every agent export them, and dashboards use them.

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
/// Every metric of the command protocol.
pub const METRICS: &[Metric] = &[COMMANDS, REJECTIONS, DUPLICATES];
