//! The one error kind the binary treats apart: the operator's input.

/// Bad input from the operator (a file, a flag): exit code 2, one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
