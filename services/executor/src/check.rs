//! Checks shared by the executor's settings and its backends' settings:
//! each error names the field it is about.

use crate::error::ExecutorError;

/// A configuration error with `message` (which names the field).
pub(crate) fn config(message: impl Into<String>) -> ExecutorError {
    ExecutorError::Config(message.into())
}

/// Positive and finite, and small enough to be a `Duration`.
pub(crate) fn seconds(field: &str, value: f64) -> Result<(), ExecutorError> {
    unicron_commands::seconds(field, value).map_err(|e| config(e.0))
}
