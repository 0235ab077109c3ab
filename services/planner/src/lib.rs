//! unicron-planner: reads `unicron.failures`, `unicron.cluster` and
//! `unicron.command-results`, applies `unicron-core`'s planner, and commits
//! state, consumed offsets and outputs in one RocksDB batch before
//! publishing `unicron.decisions` and `unicron.commands` from the outbox
//! (docs/design.md §4). Thin by design: every decision is in `unicron-core`.

mod checkpoint;
mod error;
pub mod metrics;
mod service;
mod settings;
mod stored;
mod takeover;

pub use self::metrics::METRICS;
pub use error::PlannerError;
pub use service::run;
pub use settings::PlannerSettings;
