//! Who carries out the commands a [`crate::CommandProcessor`] lets through.

use std::future::Future;

use unicron_core::Command;

pub use unicron_core::executor::Part;

use crate::backend::Done;

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
