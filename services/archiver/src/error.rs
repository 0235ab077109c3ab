use unicron_bus::BusError;
use unicron_codec::archive::ArchiveError;
use unicron_runtime::RuntimeError;

/// Errors that stop the archiver. Bad records never do: they are
/// dead-lettered.
#[derive(Debug, thiserror::Error)]
pub enum ArchiverError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("archive: {0}")]
    Archive(#[from] ArchiveError),
}

impl From<BusError> for ArchiverError {
    fn from(error: BusError) -> Self {
        ArchiverError::Runtime(error.into())
    }
}
