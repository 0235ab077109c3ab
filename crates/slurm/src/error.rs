use std::time::Duration;

/// Why a call to Slurm did not give an answer.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("`{program}` cannot be run: {source}")]
    Missing {
        program: String,
        source: std::io::Error,
    },
    #[error("`{command}` timed out after {}s", .after.as_secs_f64())]
    Timeout { command: String, after: Duration },
    #[error("`{command}` failed ({status}): {message}")]
    Failed {
        command: String,
        status: String,
        message: String,
    },
    #[error("`{command}` printed what is not Slurm's JSON: {reason}")]
    Parse { command: String, reason: String },
}
