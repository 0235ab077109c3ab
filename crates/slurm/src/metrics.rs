//! The Slurm client's and poller's metrics, each declared once (see
//! `unicron_bus::metrics::Metric`).

use unicron_bus::metrics::Metric;

/// Slurm commands run, by `program` and `ok` (exited 0).
pub const CALLS: Metric = Metric::counter(
    "unicron_slurm_calls_total",
    "Slurm commands run (scontrol, sinfo, squeue), by program and whether they exited 0.",
);
/// `slurm-watch` polls, by `what` (`nodes`, `jobs`) and `ok`.
pub const POLLS: Metric = Metric::counter(
    "unicron_slurm_polls_total",
    "slurm-watch polls, by what (nodes, jobs) and whether they succeeded.",
);

/// Every metric the Slurm crate exports.
pub const METRICS: &[Metric] = &[CALLS, POLLS];
