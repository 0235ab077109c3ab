//! The executor's own metrics, each declared once (see
//! `unicron_bus::metrics::Metric`); the command protocol's are
//! `unicron_commands::METRICS`.

use unicron_bus::metrics::Metric;

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

/// The metrics of the executor's backends.
pub const METRICS: &[Metric] = &[RETRIES, BACKEND_SECONDS];
