//! Catching up: bringing a planner to the state of the instance that took
//! a run of recorded decisions. A planner taking over a partition and the
//! status page's shadow planner both do it, one decision at a time.

use super::split;
use crate::planner::{Input, Planner};
use crate::records::Decision;

/// What catching up with decisions taken elsewhere did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CatchUp {
    pub applied: u64,
    /// Decisions this planner did not reproduce (another policy or config).
    pub diverged: u64,
    pub first_divergence: Option<String>,
}

impl CatchUp {
    /// Applies the input `recorded` was taken on and counts the step; true
    /// if `planner` took the same decision.
    pub fn step(&mut self, planner: &mut Planner, input: &Input, recorded: &Decision) -> bool {
        let replayed = split(planner.apply(input)).decision;
        self.applied += 1;
        let same = replayed.as_ref() == Some(recorded);
        if !same {
            self.diverged += 1;
            if self.first_divergence.is_none() {
                self.first_divergence = Some(recorded.id.clone());
            }
        }
        same
    }
}

/// Brings `planner` to the state of the instance that took `steps`: each
/// recorded decision's input, applied in decision order, exactly as replay
/// does. A planner that takes over a partition uses it, so its state is the
/// previous owner's and not whatever its own read order would build.
pub fn catch_up(planner: &mut Planner, steps: &[(Input, Decision)]) -> CatchUp {
    let mut out = CatchUp::default();
    for (input, recorded) in steps {
        out.step(planner, input, recorded);
    }
    out
}
