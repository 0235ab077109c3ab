//! unicron and Slurm. What Slurm says about nodes and jobs, read from its
//! JSON output (Slurm 22.05's and 23.02+'s shapes), what unicron tells it
//! through `scontrol` (drain, resume, shrink a job), and the poller that
//! turns node state into cluster events for the planner.
//!
//! Every call to a Slurm command has a timeout; a failed or timed-out call
//! is an error with Slurm's own message, never taken for success, and a
//! failed poll is "unknown", never "healthy".

pub mod cli;
pub mod error;
pub mod hostlist;
pub mod json;
pub mod metrics;
pub mod poller;
pub mod watch;

pub use self::metrics::METRICS;
pub use cli::Slurm;
pub use error::SlurmError;
pub use json::{JobView, NodeView};
pub use poller::{PollerSettings, run_poller};

/// Prefix of every drain reason unicron sets. Only such drains are
/// unicron's to lift; an operator's drain is never undone.
pub const REASON_PREFIX: &str = "unicron:";
