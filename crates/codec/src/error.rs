/// Errors of encoding and of the built-in topology. Decode failures of
/// single records are not errors here: they are `DecodeError`s, for the
/// dead-letter topic.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("encode {record}: {reason}")]
    Encode {
        record: &'static str,
        reason: String,
    },
    #[error("topology: {0}")]
    Topology(String),
}
