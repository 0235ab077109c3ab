//! unicron-executor: reads `unicron.commands` for its own cluster, verifies
//! signatures, drops duplicates through `unicron-store`'s dedupe table, acts
//! through a backend and publishes `unicron.command-results`.
//!
//! Thin by design (DESIGN §2): the service loop arrives with the executor issue.
