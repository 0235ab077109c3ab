//! Carrying out the planner's commands: each passes the executor's gate
//! and goes to the simulator's action handler, its result back to the
//! planner.

use unicron_core::executor::{ActionRequest, Outcome, result};
use unicron_core::planner::{Input, InputEvent, Output};
use unicron_core::{CommandResult, CommandStatus};

use super::{Logged, Offline};

impl Offline {
    /// Applies one planner input and carries out its commands, feeding
    /// each result back (which may lead to more commands).
    pub(super) fn plan(&mut self, input: Input) {
        let mut queue = vec![input];
        while let Some(input) = queue.pop() {
            for output in self.planner.apply(&input) {
                match output {
                    Output::Decision(decision) => {
                        self.flow.decisions += 1;
                        self.keep(|| Logged::Decision(decision));
                    }
                    Output::Command(command) => {
                        self.flow.commands += 1;
                        self.keep(|| Logged::Command(command.clone()));
                        let outcome: CommandResult = match self.gate.check(&command) {
                            Err(why) => {
                                self.flow.rejected_commands += 1;
                                result(
                                    &command,
                                    CommandStatus::Rejected,
                                    Some(why.to_string()),
                                    0,
                                    None,
                                    "offline",
                                )
                            }
                            Ok(()) => {
                                let answer = self.sim.act(&ActionRequest::new(&command, 1));
                                let status = match answer.status {
                                    Outcome::Succeeded => CommandStatus::Succeeded,
                                    Outcome::Failed => CommandStatus::Failed,
                                };
                                result(
                                    &command,
                                    status,
                                    answer.reason,
                                    answer.duration_ms.unwrap_or(0),
                                    answer.completed_ms,
                                    "offline",
                                )
                            }
                        };
                        self.keep(|| Logged::Result(outcome.clone()));
                        let offset = self.next_offset("command-results");
                        queue.push(Input {
                            topic: "command-results".into(),
                            partition: 0,
                            offset,
                            event: InputEvent::Result(outcome),
                        });
                    }
                    Output::Rejected(_) => {}
                }
            }
        }
    }
}
