//! What the dedupe table remembers per command id. A command is marked
//! started (with the Accepted result) before the backend is called, and
//! finished (with the final result and the consumed offset) after it
//! answers, so a restart can tell "never seen", "acted, outcome unknown"
//! and "done" apart.

use unicron_core::CommandStatus;

/// The dedupe key of a command id.
pub fn key(command_id: &str) -> Vec<u8> {
    format!("command/{command_id}").into_bytes()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// The backend was (or was about to be) called; no answer is stored.
    Started,
    /// A result with this status was committed: never act again.
    Finished(CommandStatus),
}

const STARTED: &[u8] = b"started";
const FINISHED: &[u8] = b"finished:";

impl Marker {
    pub fn encode(self) -> Vec<u8> {
        match self {
            Marker::Started => STARTED.to_vec(),
            Marker::Finished(status) => {
                let mut out = FINISHED.to_vec();
                out.extend_from_slice(status_name(status).as_bytes());
                out
            }
        }
    }

    /// Anything but a clean "started" counts as finished: when in doubt,
    /// do not act twice.
    pub fn decode(bytes: &[u8]) -> Marker {
        if bytes == STARTED {
            return Marker::Started;
        }
        let status = bytes
            .strip_prefix(FINISHED)
            .and_then(|name| {
                [
                    CommandStatus::Succeeded,
                    CommandStatus::Failed,
                    CommandStatus::Rejected,
                ]
                .into_iter()
                .find(|s| status_name(*s).as_bytes() == name)
            })
            .unwrap_or(CommandStatus::Unknown);
        Marker::Finished(status)
    }
}

/// The status as results and metrics spell it.
pub fn status_name(status: CommandStatus) -> &'static str {
    match status {
        CommandStatus::Accepted => "accepted",
        CommandStatus::Succeeded => "succeeded",
        CommandStatus::Failed => "failed",
        CommandStatus::Rejected => "rejected",
        CommandStatus::Unknown => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_garbage_means_finished() {
        for marker in [
            Marker::Started,
            Marker::Finished(CommandStatus::Succeeded),
            Marker::Finished(CommandStatus::Failed),
            Marker::Finished(CommandStatus::Rejected),
        ] {
            assert_eq!(Marker::decode(&marker.encode()), marker);
        }
        assert_eq!(
            Marker::decode(b"st"),
            Marker::Finished(CommandStatus::Unknown)
        );
    }
}
