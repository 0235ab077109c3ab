use unicron_bus::BusError;
use unicron_runtime::RuntimeError;
use unicron_store::StoreError;

/// Errors that stop the executor. Bad records never do: they are
/// dead-lettered or rejected with a result.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl From<BusError> for ExecutorError {
    fn from(error: BusError) -> Self {
        ExecutorError::Runtime(error.into())
    }
}

impl From<StoreError> for ExecutorError {
    fn from(error: StoreError) -> Self {
        ExecutorError::Runtime(error.into())
    }
}
