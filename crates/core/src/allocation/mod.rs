//! Plan generation after the Unicron paper's cost model (docs/design.md §7):
//! choose GPUs per job to maximise Σ G(t, x_t) subject to Σ x_t ≤ healthy
//! GPUs, by the dynamic programme S[i][j] = max_k S[i−1][j−k] + G(t_i, k)
//! over allocation units.
//!
//! `profile` is the throughput model T(x), `solver` the problem and its
//! dynamic programme, `request` the JSON format of `unicron plan`.

mod profile;
mod request;
mod solver;

pub use profile::Profile;
pub use request::{
    MAX_PLAN_CELLS, MAX_PLAN_JOBS, MAX_PLAN_POINTS, MAX_PLAN_STEPS, MAX_PLAN_UNITS, PlanRequest,
    PlanRequestJob, PlanResponse,
};
pub use solver::{Allocation, JobDemand, Problem};

/// Why a profile or problem is not usable; `field` names the culprit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidInput {
    pub field: String,
    pub reason: String,
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> InvalidInput {
    InvalidInput {
        field: field.into(),
        reason: reason.into(),
    }
}
