use unicron_bus::BusError;
use unicron_store::StoreError;

/// Errors that stop a service. A bad record never does: it is dead-lettered.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A processor staged state in a service that runs without a store.
    #[error("{service} has no state store, yet a step wrote state")]
    NoStore { service: &'static str },
}
