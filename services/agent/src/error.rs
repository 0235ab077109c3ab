use unicron_bus::BusError;
use unicron_runtime::RuntimeError;

/// Errors that stop the agent. Commands it cannot carry out never do:
/// they get a failed or rejected result.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl From<BusError> for AgentError {
    fn from(error: BusError) -> Self {
        AgentError::Runtime(error.into())
    }
}
