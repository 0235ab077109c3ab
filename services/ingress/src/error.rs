use unicron_bus::BusError;
use unicron_runtime::RuntimeError;

/// Errors that stop the ingress. Bad records never do: they are dead-lettered.
#[derive(Debug, thiserror::Error)]
pub enum IngressError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl From<BusError> for IngressError {
    fn from(error: BusError) -> Self {
        IngressError::Runtime(error.into())
    }
}
