//! unicron-executor: reads `unicron.commands` for its own cluster, checks
//! each command with `unicron-core`'s gate (signature, cluster, age; the
//! protocol is `unicron-commands`'), acts through a backend (HTTP, a local program, the simulator, Slurm or
//! Kubernetes; `backend/registry.rs` lists them) at most once
//! per command id thanks to the store's dedupe table, and publishes
//! `unicron.command-results` from an outbox (docs/design.md §4). Operator docs:
//! `docs/executor.md`.

mod backend;
mod check;
mod error;
pub mod metrics;
mod service;
mod settings;

pub use self::metrics::METRICS;
pub use backend::{
    Backend, BackendSettings, ExecSettings, HttpSettings, KubernetesSettings, SimulatorSettings,
    SlurmSettings,
};
pub use error::ExecutorError;
pub use service::run;
pub use settings::{ExecutorService, ExecutorSettings};
