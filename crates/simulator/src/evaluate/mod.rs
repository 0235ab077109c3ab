//! The evaluation: recovery policies compared under the same failures, in
//! the offline loop (the core detector and planner the services run).
//!
//! A policy here is more than the planner's policy: it is also how soon the
//! system learns of a failure and how long its recovery mechanisms take.
//! Every number is documented with its source in `docs/EVALUATION.md`;
//! those without one are marked as assumptions there and below.
//!
//! `policy` models the systems, `scenario` the settings, `running` runs
//! them, `tables` and `plots` render the results.

mod plots;
mod policy;
mod running;
mod scenario;
mod tables;

pub use plots::{ratio_svg, svg};
pub use policy::{
    BAMBOO_OOM, MEASURED_RECONFIGURE_S, MEASURED_REPLICA_MB_S, MEASURED_RESTART_S,
    MEASURED_RESTORE_MB_S, MEGATRON_RESTART_S, OOBLECK_RECONFIGURE_S, PolicyModel,
    STATE_BYTES_PER_PARAMETER, VARUNA_CHECKPOINT_S, VARUNA_ITERATION_S, VARUNA_RESTART_S,
    VARUNA_VS_OOBLECK, policies, state_move_s, unicron_transitions,
};
pub use running::{Evaluation, PolicyResult, Run, evaluate, offline_for, run, sim_for};
pub use scenario::{Failures, RATE_SWEEP, REAL_SWEEP, Scenario, scenarios};
pub use tables::{downtime_table, ratio_table, table};

#[cfg(test)]
mod tests;
