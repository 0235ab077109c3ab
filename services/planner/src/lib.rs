//! unicron-planner: reads `unicron.failures`, `unicron.cluster` and
//! `unicron.command-results`, applies `unicron-core`'s planner, and commits
//! state, offsets and outputs atomically through `unicron-store` before
//! publishing `unicron.decisions` and `unicron.commands` (DESIGN §4).
//!
//! Thin by design (DESIGN §2): the service loop arrives with the planner issue.
