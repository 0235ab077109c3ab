//! Who carries out the commands a [`crate::CommandProcessor`] lets through.

use std::future::Future;

use unicron_core::Command;

use crate::backend::Done;

/// How a carrier takes part in one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Act and publish results (the command names this carrier's node, or
    /// the carrier serves the whole cluster).
    Answer,
    /// Act, publish nothing: e.g. an agent whose node a re-plan took out of
    /// its job stops the job's workers, but the command is not for it.
    Silent,
    /// Nothing to do with this carrier: skipped before the gate.
    None,
}

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
