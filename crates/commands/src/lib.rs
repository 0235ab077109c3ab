//! unicron-commands: the command protocol every carrier shares. A signed
//! command is checked by `unicron-core`'s gate (signature, cluster, age),
//! carried out at most once per command id (the store's dedupe table), and
//! answered with an Accepted result before acting and a final one after,
//! both committed with the step. The executor runs it with a backend,
//! each `unicron agent` with its node's workers; both are services, this
//! is the library they share.

mod carrier;
pub mod dedupe;
mod gate;
pub mod metrics;
mod processor;

pub use carrier::{Carrier, Done, Part};
pub use gate::{SettingError, gate, seconds};
pub use metrics::METRICS;
pub use processor::CommandProcessor;
pub use unicron_core::executor::Outcome;
