//! Who carries out the commands a [`crate::CommandProcessor`] lets through.

use std::future::Future;

use unicron_core::Command;
use unicron_core::executor::Outcome;

pub use unicron_core::executor::Part;

/// Carries out commands that passed the gate.
pub trait Carrier: Send {
    /// Whether and how this carrier takes part in `command`. Decided from
    /// the command alone, so it is the same before and after acting.
    fn part(&self, command: &Command) -> Part;

    /// Carries out a verified command; the answer is final.
    fn act(&mut self, command: &Command) -> impl Future<Output = Done> + Send;

    /// The node results answer for; `None`: the whole command.
    fn node(&self) -> Option<&str> {
        None
    }
}

/// A carrier's final word on one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub outcome: Outcome,
    pub reason: Option<String>,
    /// The backend's duration if it gave one, else the time from the first
    /// attempt to the final answer.
    pub duration_ms: i64,
    /// Event time the backend says the action completed.
    pub completed_ms: Option<i64>,
}
