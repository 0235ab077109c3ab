use unicron_bus::BusError;
use unicron_runtime::RuntimeError;

/// Errors that stop the detector. Bad records never do: they are dead-lettered.
#[derive(Debug, thiserror::Error)]
pub enum DetectorError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl From<BusError> for DetectorError {
    fn from(error: BusError) -> Self {
        DetectorError::Runtime(error.into())
    }
}
