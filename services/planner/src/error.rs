use unicron_bus::BusError;
use unicron_runtime::RuntimeError;
use unicron_store::StoreError;

/// Errors that stop the planner. Bad records never do: they are dead-lettered.
#[derive(Debug, thiserror::Error)]
pub enum PlannerError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("stored state of cluster {cluster} is unreadable: {reason}")]
    CorruptState { cluster: String, reason: String },
}

impl From<BusError> for PlannerError {
    fn from(error: BusError) -> Self {
        PlannerError::Runtime(error.into())
    }
}

impl From<StoreError> for PlannerError {
    fn from(error: StoreError) -> Self {
        PlannerError::Runtime(error.into())
    }
}

impl From<unicron_codec::CodecError> for PlannerError {
    fn from(error: unicron_codec::CodecError) -> Self {
        PlannerError::Runtime(BusError::from(error).into())
    }
}
