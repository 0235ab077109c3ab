//! Checks shared by the executor's settings and its backends' settings:
//! each error names the field it is about.

use crate::error::ExecutorError;

/// A configuration error with `message` (which names the field).
pub(crate) fn config(message: impl Into<String>) -> ExecutorError {
    ExecutorError::Config(message.into())
}

/// Positive and finite, and small enough to be a `Duration`.
pub(crate) fn seconds(field: &str, value: f64) -> Result<(), ExecutorError> {
    if value.is_finite() && value > 0.0 && value < 1e12 {
        Ok(())
    } else {
        Err(config(format!(
            "{field}: must be a positive number of seconds, not {value}"
        )))
    }
}
